"""Recount PolderCast's incomplete rings per snapshot from a run's snapshots/, apart from
the analysis (a second route for `ring_convergence`): a ring (a topic with two or more alive
subscribers) is complete when each member's first successor and first predecessor slots hold
its true neighbours by ring id (BLAKE2b of the node id, hashed anew here).

    python scripts/ring_recount.py RUN_DIR [--from CYCLE]

Prints, per gossip cycle: incomplete rings, rings, and the share incomplete in %.
"""

from __future__ import annotations

import argparse
import hashlib
from collections import defaultdict
from pathlib import Path

import pyarrow.parquet as pq


def ring_id(node: int) -> int:
    return int.from_bytes(hashlib.blake2b(node.to_bytes(8, "big"), digest_size=8).digest(), "big")


def snapshots(run_dir: Path) -> dict[float, dict]:
    """Per gossip cycle: each node's topics and its first-slot successor and predecessor per topic."""
    at: dict[float, dict] = defaultdict(lambda: {"topics": {}, "rings.succ": {}, "rings.pred": {}})
    for f in sorted((run_dir / "snapshots").glob("*.parquet")):
        for r in pq.read_table(f).to_pylist():
            s = at[r["gossip_ns"] / 1e9]
            s["topics"][r["node"]] = r["topics"]
            if r["layer"] in ("rings.succ", "rings.pred"):
                s[r["layer"]][r["node"]] = {t: ns[0] for t, ns in r["per_topic"] if ns}
    return at


def incomplete(s: dict) -> tuple[int, int]:
    members: dict[str, list[int]] = defaultdict(list)
    for node, topics in s["topics"].items():
        for t in topics:
            members[t].append(node)
    rings = bad = 0
    for t, nodes in members.items():
        if len(nodes) < 2:
            continue
        rings += 1
        nodes.sort(key=ring_id)
        k = len(nodes)
        bad += any(s["rings.succ"].get(x, {}).get(t) != nodes[(i + 1) % k]
                   or s["rings.pred"].get(x, {}).get(t) != nodes[i - 1] for i, x in enumerate(nodes))
    return bad, rings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--from", dest="start", type=float, default=0.0, help="first gossip cycle printed")
    args = parser.parse_args()
    for cycle, s in sorted(snapshots(args.run_dir).items()):
        if cycle >= args.start:
            bad, rings = incomplete(s)
            print(f"{cycle:g}\t{bad}\t{rings}\t{100 * bad / rings:.2f}")


if __name__ == "__main__":
    main()
