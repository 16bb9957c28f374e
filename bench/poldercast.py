"""`make bench-poldercast`: the PolderCast E1 file (Twitter-like social workload) in ``sim``.

A whole E1 at 1,000 nodes (60 cycles), and the first cycles of E1 at 1,000 and 10,000 nodes side
by side (each its own process, peak RSS from ``wait4``), so the 10K figure comes with a
same-machine baseline and a ratio. A whole 10K E1 takes about an hour of one core (56 min,
1,146 MiB on 2026-11-26); the slice measures its start, where per-cycle cost is lowest (the
RINGS and VICINITY views of the nodes with thousands of topics grow as the rings fill).
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run import RESULTS, ROOT, header, timed

EXPERIMENT = ROOT / "experiments" / "poldercast-e1-convergence.yaml"
SLICE_ROUNDS = 3


def e1(nodes: int, rounds: int, out: Path) -> dict:
    cmd = [sys.executable, "-m", "controller.cli", "run", str(EXPERIMENT), "--out", str(out), "--no-analyze",
           "--set", f"nodes.count={nodes}", "--set", f"publications.rounds={rounds}"]
    r = timed(cmd)
    r.pop("stdout")
    [run_dir] = [p for p in out.iterdir() if p.is_dir()]
    meta = json.loads((run_dir / "run.json").read_text())
    virtual_s = (meta["ended_ns"] - meta["started_ns"]) / 1e9
    r.update(virtual_s=round(virtual_s, 2), nodes=nodes, cycles=rounds, sim_steps=meta["sim_steps"],
             wall_per_virtual_s=round(r["wall_s"] / virtual_s, 2))
    return r


def main() -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    runs = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, nodes, rounds in (("1000-slice", 1000, SLICE_ROUNDS), ("10000-slice", 10000, SLICE_ROUNDS),
                                    ("1000-full", 1000, 60)):
            out = Path(tmp) / name
            out.mkdir()
            runs[name] = e1(nodes, rounds, out)
            print(f"E1 {name}: {runs[name]['wall_s']} s, {runs[name]['peak_rss_mib']} MiB", flush=True)
    record = {
        **header("poldercast-e1", "experiments/poldercast-e1-convergence.yaml --set nodes.count=N --set publications.rounds=R"),
        "runs": runs,
        "ratio_10k_to_1k_slice": {
            "wall": round(runs["10000-slice"]["wall_s"] / runs["1000-slice"]["wall_s"], 2),
            "peak_rss": round(runs["10000-slice"]["peak_rss_mib"] / runs["1000-slice"]["peak_rss_mib"], 2),
        },
    }
    path = RESULTS / "poldercast-e1.json"
    path.write_text(json.dumps(record, indent=2) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
