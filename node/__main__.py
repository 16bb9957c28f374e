"""``python -m node --config FILE``: host one or several peers in this process.

The config file (JSON, written by the controller; the same contract on every backend) names the
run, the protocol and its parameters, the seed, the node ids to host, the trace directory and
the host to bind; optionally fixed ``ports`` per node (a restarted peer keeps its address), a
``state_dir`` (the core is checkpointed there every tick and restored on restart), ``advertise``
(the host name peers use when it differs from the bind host), ``otlp_endpoint`` (export spans
to a Collector instead of ``trace_dir``) and ``refuse_before_join``. Each peer gets its own gRPC server on an ephemeral port. When all are up, the
process prints one line ``READY {"<node id>": <port>, ...}`` on stdout. SIGTERM or SIGINT stops
the peers after flushing their traces.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import signal
import sys
from pathlib import Path

from pydantic import TypeAdapter

from node.core import protocol_config_class
from node.plugins import load_plugins
from node.transport.shell import PeerShell


async def serve(cfg: dict) -> None:
    load_plugins()
    params = TypeAdapter(protocol_config_class(cfg["protocol"])).validate_python(cfg["params"])
    state_dir = Path(cfg["state_dir"]) if cfg.get("state_dir") else None
    shared: dict = {}
    shells = [
        PeerShell(n, cfg["protocol"], params, cfg["seed"], cfg["run_id"],
                  Path(cfg["trace_dir"]) if cfg.get("trace_dir") else None, cfg.get("host", "127.0.0.1"),
                  state_dir / f"node-{n}.pickle" if state_dir else None, advertise=cfg.get("advertise"),
                  otlp_endpoint=cfg.get("otlp_endpoint"), refuse_before_join=cfg.get("refuse_before_join", False),
                  shared=shared)
        for n in cfg["nodes"]
    ]
    fixed = cfg.get("ports", {})
    ports = {str(s.node_id): await s.start(fixed.get(str(s.node_id), 0)) for s in shells}
    print("READY " + json.dumps(ports), flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await asyncio.gather(*(s.stop() for s in shells))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m node", description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True, help="peer process config (JSON)")
    parser.add_argument("--log-level", default="WARNING")
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level, stream=sys.stderr, format="%(asctime)s %(name)s %(message)s")
    asyncio.run(serve(json.loads(Path(args.config).read_text())))


if __name__ == "__main__":
    main()
