"""Run directories out of a cluster: ``GET /<run-id>.tar.gz`` streams one as a gzipped tar.

The chart runs this beside the OpenTelemetry Collector, on the results volume that the
Collector's file exporter and the controller Job write; the k8s runner fetches through the API
server's service proxy, so nothing needs a port-forward or an exec. ``GET /healthz`` answers
``ok``. Only names of existing run directories are served (no path traversal).

With a token (the file ``$OVERLAYLAB_WEB_TOKEN_FILE`` names: the chart mounts its
``<release>-web-token`` Secret), every request
must carry it in the :data:`TOKEN_HEADER` header, or is answered 401: a pod of the namespace
cannot read another run's results. (The API server's proxy drops ``Authorization`` once it has
authenticated the caller, so the token travels in a header of its own.)
"""

from __future__ import annotations

import hmac
import os
import re
import tarfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

RUN_PATH = re.compile(r"^/([A-Za-z0-9_.-]+)\.tar\.gz$")
TOKEN_HEADER = "X-Overlaylab-Token"
TOKEN_FILE_ENV = "OVERLAYLAB_WEB_TOKEN_FILE"


def web_token() -> str | None:
    """The web token, from the file ``$OVERLAYLAB_WEB_TOKEN_FILE`` names (None: no token)."""
    path = os.environ.get(TOKEN_FILE_ENV)
    return Path(path).read_text().strip() if path else None


def token_matches(given: str | None, token: str | None) -> bool:
    """Whether ``given`` is ``token`` (always, when there is no token), in constant time."""
    return not token or hmac.compare_digest((given or "").encode(), token.encode())


def serve(root: str | Path, port: int = 8000, token: str | None = None) -> None:
    root = Path(root).resolve()
    token = token if token is not None else web_token()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if not token_matches(self.headers.get(TOKEN_HEADER), token):
                self._reply(401, b"a token is needed\n")
                return
            if self.path == "/healthz":
                self._reply(200, b"ok")
                return
            m = RUN_PATH.match(self.path)
            run = root / m[1] if m and m[1] not in (".", "..") else None
            if run is None or not run.is_dir():
                self._reply(404, b"no such run\n")
                return
            self.send_response(200)
            self.send_header("Content-Type", "application/gzip")
            self.end_headers()
            with tarfile.open(fileobj=self.wfile, mode="w|gz") as tar:
                tar.add(run, arcname=run.name)

        def _reply(self, code: int, body: bytes) -> None:
            self.send_response(code)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args) -> None:
            pass

    ThreadingHTTPServer(("0.0.0.0", port), Handler).serve_forever()
