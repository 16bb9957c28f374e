"""``python -m node --config FILE``: host one or several peers in this process.

The config file (JSON, written by the controller; the same contract on every backend) is a
:class:`node.transport.peer_config.PeerConfig`: the run, the protocol and its parameters, the
seed, the node ids to host and which life of each it starts, the rejoin rule, where to bind and
trace, checkpoints, TLS. With ``standby`` the process loads, then waits for a line ``START`` on
stdin before starting the peers (and restoring their checkpoints): the controller starts a
crashed peer's replacement at once and brings it in at the planned rejoin.

Each peer gets its own Control server; the Peer service is a server per peer in ``unary`` mode and
one for the whole process in ``stream`` mode (the peers share its port, the first node's fixed
port if given; ``node/transport/host.py``). When all are up, the process prints one line
``READY {"<node id>": [<peer address>, <control address>], ...}`` on stdout. SIGTERM or
SIGINT stops the peers after flushing their traces.

The peers run on :func:`node.transport.timely.new_event_loop` (asyncio's loop, with timers that fire on
time: emulated link delays are timers).

Once the peers are up, the start-up heap (modules, the cores' initial state) is moved out of the
garbage collector's reach (``gc.freeze``): a full collection no longer walks it. Measured on 64
flooding peers in two processes at 20 events/s: each full collection paused a process for about
45 ms (six in a run: a latency spike for every copy in flight), 4 ms with the heap frozen.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import logging
import os
import signal
import sys
from pathlib import Path

from pydantic import TypeAdapter

from node.kit import protocol_config_class
from node.kit.plugins import load_plugins
from node.transport import timely
from node.transport.host import PeerHost
from node.transport.peer_config import PeerConfig
from node.transport.security import Credentials
from node.transport.shell import PeerShell


async def serve(cfg: PeerConfig) -> None:
    if cfg.standby:
        start = await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
        if start.strip() != "START":
            return  # the controller went away first
    load_plugins()
    params = TypeAdapter(protocol_config_class(cfg.protocol)).validate_python(cfg.params)
    state_dir = Path(cfg.state_dir) if cfg.state_dir and cfg.rejoin == "resume" else None
    credentials = Credentials.load(cfg.pki, "peer") if cfg.pki else None
    shared: dict = {}
    host = PeerHost(cfg.transport, credentials, cfg.host, cfg.advertise, cfg.socket_dir)
    shells = [
        PeerShell(n, cfg.protocol, params, cfg.seed, cfg.run_id, Path(cfg.trace_dir) if cfg.trace_dir else None, cfg.host,
                  state_dir / f"node-{n}.pickle" if state_dir else None, advertise=cfg.advertise,
                  otlp_endpoint=cfg.otlp_endpoint, refuse_before_join=cfg.refuse_before_join, shared=shared,
                  control_host=cfg.control_host, credentials=credentials, transport=cfg.transport, peer_host=host,
                  incarnation=cfg.incarnations.get(n, 0), socket_dir=cfg.socket_dir, run_nodes=cfg.run_nodes)
        for n in cfg.nodes
    ]
    addrs = {}
    for s in shells:
        await s.start(cfg.ports.get(s.node_id, 0), cfg.control_ports.get(s.node_id, 0))
        addrs[str(s.node_id)] = [s.addr, s.control_addr]
    gc.freeze()  # the start-up heap, out of every later collection (see the module's docstring)
    print("READY " + json.dumps(addrs), flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    if cfg.exit_with_parent:
        stdin = sys.stdin.fileno()

        def on_stdin() -> None:
            if not os.read(stdin, 4096):
                loop.remove_reader(stdin)
                stop.set()
        loop.add_reader(stdin, on_stdin)
    await stop.wait()
    await asyncio.gather(*(s.stop() for s in shells))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m node", description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True, help="peer process config (JSON)")
    parser.add_argument("--log-level", default="WARNING")
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level, stream=sys.stderr, format="%(asctime)s %(name)s %(message)s")
    with asyncio.Runner(loop_factory=timely.new_event_loop) as runner:
        runner.run(serve(PeerConfig.model_validate_json(Path(args.config).read_text())))


if __name__ == "__main__":
    main()
