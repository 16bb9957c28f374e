"""`make bench-spark-small`: the analysis of small runs (one shuffle partition) with
``analysis.spark.SMALL_INPUT`` against Spark's defaults, side by side in one Spark session,
written to bench/results/spark-small.json.

Small runs are what tests, sweeps and ``overlaylab reproduce --scale quick`` analyse by the
dozen; their analysis is ~50 Spark jobs on a few MB, so it costs planning and compilation more
than data. Each synthetic run (``analysis.synthetic``) is analysed once to warm the JVM, then
``--reps`` times under each setting, alternating; every summary.json value must agree between
the two, or the benchmark fails.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import analysis.spark as spark_settings
from analysis.jobs.summarize import run as summarize
from analysis.synthetic import write_synthetic_run
from bench.run import RESULTS, header
from bench.spark import RUN_FACTS, leaves

DEFAULTS = dict.fromkeys(spark_settings.SMALL_INPUT, "true")


def values(summary: dict) -> dict[str, object]:
    return {k: v for k, v in leaves(summary).items() if k.split(".")[1].split("[")[0] not in RUN_FACTS}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=4, help="synthetic runs, seeds 1..N")
    ap.add_argument("--spans", type=int, default=20_000)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    small = dict(spark_settings.SMALL_INPUT)
    walls: dict[str, list[float]] = {"spark_defaults": [], "small_input": []}
    with tempfile.TemporaryDirectory() as tmp:
        runs = [write_synthetic_run(Path(tmp) / f"run-{s}", args.spans, nodes=500, topics=50, seed=s)
                for s in range(1, args.runs + 1)]
        spark = spark_settings.get_spark()
        for rd in runs:
            summarize(rd, spark)  # JIT and caches warm before anything is timed
        seen: dict[str, dict[Path, dict]] = {k: {} for k in walls}
        for _ in range(args.reps):
            for label, settings in (("spark_defaults", DEFAULTS), ("small_input", small)):
                spark_settings.SMALL_INPUT = settings
                start = time.perf_counter()
                for rd in runs:
                    seen[label][rd] = values(summarize(rd, spark))
                walls[label].append(round(time.perf_counter() - start, 1))
        spark_settings.SMALL_INPUT = small
    differ = sorted({k for rd in runs for k, v in seen["small_input"][rd].items() if seen["spark_defaults"][rd].get(k) != v})
    if differ:
        raise SystemExit(f"the settings change the summary: {differ[:10]}")
    best = {k: min(v) for k, v in walls.items()}
    record = {
        **header("spark-small-runs", f"analysis.synthetic: {args.runs} runs of {args.spans:,} spans, 500 nodes, 50 topics"),
        "settings": small, "walls_s": walls,
        "ratio_small_input_to_defaults": round(best["small_input"] / best["spark_defaults"], 2),
        "summary_values_compared": sum(len(v) for v in seen["small_input"].values()), "values_differing": 0,
    }
    path = RESULTS / "spark-small.json"
    path.write_text(json.dumps(record, indent=2) + "\n")
    print(f"{walls}: ratio {record['ratio_small_input_to_defaults']}; wrote {path}")


if __name__ == "__main__":
    main()
