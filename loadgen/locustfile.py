"""Locust publishers: gRPC users that publish through the peers' control API.

Run by the local runner (``locust -f loadgen/locustfile.py --headless ...``) with
``OVERLAYLAB_LOAD_PLAN`` pointing at the plan it wrote, and ``OVERLAYLAB_RATE_PER_USER`` the
publications per second each user sends, the users' phases spread evenly over the period. Each
``Publish`` is a Locust request (name ``Publish``; failures are RPC errors, such as a peer that
died). Every request gets its own trace context, sent in ``PublishRequest.trace_id/span_id``:
the event's ``publish`` span links to it (OpenTelemetry span link), so an event can be traced
back to the request. With
``OVERLAYLAB_PKI`` (a folder with the run's ``ca.pem``, ``loadgen.pem`` and ``loadgen.key``) the
users call over mutual TLS as role ``loadgen``, which may call ``Publish`` and nothing else.

gRPC is made gevent-friendly as Locust documents: ``grpc.experimental.gevent.init_gevent()``
before any channel exists.
"""

from __future__ import annotations

import os
import random
import time

import gevent
import grpc
import grpc.experimental.gevent as grpc_gevent
from locust import User, events, task

from controller.backends.results import TOKEN_HEADER, token_matches, web_token
from loadgen.plan import LoadPlan
from node._gen.overlaylab.v1 import control_pb2, control_pb2_grpc
from node.transport.security import CALLER_KEY, CALLER_TOKEN_ENV, Credentials, channel

grpc_gevent.init_gevent()

PLAN = LoadPlan.load(os.environ["OVERLAYLAB_LOAD_PLAN"])
RATE_PER_USER = float(os.environ.get("OVERLAYLAB_RATE_PER_USER", "1"))
PERIOD = 1.0 / RATE_PER_USER
GOLDEN = (5 ** 0.5 - 1) / 2  # consecutive users' phases: the low-discrepancy sequence k * GOLDEN mod 1
CREDENTIALS = Credentials.load(os.environ["OVERLAYLAB_PKI"], "loadgen") if os.environ.get("OVERLAYLAB_PKI") else None
CALLER = ((CALLER_KEY, os.environ[CALLER_TOKEN_ENV]),) if os.environ.get(CALLER_TOKEN_ENV) else None
"""The run's caller token (local runs): the peers count publications without it as unplanned."""
_channels: dict[str, control_pb2_grpc.ControlStub] = {}


def stub(addr: str) -> control_pb2_grpc.ControlStub:
    if addr not in _channels:
        _channels[addr] = control_pb2_grpc.ControlStub(channel(addr, CREDENTIALS))
    return _channels[addr]


class Publisher(User):
    _count = 0

    def on_start(self) -> None:
        Publisher._count += 1
        self.rng = random.Random(f"{PLAN.seed}:locust:{Publisher._count}:{os.getpid()}")
        # The users start together: the k-th waits frac(k * golden ratio) of its period first, so
        # the swarm's publications interleave at an even rate, as the plan's i / rate_per_s
        # (random phases would bunch several users' publications into a few milliseconds).
        gevent.sleep((Publisher._count * GOLDEN) % 1.0 * PERIOD)
        self.due = time.perf_counter()

    def wait_time(self) -> float:
        """Until the next publication: one every ``PERIOD`` from this user's phase
        (``constant_throughput``, which would bring the users back in step); a late one goes at
        once and the next a period after it."""
        now = time.perf_counter()
        self.due = max(self.due + PERIOD, now)
        return self.due - now

    @task
    def publish(self) -> None:
        node, topic = PLAN.pick(self.rng)
        trace_id, span_id = self.rng.randbytes(16), self.rng.randbytes(8)
        request = control_pb2.PublishRequest(topic=topic, payload=PLAN.payload, trace_id=trace_id, span_id=span_id)
        start = time.perf_counter()
        exception, length = None, 0
        try:
            reply = stub(PLAN.addrs[node]).Publish(request, timeout=10, metadata=CALLER)
            length = reply.ByteSize()
        except grpc.RpcError as e:
            exception = e
        events.request.fire(
            request_type="grpc", name="Publish", response_time=(time.perf_counter() - start) * 1000,
            response_length=length, exception=exception, context={"node": node, "topic": topic},
        )


TOKEN_COOKIE = "overlaylab_token"


@events.init.add_listener
def require_token(environment, **_kwargs) -> None:
    """With the chart's web token ($OVERLAYLAB_WEB_TOKEN_FILE), the master's web UI and API answer only
    requests that carry it: in the token header (the controller), or for a browser once as
    ``?token=`` (kept as a cookie); every other request gets 401."""
    token = web_token()
    if not token or environment.web_ui is None:
        return
    from flask import request

    app = environment.web_ui.app

    @app.before_request
    def check():
        if token_matches(request.headers.get(TOKEN_HEADER), token) or token_matches(request.cookies.get(TOKEN_COOKIE), token):
            return None
        if token_matches(request.args.get("token"), token):
            response = app.redirect(request.path)
            response.set_cookie(TOKEN_COOKIE, token, httponly=True, samesite="Strict")
            return response
        return "a token is needed\n", 401
