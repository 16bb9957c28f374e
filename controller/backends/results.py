"""Run directories out of a cluster: ``GET /<run-id>.tar.gz`` streams one as a gzipped tar.

The chart runs this beside the OpenTelemetry Collector, on the results volume that the
Collector's file exporter and the controller Job write; the k8s runner fetches through the API
server's service proxy, so nothing needs a port-forward or an exec. ``GET /healthz`` answers
``ok``. Only names of existing run directories are served (no path traversal).
"""

from __future__ import annotations

import re
import tarfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

RUN_PATH = re.compile(r"^/([A-Za-z0-9_.-]+)\.tar\.gz$")


def serve(root: str | Path, port: int = 8000) -> None:
    root = Path(root).resolve()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
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
