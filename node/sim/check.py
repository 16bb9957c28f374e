"""The divergence check: a simulation in a compiled loop against the same one in the Python
cores, down to the first virtual time at which their states differ.

Both runs advance side by side to checkpoints; at each, the compiled loop hands its run back
(``Simulation.sync``), every node's declared state is compared (``Stack.export_state``: each
layer's view in order with ages, reserve, ring slots, pending replies; the duplicate filter,
the profile, the generator; whether the node is alive), and the loop takes the run again
(``Simulation.resume_native``). Where a checkpoint differs, the interval since the last equal
one is bisected (each probe a run from the start) down to ``resolution``, and the report gives
the time, the step, each differing node with the fields that differ (Python's value and the
loop's), and the entries the Python run had due in that last interval: the timer or message
that diverged. ``sim.engine: check`` runs an experiment this way (controller/backends/sim.py);
tests/unit/test_native.py uses it, so that a failure reads as a bug report.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any

from node.kit.types import Descriptor
from node.sim.engine import Simulation


def _entry(at: float, kind: int, data: Any) -> str:
    """A queue entry of the simulator (``engine._TIMER``, ``_MSG``, ``_CALL``) in words."""
    if kind == 0:
        node, name = data
        return f"timer {name!r} of node {node} at {at:.6f}"
    if kind == 1:
        src, dst, msg = data[:3]
        return f"{type(msg).__name__} ({getattr(msg, 'layer', 'event')}) {src} -> {dst} at {at:.6f}"
    return f"a scheduled call at {at:.6f}"


def _plain(x: Any) -> Any:
    """A state value as plain data: descriptors as (node, age), a view as its descriptors,
    containers in their order."""
    if isinstance(x, Descriptor):
        return (x.node_id, x.age)
    if isinstance(x, dict):
        if all(isinstance(v, Descriptor) and v.node_id == k for k, v in x.items()):  # a view
            return [_plain(v) for v in x.values()]
        return [(k, _plain(v)) for k, v in x.items()]
    if isinstance(x, (set, frozenset)):
        return sorted(x)
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    return x


def node_state(sim: Simulation, i: int) -> dict[str, Any]:
    """Node ``i``'s declared state as the check compares it (after ``sim.sync()``)."""
    core = sim.nodes[i]
    state = core.export_state()
    me = state.me
    out: dict[str, Any] = {"me": (me.node_id, me.addr, sorted(me.topics), sorted(me.priorities)),
                           "seen": state.seen, "published": state.published}
    for name, layer in state.layers.items():
        for f in fields(layer):
            value = _plain(getattr(layer, f.name))
            out[f"{name}.{f.name}"] = sorted(value) if f.metadata.get("unordered") else value
    out["rng"] = hashlib.sha256(repr(core.rng.getstate()).encode()).hexdigest()[:12]
    out["alive"] = i in sim.alive
    return out


@dataclass
class Divergence:
    """Where the two runs first differ."""

    time_s: float
    """The first checkpoint at which they differ (the last equal one is ``resolution`` before)."""
    steps: int
    """The Python run's steps up to it."""
    nodes: dict[int, dict[str, tuple[Any, Any]]] = field(default_factory=dict)
    """Per differing node, per differing field: (Python's, the compiled loop's)."""
    due: list[str] = field(default_factory=list)
    """The Python run's entries due in the last interval (what it did there)."""

    def __str__(self) -> str:
        lines = [f"first divergence at t = {self.time_s:.6f} s (step {self.steps}); due then: {', '.join(self.due)}"]
        for node, diff in sorted(self.nodes.items())[:5]:
            for name, (py, native) in diff.items():
                lines.append(f"  node {node} {name}: python {py!r} != compiled {native!r}")
        if len(self.nodes) > 5:
            lines.append(f"  and {len(self.nodes) - 5} more nodes")
        return "\n".join(lines)


class Diverged(RuntimeError):
    """The compiled loop's run differs from the Python cores' (``sim.engine: check``)."""

    def __init__(self, divergence: Divergence) -> None:
        super().__init__(f"the compiled loop diverges from the Python cores: {divergence}")
        self.divergence = divergence


def differences(py: Simulation, native: Simulation, resume: bool = True) -> dict[int, dict[str, tuple[Any, Any]]]:
    """Per node, the fields whose values differ: (Python's, the compiled loop's). Hands the
    compiled run back to compare and (``resume``) lets it take the run again after."""
    py.sync()
    native.sync()
    out: dict[int, dict[str, tuple[Any, Any]]] = {}
    for i in sorted(set(py.nodes) | set(native.nodes)):
        a, b = node_state(py, i), node_state(native, i)
        diff = {k: (a.get(k), b.get(k)) for k in sorted(a.keys() | b.keys()) if a.get(k) != b.get(k)}
        if diff:
            out[i] = diff
    if resume:
        native.resume_native()
    return out


def bisect(build: Callable[[str], Simulation], lo: float, hi: float, resolution: float = 1e-3) -> Divergence:
    """The divergence between ``lo`` (equal) and ``hi`` (differing), narrowed to ``resolution``
    by runs from the start (``build(engine)`` makes one)."""

    def run(engine: str, t: float) -> Simulation:
        sim = build(engine)
        sim.run_until(t)
        return sim

    while hi - lo > resolution:
        mid = (lo + hi) / 2
        if differences(run("python", mid), run("native", mid), resume=False):
            hi = mid
        else:
            lo = mid
    before = run("python", lo)
    due = [_entry(at, kind, data) for at, _, kind, data in sorted(before.queue, key=lambda e: e[:2]) if lo < at <= hi]
    py = run("python", hi)
    return Divergence(hi, py.steps, differences(py, run("native", hi), resume=False), due)


def first_divergence(build: Callable[[str], Simulation], t_end: float, every_s: float = 1.0,
                     resolution: float = 1e-3) -> Divergence | None:
    """The first divergence of ``build("native")`` from ``build("python")`` up to ``t_end``
    (side by side, compared every ``every_s``; then bisected to ``resolution``), or None."""
    py, native = build("python"), build("native")
    lo, t = 0.0, every_s
    while lo < t_end:
        t = min(t, t_end)
        py.run_until(t)
        native.run_until(t)
        if differences(py, native):
            return bisect(build, lo, t, resolution)
        lo, t = t, t + every_s
    return None
