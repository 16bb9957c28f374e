"""The chart's web token (issue 52): the results server and the Locust master's web UI answer
only requests that carry it; with the token's file given, nothing else gets through."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tarfile
import threading
import time
import urllib.error
import urllib.request

import pytest

from controller.backends.results import TOKEN_FILE_ENV, TOKEN_HEADER, serve
from loadgen.plan import write_load_plan
from tests.conftest import ROOT
from tests.helpers import free_port

pytestmark = pytest.mark.component
TOKEN = "s3cret-token-of-the-run"


def get(url: str, headers: dict | None = None) -> tuple[int, bytes, dict]:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}), timeout=10) as r:
            return r.status, r.read(), dict(r.headers)
    except urllib.error.HTTPError as e:
        return e.code, e.read(), dict(e.headers)


def up_and_refusing(url: str, proc: subprocess.Popen | None = None, timeout_s: float = 60.0) -> None:
    """Wait until the server at ``url`` answers (on a busy machine it may take a while to bind),
    and check that it answers 401 to a request without the token."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            status = get(url)[0]
            break
        except OSError:
            assert time.monotonic() < deadline and (proc is None or proc.poll() is None), f"{url} never came up"
            time.sleep(0.2)
    assert status == 401


def test_the_results_server_serves_a_run_only_with_the_token(tmp_path):
    (tmp_path / "r1").mkdir()
    (tmp_path / "r1" / "run.json").write_text("{}")
    port = free_port()
    threading.Thread(target=serve, args=(tmp_path, port, TOKEN), daemon=True).start()
    url = f"http://127.0.0.1:{port}"
    up_and_refusing(f"{url}/healthz")
    assert get(f"{url}/r1.tar.gz")[0] == 401
    assert get(f"{url}/r1.tar.gz", {TOKEN_HEADER: "guess"})[0] == 401
    status, body, _ = get(f"{url}/r1.tar.gz", {TOKEN_HEADER: TOKEN})
    assert status == 200
    assert "r1/run.json" in tarfile.open(fileobj=io.BytesIO(body), mode="r:gz").getnames()


def test_the_locust_web_ui_answers_only_with_the_token(tmp_path):
    (tmp_path / "token").write_text(TOKEN + "\n")
    write_load_plan(tmp_path / "plan.json", addrs={0: "127.0.0.1:1"}, subscriptions=[frozenset({"t0"})],
                    topic_choice="uniform", payload_bytes=16, seed=1)
    port = free_port()
    env = {**os.environ, TOKEN_FILE_ENV: str(tmp_path / "token"), "OVERLAYLAB_LOAD_PLAN": str(tmp_path / "plan.json"),
           "PYTHONPATH": str(ROOT)}
    master = subprocess.Popen([sys.executable, "-m", "locust", "-f", str(ROOT / "loadgen" / "locustfile.py"), "--master",
                               "--web-host", "127.0.0.1", "--web-port", str(port)],
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        up_and_refusing(f"{url}/", master)
        assert get(f"{url}/stats/requests")[0] == 401
        assert get(f"{url}/stats/requests", {TOKEN_HEADER: "guess"})[0] == 401
        assert get(f"{url}/stats/requests", {TOKEN_HEADER: TOKEN})[0] == 200
        # a browser: once with ?token=, then by the cookie it was given
        opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor())
        with opener.open(f"{url}/?token={TOKEN}", timeout=10) as r:
            assert r.status == 200
        with opener.open(f"{url}/stats/requests", timeout=10) as r:
            assert r.status == 200
    finally:
        master.kill()
        master.wait()
