"""A short atheris run of ``tests/fuzz.py`` (the codec and both services' requests, fed to live
cores): no crash and no hang in 50,000 generated inputs."""

import re
import subprocess
import sys

from tests.conftest import ROOT


def test_fuzzing_the_inbound_boundary_finds_no_crash_or_hang(tmp_path):
    done = subprocess.run([sys.executable, "-m", "tests.fuzz", "-runs=50000", "-timeout=5", "-seed=1",
                           f"-artifact_prefix={tmp_path}/"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert re.search(r"Done 50000 runs", done.stderr)
    assert not list(tmp_path.iterdir())  # no crash-*/timeout-* artifact
