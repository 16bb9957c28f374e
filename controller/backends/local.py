"""The ``local`` backend: real gRPC peers as OS processes on this machine, listening on Unix
sockets in a folder only the run's user can open (``security.listen``; or on 127.0.0.1).

Layout: nodes that never churn are grouped ``nodes.peers_per_process`` to a process; every node
the churn plan touches gets a process of its own, so a crash is a real SIGKILL of that peer and a
graceful leave is ``Control.Leave`` (flush traces) then SIGTERM. A rejoin restarts the process on
the same port: its replacement is started as soon as the node goes down and waits, imported, for
the rejoin (a new Python process takes seconds to import on a busy machine, which made rejoins
that late); with ``churn.rejoin: resume`` the peer restores its core from the checkpoint
it writes every gossip tick (so even a crashed peer comes back with its views and
subscriptions), with ``fresh`` it starts empty. The load phase is Locust, headless (or with its
web UI), as a child process.

The plan itself is carried out by ``Driver`` (driver.py). Whatever happens (an error, Ctrl-C),
every process it started is stopped and what was written stays.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from controller.backends.base import Runner
from controller.backends.driver import Driver, http_request
from controller.backends.hosting import peer_config
from controller.backends.private import private_folder
from controller.backends.rundir import RunDir
from controller.cli.progress import console
from controller.experiment.schema import Experiment
from loadgen.plan import write_load_plan
from node.transport.security import CALLER_TOKEN_ENV, Credentials, make_pki

READY_TIMEOUT_S = 60.0


class PeerProcessError(RuntimeError):
    pass


ROOT = Path(__file__).resolve().parent.parent.parent
LOCUSTFILE = ROOT / "loadgen" / "locustfile.py"


class LocalRunner(Runner):
    def __init__(self, load_ui: bool = False) -> None:
        self.procs: list[subprocess.Popen] = []
        self.load_ui = load_ui
        """Run Locust with its web UI; the load phase ends at the first Ctrl-C."""

    def run(self, exp: Experiment, rd: RunDir) -> None:
        private = private_folder()  # the peers' sockets and the run's keys
        try:
            asyncio.run(_LocalRun(self, exp, rd, private).run())
        finally:
            stop_processes(self.procs)
            shutil.rmtree(private, ignore_errors=True)


class _LocalRun(Driver):
    def __init__(self, runner: LocalRunner, exp: Experiment, rd: RunDir, private: Path) -> None:
        super().__init__(exp, rd)
        self.runner = runner
        self.sockets = str(private) if exp.unix_sockets() else None
        """The folder of the peers' Unix sockets, or None: they listen on 127.0.0.1."""
        self.caller_token = secrets.token_hex(16)
        self.env = {**os.environ, "PYTHONUNBUFFERED": "1", CALLER_TOKEN_ENV: self.caller_token}
        """The peers' and Locust's environment: with the caller token, which no other user reads."""
        self.solo: dict[int, subprocess.Popen] = {}
        self.standby: dict[int, tuple[subprocess.Popen, Path]] = {}
        """Each churning node's next process, loaded and waiting for its rejoin."""
        self.host_of: dict[int, subprocess.Popen] = {}
        """The process that hosts each node now."""
        (rd.path / "peers").mkdir(exist_ok=True)
        (rd.path / "logs").mkdir(exist_ok=True)
        self.pki = make_pki(private / "pki") if exp.tls() else None
        """The run's certificates (mutual TLS), or None."""
        if self.pki:
            self.credentials = Credentials.load(self.pki, "controller")
        self.state_dir = rd.path / "state"
        if exp.churn.rejoin == "resume" and self.plan.churn.churning:
            self.state_dir.mkdir(exist_ok=True)

    # --- processes --------------------------------------------------------------------------

    def _spawn(self, name: str, nodes: list[int], ports: dict[int, tuple[int, int]] | None = None,
               state: bool = False, standby: bool = False, life: int = 0) -> tuple[subprocess.Popen, Path]:
        """Start a peer process for ``nodes``; ``ports``: node -> (peer, control) ports to keep;
        ``standby``: it waits for ``START`` on its stdin before it starts its peers; ``life``: the
        life of its one node it starts (node/kit/rejoin.py)."""
        rd, ports = self.rd, ports or {}
        cfg = peer_config(self.exp, rd.run_id, nodes, trace_dir=str(rd.traces.resolve()), host="127.0.0.1",
                          ports={k: p for k, (p, _) in ports.items()}, control_ports={k: c for k, (_, c) in ports.items()},
                          incarnations={nodes[0]: life} if life else {},
                          pki=str(self.pki) if self.pki else None, socket_dir=self.sockets,
                          state_dir=str(self.state_dir.resolve()) if state else None, exit_with_parent=True,
                          standby=standby)
        path = rd.path / "peers" / f"{name}.json"
        path.write_text(cfg.model_dump_json())
        log_path = rd.path / "logs" / f"{name}.log"
        with open(log_path, "a") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "node", "--config", str(path)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True, start_new_session=True,
                env=self.env,
            )
        self.runner.procs.append(proc)
        return proc, log_path

    async def _ready(self, proc: subprocess.Popen, log_path: Path) -> dict[int, tuple[str, str]]:
        """Each node's (peer, control) address, from the process's READY line."""
        loop = asyncio.get_running_loop()
        line = await asyncio.wait_for(loop.run_in_executor(None, proc.stdout.readline), READY_TIMEOUT_S)
        if not line.startswith("READY "):
            tail = log_path.read_text()[-2000:]
            raise PeerProcessError(f"peer process {proc.pid} exited before it was ready; log {log_path}:\n{tail}")
        return {int(node): (addr, control) for node, (addr, control) in json.loads(line[6:]).items()}

    async def start_peers(self) -> None:
        churning = self.plan.churn.churning
        keep = self.exp.churn.rejoin == "resume"
        stable = [i for i in range(self.n) if i not in churning]
        ppp = self.exp.nodes.peers_per_process
        started = [self._spawn(f"group-{k // ppp}", stable[k:k + ppp]) for k in range(0, len(stable), ppp)]
        for node in sorted(churning):
            proc, log = self._spawn(f"node-{node}", [node], state=keep)
            self.solo[node] = proc
            started.append((proc, log))
        console.print(f"local: starting {self.n} peers in {len(started)} processes")
        for (proc, _), addrs in zip(started, await asyncio.gather(*(self._ready(p, lp) for p, lp in started))):
            for node, (addr, control_addr) in addrs.items():
                self.host_of[node] = proc
                self._connect(node, addr, control_addr)
        for node in sorted(churning):
            self._spawn_spare(node)

    def _spawn_spare(self, node: int) -> None:
        """Start ``node``'s next process, on its ports, waiting for ``START``: it loads while the
        node is up, so a rejoin costs a process start of tens of milliseconds, not an interpreter's
        seconds on a busy machine."""
        # on Unix sockets the node's addresses follow from its id; on TCP it keeps its ports
        ports = None if self.sockets else {node: tuple(int(a.rsplit(":", 1)[1]) for a in (self.addrs[node], self.control_addrs[node]))}
        self.standby[node] = self._spawn(f"node-{node}", [node], ports,
                                         state=self.exp.churn.rejoin == "resume", standby=True,
                                         life=self.lives.get(node, 0) + 1)

    async def take_down(self, node: int, graceful: bool) -> None:
        proc = self.solo[node]
        os.killpg(proc.pid, signal.SIGTERM if graceful else signal.SIGKILL)
        await asyncio.get_running_loop().run_in_executor(None, proc.wait)

    async def bring_back(self, node: int) -> None:
        if self.solo[node].poll() is None:
            return
        if self.exp.churn.rejoin == "fresh":
            (self.state_dir / f"node-{node}.pickle").unlink(missing_ok=True)
        await self.channels[node].close()
        proc, log = self.standby.pop(node)
        proc.stdin.write("START\n")
        proc.stdin.flush()
        self.solo[node] = self.host_of[node] = proc
        self._connect(node, *(await self._ready(proc, log))[node])
        self._spawn_spare(node)

    def host_groups(self) -> list[list[int]]:
        groups: dict[int, list[int]] = {}
        for node in sorted(self.alive):
            proc = self.host_of.get(node)
            if proc is not None:
                groups.setdefault(proc.pid, []).append(node)
        return list(groups.values())

    async def host_running(self, node: int) -> bool:
        proc = self.host_of.get(node)
        return proc is not None and proc.poll() is None

    async def hosts_gone(self) -> dict[int, str]:
        return {node: f"peer process {p.pid} exited with {p.returncode}"
                for node, p in self.host_of.items() if node in self.alive and p.poll() is not None}

    async def load_phase(self) -> None:
        """The load phase: Locust publishes at the planned rate for count / rate seconds (or, with
        the web UI, until the first Ctrl-C); its CSV statistics and HTML report go to locust/."""
        p, rd = self.exp.publications, self.rd
        out = rd.path / "locust"
        out.mkdir(exist_ok=True)
        write_load_plan(out / "plan.json", addrs=self.control_addrs, subscriptions=self.plan.subscriptions,
                        topic_choice=p.topic_choice, payload_bytes=p.payload_bytes, seed=self.exp.seed)
        users = p.locust_users
        duration = p.count / p.rate_per_s
        cmd = [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "-u", str(users), "-r", str(users),
               "--csv", str(out / "stats"), "--csv-full-history", "--html", str(out / "report.html"),
               "--stop-timeout", "2", "--exit-code-on-error", "0", "--loglevel", "WARNING"]
        if self.runner.load_ui:
            cmd += ["--web-host", "127.0.0.1", "--web-port", "8089", "--autostart", "--autoquit", "1"]
        else:
            cmd += ["--headless", "--only-summary", "-t", f"{max(1, round(duration))}s"]
        env = {**self.env, "OVERLAYLAB_LOAD_PLAN": str(out / "plan.json"),
               "OVERLAYLAB_RATE_PER_USER": str(p.rate_per_s / users), "PYTHONPATH": str(ROOT),
               **({"OVERLAYLAB_PKI": str(self.pki)} if self.pki else {})}
        with open(out / "locust.log", "w") as log:
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        self.runner.procs.append(proc)
        self.timeline.record(time.time_ns(), "load_start", None, driver="locust", users=users, rate_per_s=p.rate_per_s)
        loop = asyncio.get_running_loop()
        if self.runner.load_ui:
            stop = asyncio.Event()
            loop.add_signal_handler(signal.SIGINT, stop.set)
            console.print("Locust web UI: http://127.0.0.1:8089 (the load is running; Ctrl-C ends the load phase)")
            await stop.wait()
            loop.remove_signal_handler(signal.SIGINT)
            try:  # stop the swarm, keep the web UI's HTML report; --autoquit then exits Locust
                report = await loop.run_in_executor(None, lambda: http_request("http://127.0.0.1:8089/stats/report"))
                (out / "report.html").write_bytes(report)
                await loop.run_in_executor(None, lambda: http_request("http://127.0.0.1:8089/stop", b""))
                await asyncio.wait_for(loop.run_in_executor(None, proc.wait), 30)
            except (TimeoutError, OSError):
                os.killpg(proc.pid, signal.SIGTERM)
        await loop.run_in_executor(None, proc.wait)
        self.timeline.record(time.time_ns(), "load_end", None, exit_code=proc.returncode)


def stop_processes(procs: list[subprocess.Popen], grace_s: float = 10.0) -> None:
    """SIGTERM every peer process (they flush traces), then SIGKILL what is left."""
    for p in procs:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    for p in procs:
        try:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
        for pipe in (p.stdin, p.stdout):
            if pipe:
                pipe.close()
