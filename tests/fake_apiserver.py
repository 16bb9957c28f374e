"""A fake Kubernetes API server, just enough for the k8s runner, that validates every body.

It speaks the REST paths the official client uses (create, list by label selector, read, read
status, delete, pod log, service proxy), stores objects in memory, and answers 422 with the
schema's message when a created object is not valid for its kind (kubernetes-validate --strict
for built-in kinds, Chaos Mesh's CRDs for its kinds). It plays the cluster too: a StatefulSet
reports all replicas ready, the controller Job succeeds (or fails) after a few status reads, and
the Collector Service's ``results`` port serves tarballs of run directories under ``volume``;
it has one node (labels as given) and Chaos Mesh's resources unless ``chaos_mesh=False``.
"""

from __future__ import annotations

import base64
import io
import json
import re
import tarfile
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlparse

from tests.k8s_schemas import validate

PATH = re.compile(r"^/(?:api/v1|apis/(?P<group>[^/]+)/(?P<version>[^/]+))/namespaces/(?P<ns>[^/]+)/"
                  r"(?P<plural>[^/]+)(?:/(?P<name>[^/]+))?(?:/(?P<sub>status|log|proxy))?(?P<rest>/.*)?$")


class FakeAPIServer:
    def __init__(self, volume: Path, job_outcome: str = "succeeded", job_polls: int = 2, *,
                 chaos_mesh: bool = True, node_labels: dict[str, str] | None = None, proxy_unavailable: int = 0) -> None:
        self.volume = volume
        self.proxy_unavailable = proxy_unavailable
        """How many proxy requests answer 503 first (a Service whose pod is not Ready yet)."""
        self.chaos_mesh = chaos_mesh
        """Whether Chaos Mesh's CRDs are installed (if not, its resources answer 404)."""
        self.nodes = [{"kind": "Node", "apiVersion": "v1", "metadata": {"name": "node1", "labels": node_labels or {}}}]
        self.job_outcome = job_outcome
        self.job_polls = job_polls
        self.objects: dict[tuple[str, str], dict] = {}
        """(plural, name) -> object."""
        self.requests: list[tuple[str, str]] = []
        self.rejected: list[str] = []
        self._polls = 0
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()

    def kinds(self) -> list[str]:
        return sorted(o["kind"] for o in self.objects.values())

    def _handler(self):
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def _send(self, code: int, body, content_type: str = "application/json") -> None:
                data = body if isinstance(body, bytes) else json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _status(self, code: int, reason: str, message: str) -> None:
                self._send(code, {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                  "reason": reason, "message": message, "code": code})

            def _route(self):
                url = urlparse(self.path)
                path = unquote(url.path)  # as Go's net/http decodes it
                fake.requests.append((self.command, path))
                return PATH.match(path), parse_qs(url.query)

            def do_POST(self) -> None:
                m, _ = self._route()
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                try:
                    validate(body)
                except Exception as e:
                    fake.rejected.append(f"{body.get('kind')}/{body.get('metadata', {}).get('name')}: {e}")
                    self._status(422, "Invalid", f"{body.get('kind')} is invalid: {e}")
                    return
                key = (m["plural"], body["metadata"]["name"])
                if key in fake.objects:
                    self._status(409, "AlreadyExists", f"{key} already exists")
                    return
                body["metadata"].update(uid=str(uuid.uuid4()), namespace=m["ns"],
                                        creationTimestamp="2026-11-26T00:00:00Z")
                fake.objects[key] = body
                self._send(201, body)

            def do_GET(self) -> None:
                m, query = self._route()
                if urlparse(self.path).path == "/api/v1/nodes":
                    selector = query.get("labelSelector", [""])[0]
                    items = [n for n in fake.nodes if self._selected(n, selector)]
                    self._send(200, {"kind": "NodeList", "apiVersion": "v1", "metadata": {}, "items": items})
                    return
                if m is None or (m["group"] == "chaos-mesh.org" and not fake.chaos_mesh):
                    self._status(404, "NotFound", self.path)
                    return
                plural, name, sub = m["plural"], m["name"], m["sub"]
                if sub == "proxy":
                    self._proxy(plural, name, m["rest"] or "/")
                    return
                if sub == "log":
                    self._send(200, f"log of {name}\n".encode(), "text/plain")
                    return
                if name is None:
                    items = [self._with_status(o) for (p, _), o in fake.objects.items()
                             if p == plural and self._selected(o, query.get("labelSelector", [""])[0])]
                    self._send(200, {"kind": "List", "apiVersion": "v1", "metadata": {}, "items": items})
                    return
                obj = fake.objects.get((plural, name))
                if obj is None:
                    self._status(404, "NotFound", f"{plural} {name} not found")
                    return
                self._send(200, self._with_status(obj))

            def do_DELETE(self) -> None:
                m, _ = self._route()
                obj = fake.objects.pop((m["plural"], m["name"]), None)
                if obj is None:
                    self._status(404, "NotFound", f"{m['plural']} {m['name']} not found")
                    return
                self._send(200, obj)  # as the API server does: the object that was deleted

            @staticmethod
            def _selected(obj: dict, selector: str) -> bool:
                labels = obj["metadata"].get("labels", {})
                return all(labels.get(k) == v for k, v in (t.split("=", 1) for t in selector.split(",") if t))

            @staticmethod
            def _with_status(obj: dict) -> dict:
                obj = dict(obj)
                if obj["kind"] == "StatefulSet":
                    n = obj["spec"]["replicas"]
                    obj["status"] = {"replicas": n, "readyReplicas": n}
                elif obj["kind"] == "Job":
                    fake._polls += 1
                    done = fake._polls > fake.job_polls
                    obj["status"] = {fake.job_outcome: 1} if done else {"active": 1}
                return obj

            def _proxy(self, plural: str, name: str, rest: str) -> None:
                service, _, port = name.partition(":")
                if fake.proxy_unavailable:
                    fake.proxy_unavailable -= 1
                    self._status(503, "ServiceUnavailable", f'no endpoints available for service "{name}"')
                    return
                tokens = [base64.b64decode(o["data"]["token"]).decode() for (kind, _), o in fake.objects.items()
                          if kind == "secrets" and o["metadata"].get("labels", {}).get("overlaylab.io/role") == "web-token"]
                if tokens and self.headers.get("X-Overlaylab-Token") not in tokens:  # as the results server answers
                    self._status(401, "Unauthorized", "a token is needed")
                    return
                run = re.fullmatch(r"/([A-Za-z0-9_.-]+)\.tar\.gz", rest)
                if plural != "services" or ("services", service) not in fake.objects or port != "results" \
                        or not run or not (fake.volume / run[1]).is_dir():
                    self._status(404, "NotFound", f"no proxy route {name}{rest}")
                    return
                buf = io.BytesIO()
                with tarfile.open(fileobj=buf, mode="w:gz") as tar:
                    tar.add(fake.volume / run[1], arcname=run[1])
                self._send(200, buf.getvalue(), "application/gzip")

        return Handler
