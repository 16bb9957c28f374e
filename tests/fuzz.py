"""Coverage-guided fuzzing (atheris) of a peer's inbound boundary, in process: the bytes of every
peer message type and every Control request go through the codec exactly as the gRPC handlers
take them (``codec.decode`` / ``codec.control_request``), and what decodes is fed to running
protocol cores (gossip and PolderCast; ``validate()`` after each message). Refusals
(``RemoteProtocolError``) are the expected outcome of bad input; any other exception is a crash,
and an input that takes longer than ``-timeout`` seconds a hang.

    python -m tests.fuzz -runs=1000000 [-timeout=5] [libFuzzer flags]

``tests/component/test_fuzz.py`` runs it briefly in ``make test``; the closing note of issue 15
records the long run.
"""

from __future__ import annotations

import random
import sys

import atheris

with atheris.instrument_imports():
    from pydantic import TypeAdapter

    from node.kit import create_protocol, protocol_config_class
    from node.kit.types import Descriptor, LocalProtocolError, RemoteProtocolError
    from node.wire import codec

CONTROL = sorted(codec.CONTROL_REQUESTS)
PROTOCOLS = ("gossip", "poldercast")


def _core(name: str):
    params = TypeAdapter(protocol_config_class(name)).validate_python({})
    core = create_protocol(name, Descriptor(0, "127.0.0.1:1", frozenset({"a"})), params, random.Random(0), {}, "fuzz")
    core.start(0.0, [Descriptor(1, "127.0.0.1:2", frozenset({"a"}))])
    return core


RESET_EVERY = 10_000
"""Inputs between fresh cores: state built by earlier inputs (a join of 16,384 topics) stays
for this many, and a long run measures input handling, not an ever larger core."""
CORES = [_core(name) for name in PROTOCOLS]
clock = [0.0]
count = [0]


def control(core, method: str, request) -> None:
    """What the shell does with a Control request that decoded (the core's part of it)."""
    now = clock[0]
    if method == "Join":
        core.subscribe_all(request.topics, now)
    elif method == "Subscribe":
        core.subscribe(request.topic, now)
    elif method == "Unsubscribe":
        core.unsubscribe(request.topic, now)
    elif method == "Publish":
        try:
            core.publish(request.topic, request.payload, now)
        except LocalProtocolError:
            pass  # a topic the node is not on: FAILED_PRECONDITION in the shell


def one_input(data: bytes) -> None:
    if len(data) < 2:
        return
    kinds = len(codec.WIRE_TYPES) + len(CONTROL)
    count[0] += 1
    if count[0] % RESET_EVERY == 0:
        CORES[:] = [_core(name) for name in PROTOCOLS]
    kind, core, body = data[0] % kinds, CORES[data[1] % len(CORES)], data[2:]
    clock[0] += 0.01
    try:
        if kind < len(codec.WIRE_TYPES):
            incoming = codec.decode(codec.WIRE_TYPES[kind], body)
            core.on_message(incoming.src, incoming.msg, clock[0])
        else:
            method = CONTROL[kind - len(codec.WIRE_TYPES)]
            control(core, method, codec.control_request(method, body))
        core.validate()
    except RemoteProtocolError:
        pass  # refused: what bad input must get


def main(argv: list[str]) -> None:
    atheris.Setup(argv, one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main(sys.argv)
