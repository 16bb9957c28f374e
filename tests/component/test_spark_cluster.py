"""`overlaylab analyze s3a://... --master spark://...`: a run directory in object storage (moto's
S3 server, from its own venv: `make test` builds .venv-s3) analysed where it lies by a Spark
standalone cluster (a master and a worker JVM from pyspark's own distribution), as a deployment
would; the summary it writes into the bucket is the one the plain-Python crosscheck computes
from the same files on disk (analysis/crosscheck.py, which agrees with local[*]:
test_crosscheck.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path

import pyspark
import pytest

from analysis.crosscheck import compare
from tests.helpers import free_port, synthetic_run, wait_for_port

SPARK_CLASS = Path(pyspark.__file__).parent / "bin" / "spark-class"
MOTO = Path(__file__).resolve().parents[2] / ".venv-s3" / "bin" / "moto_server"


def _request(method: str, url: str, data: bytes | None = None) -> bytes:
    headers = {"Content-Type": "application/octet-stream",  # not urllib's default form encoding
               # the access key the analysis uses (moto reads it, and checks no signature)
               "Authorization": "AWS4-HMAC-SHA256 Credential=test/20260101/us-east-1/s3/aws4_request, "
                                "SignedHeaders=host, Signature=0"}
    with urllib.request.urlopen(urllib.request.Request(url, data=data, method=method, headers=headers), timeout=30) as r:
        return r.read()


@pytest.fixture
def s3_endpoint():
    assert MOTO.exists(), "moto's S3 server is missing: make .venv-s3/bin/moto_server"
    port = free_port()
    server = subprocess.Popen([MOTO, "-H", "127.0.0.1", "-p", str(port)], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        wait_for_port(port)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.terminate()
        server.wait(10)


@pytest.fixture
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


@pytest.mark.slow
def test_a_run_in_object_storage_is_analysed_in_place_on_a_standalone_spark_cluster(tmp_path, s3_endpoint,
                                                                                     spark_master):
    url, work = spark_master
    local = synthetic_run(tmp_path / "run", spans=5000, nodes=200, topics=20)
    bucket = f"{s3_endpoint}/runs"
    _request("PUT", bucket)  # path-style S3 REST
    for f in local.rglob("*"):
        if f.is_file():
            _request("PUT", f"{bucket}/r1/{f.relative_to(local).as_posix()}", f.read_bytes())

    conf = {"fs.s3a.endpoint": s3_endpoint, "fs.s3a.path.style.access": "true", "fs.s3a.access.key": "test",
            "fs.s3a.secret.key": "test", "fs.s3a.endpoint.region": "us-east-1"}
    cmd = [sys.executable, "-m", "controller.cli.main", "analyze", "s3a://runs/r1", "--master", url,
           "--conf", "spark.executor.memory=512m",
           *(a for k, v in conf.items() for a in ("--conf", f"spark.hadoop.{k}={v}"))]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]

    listing = _request("GET", f"{bucket}?list-type=2&prefix=r1/").decode()
    for key in ("r1/summary.json", "r1/report.html", "r1/plots/latency_cdf.png", "r1/metrics/deliveries.parquet/part-"):
        assert f"<Key>{key}" in listing, key
    # the work ran in the worker's executor: it made an application directory with its log
    assert list(work.glob("app-*/*/stderr"))
    (local / "summary.json").write_bytes(_request("GET", f"{bucket}/r1/summary.json"))
    summary = json.loads((local / "summary.json").read_text())
    assert summary["deliveries"] > 0 and sum(summary["hop_histogram"].values()) == summary["deliveries"]
    assert [r for r in compare(local) if not r["agree"]] == []
