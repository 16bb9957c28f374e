"""`overlaylab analyze --master spark://...`: the analysis on a Spark standalone cluster (a master
and a worker JVM started from pyspark's own distribution) gives the summary the plain-Python
crosscheck computes (analysis/crosscheck.py, which agrees with local[*]: test_crosscheck.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyspark
import pytest

from analysis.crosscheck import compare
from tests.helpers import free_port, synthetic_run, wait_for_port

SPARK_CLASS = Path(pyspark.__file__).parent / "bin" / "spark-class"


@pytest.fixture(scope="module")
def spark_master(tmp_path_factory):
    work = tmp_path_factory.mktemp("worker")
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_HOME": str(SPARK_CLASS.parent.parent),
           "SPARK_WORKER_DIR": str(work)}
    port = free_port()
    master = subprocess.Popen([SPARK_CLASS, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                               "--port", str(port), "--webui-port", str(free_port())],
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    procs = [master]
    try:
        wait_for_port(port)
        url = f"spark://127.0.0.1:{port}"
        procs.append(subprocess.Popen([SPARK_CLASS, "org.apache.spark.deploy.worker.Worker", url, "--cores", "1",
                                       "--memory", "1g", "--webui-port", str(free_port())],
                                      env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        yield url, work
    finally:
        for p in reversed(procs):
            p.terminate()
            p.wait(30)


def test_the_analysis_runs_on_a_standalone_spark_cluster(tmp_path, spark_master):
    url, work = spark_master
    rd = synthetic_run(tmp_path / "run", spans=5000, nodes=200, topics=20)
    proc = subprocess.run([sys.executable, "-m", "controller.cli", "analyze", str(rd), "--master", url,
                           "--conf", "spark.executor.memory=512m"], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    there = json.loads((rd / "summary.json").read_text())
    assert there["deliveries"] > 0 and sum(there["hop_histogram"].values()) == there["deliveries"]
    assert [r for r in compare(rd) if not r["agree"]] == []
    # the work ran in the worker's executor: it made an application directory with its log
    assert list(work.glob("app-*/*/stderr"))
