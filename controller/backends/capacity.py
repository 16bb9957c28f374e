"""How many local peers this machine holds: per-peer costs measured here (``overlaylab
calibrate``, into ``bench/results/capacity.json``) and the estimate that ``overlaylab
validate`` and ``run`` print before a local run starts.

The model is first order. Each peer process runs one event loop, so a run's peers use at most
``min(processes, cores)`` cores. During the load phase they need

    processes x process_cores      (a process's own work: gRPC's poller, the readings, the
                                    span exporter)
  + peers x maintenance            (the overlay's periodic work: CPU per peer-second)
  + rate x copies x cpu_per_copy   (copies per event = copies_per_event_per_peer x peers:
                                    measured at the calibration's size, assumed to grow
                                    linearly with the peers, as a flood does)

and memory ``processes x rss_base + peers x rss_per_peer``. The calibration run's processes host
75, 75 and 1 peers, so a line through their readings over the warm-up's second half separates
the per-process from the per-peer costs (the one-peer process pins the former). The plan fits while
the demand stays under :data:`FITS_SHARE` of the usable cores; above it the loops fall behind
in bursts (``fidelity.verdict`` ``degraded``, analysis/fidelity.py), and past
:data:`OVERLOAD_SHARE` they fall behind for good (``invalid``: the results describe the host).
The costs are the
protocol's: a protocol not calibrated is estimated with the quickstart's (gossip) costs, and
says so.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from controller.experiment.schema import Experiment

COSTS_FILE = Path(__file__).resolve().parents[2] / "bench" / "results" / "capacity.json"
"""The capacity table (``OVERLAYLAB_CAPACITY`` names another)."""
FITS_SHARE = 0.3
"""Up to this share of the usable cores a plan fits. From the verdicts bench/peers.py measured
(bench/results/peers.json, the quickstart's flood on two processes): 100 peers (0.26 estimated)
``ok``; 150 (0.39), 200 (0.51) and 400 (1.01) ``degraded``; 1,000 (2.5) and more ``invalid``."""
OVERLOAD_SHARE = 1.0
"""Past this share the demand exceeds the cores: the plan overloads the host."""
CALIBRATION_PEERS = (151, 75)
"""The calibration run's peers and peers per process: processes of 75, 75 and 1 peers."""


@dataclass(frozen=True)
class Costs:
    protocol: str
    process_cores: float
    maintenance_ms_per_peer_s: float
    cpu_per_copy_us: float
    copies_per_event_per_peer: float
    rss_base_mib: float
    rss_per_peer_mib: float
    cpus: int
    measured: str
    """The command that measured them, and when."""


@dataclass(frozen=True)
class Estimate:
    peers: int
    processes: int
    usable_cores: int
    process_cores: float
    maintenance_cores: float
    dissemination_cores: float
    busiest_cores: float
    """The demand of the process hosting the most peers, on its one event loop."""
    memory_mib: float
    costs: Costs
    note: str = ""

    @property
    def demand_cores(self) -> float:
        return self.process_cores + self.maintenance_cores + self.dissemination_cores

    @property
    def share(self) -> float:
        """The busier of: the busiest process's loop (one core at most), all the processes
        together on the usable cores."""
        return max(self.busiest_cores, self.demand_cores / self.usable_cores)

    @property
    def fits(self) -> bool:
        return self.share <= FITS_SHARE and self.memory_mib <= 0.8 * memory_mib()

    @property
    def overloads(self) -> bool:
        return self.share > OVERLOAD_SHARE or self.memory_mib > 0.8 * memory_mib()

    def describe(self) -> str:
        c = self.costs
        return (f"{self.peers:,} peers in {self.processes} processes need about {self.demand_cores:.2f} of "
                f"{self.usable_cores} usable cores, the busiest process {self.busiest_cores:.2f} of its one "
                f"({100 * self.share:.0f}% at most; fits up to {100 * FITS_SHARE:.0f}%) in the load phase: "
                f"processes {self.process_cores:.2f} + maintenance {self.maintenance_cores:.2f} "
                f"({c.maintenance_ms_per_peer_s:.3f} ms per peer-second) + dissemination {self.dissemination_cores:.2f} "
                f"({c.copies_per_event_per_peer:.2f} copies per event per peer x {c.cpu_per_copy_us:.0f} us); "
                f"memory about {self.memory_mib / 1024:.1f} of {memory_mib() / 1024:.0f} GiB"
                + (f"; {self.note}" if self.note else ""))


def cores() -> int:
    return len(os.sched_getaffinity(0))


def memory_mib() -> float:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**20


def costs_file() -> Path:
    return Path(os.environ.get("OVERLAYLAB_CAPACITY", COSTS_FILE))


def load_costs(path: Path | None = None) -> dict[str, Costs]:
    path = path or costs_file()
    if not path.exists():
        return {}
    return {name: Costs(**c) for name, c in json.loads(path.read_text())["protocols"].items()}


def save_costs(costs: Costs, path: Path | None = None) -> None:
    path = path or costs_file()
    table = json.loads(path.read_text()) if path.exists() else {"benchmark": "capacity", "protocols": {}}
    table["protocols"][costs.protocol] = asdict(costs)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(table, indent=2, sort_keys=True) + "\n")


