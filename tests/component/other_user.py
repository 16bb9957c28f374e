"""Another user of the machine (``python -m tests.component.other_user UID``, run as root): it
loads gRPC and the project's messages, drops to ``UID`` (its group too), reads a JSON list of
``[peer address, control address]`` pairs from a line of stdin, then tries each as a hostile local
user would: ``GetStats`` and ``Publish`` on each
Control address, ``Ping`` on each Peer address. Prints, as JSON, each call's status code name
(``OK`` where it got through)."""

from __future__ import annotations

import json
import os
import sys

import grpc

from node._gen.overlaylab.v1 import control_pb2, peer_pb2

CONTROL, PEER = "overlaylab.v1.Control", "overlaylab.v1.Peer"


def attempt(channel: grpc.Channel, method: str, request) -> str:
    try:
        channel.unary_unary(method)(request.SerializeToString(), timeout=3)
        return "OK"
    except grpc.RpcError as e:
        return e.code().name


def main() -> None:
    uid = int(sys.argv[1])
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)  # from here on, nothing the run's user keeps to itself can be opened
    addresses = json.loads(sys.stdin.readline())
    out: dict[str, dict[str, str]] = {}
    for addr, control in addresses:
        with grpc.insecure_channel(control) as ch:
            out[control] = {"GetStats": attempt(ch, f"/{CONTROL}/GetStats", control_pb2.Empty()),
                            "Publish": attempt(ch, f"/{CONTROL}/Publish", control_pb2.PublishRequest(topic="t0", payload=b"x"))}
        with grpc.insecure_channel(addr) as ch:
            out[addr] = {"Ping": attempt(ch, f"/{PEER}/Ping", peer_pb2.Probe(seq=1))}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
