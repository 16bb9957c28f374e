"""`overlaylab analyze s3a://...`: a run directory in object storage (moto's S3 server) is analysed
where it lies, with the same summary as the same run analysed on the local disk."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import boto3
import pytest

from controller.cli import main

S3 = {"endpoint_url": None, "aws_access_key_id": "test", "aws_secret_access_key": "test", "region_name": "us-east-1"}


@pytest.fixture(scope="module")
def s3_endpoint():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen([Path(sys.executable).parent / "moto_server", "-H", "127.0.0.1", "-p", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.1)
        yield url
    finally:
        server.terminate()
        server.wait(10)


def test_a_run_in_object_storage_is_analysed_in_place(tmp_path, s3_endpoint):
    local = tmp_path / "run"
    for argv in (["synthetic", str(local), "--spans", "5000", "--nodes", "200", "--topics", "20"], ["analyze", str(local)]):
        with pytest.raises(SystemExit) as done:
            main(argv)
        assert done.value.code == 0
    s3 = boto3.client("s3", **{**S3, "endpoint_url": s3_endpoint})
    s3.create_bucket(Bucket="runs")
    for f in local.rglob("*"):
        if f.is_file() and f.relative_to(local).parts[0] in ("traces", "run.json", "experiment.yaml",
                                                               "subscriptions.jsonl", "timeline.jsonl"):
            s3.upload_file(str(f), "runs", f"r1/{f.relative_to(local).as_posix()}")

    conf = {"fs.s3a.endpoint": s3_endpoint, "fs.s3a.path.style.access": "true", "fs.s3a.access.key": "test",
            "fs.s3a.secret.key": "test", "fs.s3a.endpoint.region": "us-east-1"}
    cmd = [sys.executable, "-m", "controller.cli", "analyze", "s3a://runs/r1",
           *(a for k, v in conf.items() for a in ("--conf", f"spark.hadoop.{k}={v}"))]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]

    keys = {o["Key"] for o in s3.list_objects_v2(Bucket="runs", Prefix="r1/")["Contents"]}
    assert {"r1/summary.json", "r1/report.html", "r1/plots/latency_cdf.png"} <= keys
    assert any(k.startswith("r1/metrics/deliveries.parquet/part-") for k in keys)
    remote = json.loads(s3.get_object(Bucket="runs", Key="r1/summary.json")["Body"].read())
    here = json.loads((local / "summary.json").read_text())
    for key in ("events", "expected_receivers", "deliveries", "hit_ratio", "latency_ms", "hops",
                "duplication_factor", "relay_ratio", "churn", "hop_histogram"):
        assert remote[key] == here[key], key