def estimate(exp: Experiment, table: dict[str, Costs] | None = None) -> Estimate | None:
    """The plan's demand on this machine, or None when nothing was calibrated."""
    table = load_costs() if table is None else table
    note = ""
    c = table.get(exp.protocol.name)
    if c is None:
        c = table.get("gossip")
        if c is None:
            return None
        note = f"{exp.protocol.name} not calibrated here: the gossip quickstart's costs stand in"
    n, per_process = exp.nodes.count, exp.nodes.peers_per_process
    processes = math.ceil(n / per_process)
    rate = exp.publications.rate_per_s or 0.0
    copies_cores = rate * c.copies_per_event_per_peer * c.cpu_per_copy_us / 1e6  # a peer's received copies
    per_peer = c.maintenance_ms_per_peer_s / 1000 + copies_cores
    return Estimate(
        peers=n, processes=processes, usable_cores=max(1, min(processes, cores())),
        process_cores=processes * c.process_cores, maintenance_cores=n * c.maintenance_ms_per_peer_s / 1000,
        dissemination_cores=n * copies_cores,
        busiest_cores=c.process_cores + min(n, per_process) * per_peer,
        memory_mib=processes * c.rss_base_mib + n * c.rss_per_peer_mib, costs=c, note=note)


def costs_from_run(path: Path, protocol: str, peers_per_process: int, command: str) -> Costs:
    """The per-peer costs of a finished local run (its ``host`` readings, counters and plan)."""
    import pyarrow.parquet as pq

    meta = json.loads((path / "run.json").read_text())
    timeline = [json.loads(line) for line in (path / "timeline.jsonl").read_text().splitlines()]
    stats = {r["node"]: dict(r["counters"]) for r in pq.read_table(path / "stats.parquet").to_pylist()}
    n = len(stats)
    readings: dict[int, list[dict]] = {}
    for e in timeline:
        if e["kind"] == "host" and e["answered"]:
            readings.setdefault(e["node"], []).append(e)
    warm_from = meta["started_ns"] + (meta["measure_start_ns"] - meta["started_ns"]) / 2  # past the initial joins
    firsts = sorted(readings)
    sizes = [min(peers_per_process, n - first) for first in firsts]
    if len(set(sizes)) < 2:
        raise ValueError(f"{path}: the processes host the same number of peers; per-process and per-peer costs need two sizes")
    warm_cores, warm_rss, load = [], [], 0.0  # cores used and memory over the warm-up's second half; CPU s beyond after
    for first in firsts:
        lines = readings[first]
        warm = [e for e in lines if warm_from <= e["t_ns"] <= meta["measure_start_ns"]]
        if len(warm) < 2:
            raise ValueError(f"{path}: fewer than two load readings in the warm-up's second half: lengthen phases.warmup_s")
        warm_cores.append(cores_used(warm))
        warm_rss.append(warm[-1]["rss_kib"] / 1024)
        after = [e for e in lines if e["t_ns"] >= warm[-1]["t_ns"]]
        load += (after[-1]["cpu_ms"] - after[0]["cpu_ms"]) / 1000 - warm_cores[-1] * (after[-1]["t_ns"] - after[0]["t_ns"]) / 1e9
    copies = sum(c.get("events_received", 0) for c in stats.values())
    events = sum(c.get("events_published", 0) for c in stats.values())
    if not copies or not events:
        raise ValueError(f"{path}: no events published or received")
    per_peer, per_process = statistics.linear_regression(sizes, warm_cores)
    rss_per_peer, rss_base = statistics.linear_regression(sizes, warm_rss)
    return Costs(protocol=protocol, process_cores=round(max(per_process, 0.0), 4),
                 maintenance_ms_per_peer_s=round(1000 * max(per_peer, 0.0), 4),
                 cpu_per_copy_us=round(1e6 * max(load, 0.0) / copies, 2),
                 copies_per_event_per_peer=round(copies / events / n, 3),
                 rss_base_mib=round(max(rss_base, 0.0), 1), rss_per_peer_mib=round(max(rss_per_peer, 0.0), 4), cpus=cores(),
                 measured=f"{command} ({time.strftime('%Y-%m-%d')})")


def cores_used(readings: list[dict]) -> float:
    """Cores a process used, on average, between its first and last of ``readings``."""
    return (readings[-1]["cpu_ms"] - readings[0]["cpu_ms"]) / 1000 / ((readings[-1]["t_ns"] - readings[0]["t_ns"]) / 1e9)
