"""A directory of hostile experiment files (tests/hostile/, each with the words its refusal must
contain in refusals.json): every one is refused by `validate` and by `run` (a sweep file: by
`sweep`) within 2 s of CPU (and 20 s of wall time, which a busy machine stretches) and 200 MB,
naming the field or line at fault, with no traceback and no run directory left behind."""

import json
import time
import tracemalloc
from pathlib import Path

import pytest

from controller.cli.main import main

HOSTILE = Path(__file__).resolve().parent.parent / "hostile"
REFUSALS = json.loads((HOSTILE / "refusals.json").read_text())


def test_the_directory_holds_at_least_forty_files_each_with_its_refusal():
    assert len(REFUSALS) >= 40 and sorted(p.stem for p in HOSTILE.glob("*.yaml")) == sorted(REFUSALS)


@pytest.mark.parametrize("name", sorted(REFUSALS))
def test_a_hostile_file_is_refused_quickly_with_its_field_named(name, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("OVERLAYLAB_DATA_DIR", str(tmp_path / "datasets"))
    monkeypatch.chdir(tmp_path)  # relative data paths point here, where nothing is
    path = HOSTILE / f"{name}.yaml"
    then = "sweep" if name.startswith("sweep-") else "run"  # `run` ignores a file's sweep section
    for command in (["validate", str(path)], [then, str(path), "--out", str(tmp_path / "runs")]):
        tracemalloc.start()
        start, cpu = time.monotonic(), time.process_time()
        with pytest.raises(SystemExit) as done:
            main(command)
        wall, took, (_, peak) = time.monotonic() - start, time.process_time() - cpu, tracemalloc.get_traced_memory()
        tracemalloc.stop()
        err = capsys.readouterr().err
        assert done.value.code == 2, err
        assert REFUSALS[name] in err and "Traceback" not in err, err[-2000:]
        assert took < 2 and wall < 20 and peak < 200 << 20, (took, wall, peak)
    assert not (tmp_path / "runs").exists()
