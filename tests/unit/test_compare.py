"""`overlaylab compare` carries each run's fidelity verdict beside its metrics (analysis/compare.py)."""

import json

from analysis.compare import compare


def test_compare_lists_each_run_s_verdict(tmp_path):
    for name, verdict in (("a", "ok"), ("b", "invalid"), ("c", None)):
        (tmp_path / name).mkdir()
        summary = {"run_id": name, "backend": "local", "hit_ratio": 1.0, "fidelity": {"verdict": verdict} if verdict else {}}
        (tmp_path / name / "summary.json").write_text(json.dumps(summary))
    result = compare([tmp_path / n for n in "abc"])
    assert result["verdicts"] == ["ok", "invalid", None]
    assert result["metrics"][0] == {"metric": "hit_ratio", "values": [1.0, 1.0, 1.0], "diff": [0.0, 0.0]}
