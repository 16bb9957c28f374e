"""`overlaylab reproduce` end to end on one claim (SpiderCast's C2, its quick run: 1,000 nodes):
the verdict, the report's pages and every image they show; and the same claim under a broken
rule (a monkeypatch, in the run processes, that makes every node believe its topics covered)
not reproduced, with the command failing."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BROKEN = """
import node.protocols.spidercast.protocol as p
p.Task.uncovered = lambda self, topics, without=None: 0  # every topic taken for covered: no links
"""


def reproduce(out: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "controller.cli.main", "reproduce", "C2", "--scale", "quick",
                           "--out", str(out)], cwd=ROOT, capture_output=True, text=True, env=env, timeout=900)


def images(page: Path) -> list[Path]:
    return [page.parent / src for src in re.findall(r'<img src="([^"]+)"', page.read_text())]


@pytest.mark.slow
@pytest.mark.component
def test_a_claim_reproduces_and_a_broken_rule_does_not(tmp_path):
    done = reproduce(tmp_path / "ok")
    assert done.returncode == 0, done.stderr[-3000:]
    record = json.loads((tmp_path / "ok" / "reproduce.json").read_text())
    [claim] = record["papers"]["spidercast"]["claims"]
    assert claim["id"] == "C2" and claim["verdict"] == "reproduced" and claim["ours"] == 0
    index, page = tmp_path / "ok" / "index.html", tmp_path / "ok" / "spidercast.html"
    assert "spidercast.html" in index.read_text() and "C2" in page.read_text()
    assert images(page) and all(p.stat().st_size > 1000 for p in images(page))

    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(BROKEN)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(ROOT)])}
    done = reproduce(tmp_path / "broken", env)
    assert done.returncode == 1, done.stderr[-3000:]
    assert "not reproduced: C2" in done.stderr
    [claim] = json.loads((tmp_path / "broken" / "reproduce.json").read_text())["papers"]["spidercast"]["claims"]
    assert claim["verdict"] == "not reproduced" and claim["ours"] > 0
