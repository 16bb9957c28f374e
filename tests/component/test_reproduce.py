"""`overlaylab reproduce` end to end at quick scale: the claims that fit in `make test`, each with
the verdict recorded here (a claim that reproduced and no longer does fails), the report's pages
and every image they show; then SpiderCast's C2 under a broken rule (a monkeypatch, in the run
processes, that makes every node believe its topics covered): not reproduced, the command failing."""

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
FIT = {
    "P1": "reproduced", "P2": "reproduced", "P10": "not reproduced", "P15": "reproduced",
    "C1": "within tolerance", "C2": "reproduced", "C3": "not reproduced",
    "S1": "reproduced", "S2": "within tolerance", "S9": "not reproduced",
    "R1": "not reproduced", "R2": "not reproduced", "R3": "within tolerance", "R4": "reproduced", "R5": "reproduced",
}
"""The quick claims whose runs fit in a few minutes, with their verdicts at quick scale (a "not
reproduced" here has its registered explanation, or the command would exit 1)."""


def reproduce(out: Path, claims: list[str], env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "controller.cli.main", "reproduce", *claims, "--scale", "quick",
                           "--out", str(out)], cwd=ROOT, capture_output=True, text=True, env=env, timeout=1200)


def images(page: Path) -> list[Path]:
    return [page.parent / src for src in re.findall(r'<img src="([^"]+)"', page.read_text())]


@pytest.mark.slow
@pytest.mark.component
def test_the_quick_claims_that_fit_keep_their_verdicts(tmp_path):
    done = reproduce(tmp_path, list(FIT))
    assert done.returncode == 0, done.stderr[-3000:]
    record = json.loads((tmp_path / "reproduce.json").read_text())
    claims = {c["id"]: c for paper in record["papers"].values() for c in paper["claims"]}
    assert {k: c["verdict"] for k, c in claims.items()} == FIT
    assert all(c["explained"] for c in claims.values() if c["verdict"] == "not reproduced")
    assert claims["C2"]["ours"] == 0
    for paper in record["papers"]:
        page = tmp_path / f"{paper}.html"
        assert f"{paper}.html" in (tmp_path / "index.html").read_text()
        assert images(page) and all(p.stat().st_size > 1000 for p in images(page))


@pytest.mark.slow
@pytest.mark.component
def test_a_broken_rule_turns_a_claim_to_not_reproduced_and_fails_the_command(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(BROKEN)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(ROOT)])}
    done = reproduce(tmp_path / "broken", ["C2"], env)
    assert done.returncode == 1, done.stderr[-3000:]
    assert "not reproduced: C2" in done.stderr
    [claim] = json.loads((tmp_path / "broken" / "reproduce.json").read_text())["papers"]["spidercast"]["claims"]
    assert claim["verdict"] == "not reproduced" and claim["ours"] > 0
