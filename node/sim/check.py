"""The divergence check: a simulation in a compiled loop against the same one in the Python
cores, down to the first virtual time at which their states differ.

:func:`first_divergence` builds the simulation twice per checkpoint (``build(engine)``), runs
both to the checkpoint (the compiled one handed back), and compares every node's state: each
layer's views in order with ages, reserves, pending replies, and the node's random state. Where
they first differ it bisects in virtual time down to ``resolution`` and reports the time, the
step, each differing node with the fields that differ (Python's value and the loop's), and the
entries the Python run had due in that last interval: the timer or message that diverged.
tests/unit/test_native.py uses it, so that a failure reads as a bug report.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
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
    """A state value as plain data: descriptors as (node, age), containers in their order."""
    if isinstance(x, Descriptor):
        return (x.node_id, x.age)
    if isinstance(x, dict):
        return [(k, _plain(v)) for k, v in x.items()]
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    if hasattr(x, "__dict__") and not isinstance(x, type):
        return {k: _plain(v) for k, v in vars(x).items() if k not in ("stack", "config")}
    return x


def node_state(sim: Simulation, i: int) -> dict[str, Any]:
    """Node ``i``'s state as the check compares it (after ``sim.sync()``)."""
    core = sim.nodes[i]
    out: dict[str, Any] = {f"{name}.{k}": _plain(v) for name, layer in core.layers.items()
                           for k, v in vars(layer).items() if k not in ("stack", "config")}
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
        for node, fields in sorted(self.nodes.items())[:5]:
            for name, (py, native) in fields.items():
                lines.append(f"  node {node} {name}: python {py!r} != compiled {native!r}")
        return "\n".join(lines)


def _run(build: Callable[[str], Simulation], engine: str, t: float) -> Simulation:
    sim = build(engine)
    sim.run_until(t)
    sim.sync()
    return sim


def _differences(py: Simulation, native: Simulation) -> dict[int, dict[str, tuple[Any, Any]]]:
    out: dict[int, dict[str, tuple[Any, Any]]] = {}
    for i in sorted(set(py.nodes) | set(native.nodes)):
        a, b = node_state(py, i), node_state(native, i)
        fields = {k: (a.get(k), b.get(k)) for k in a.keys() | b.keys() if a.get(k) != b.get(k)}
        if fields:
            out[i] = fields
    return out


def first_divergence(build: Callable[[str], Simulation], t_end: float, every_s: float = 1.0,
                     resolution: float = 1e-3) -> Divergence | None:
    """The first divergence of ``build("native")`` from ``build("python")`` up to ``t_end``
    (checkpoints every ``every_s``, then bisection to ``resolution``), or None."""
    lo, hi = 0.0, None
    t = every_s
    while t <= t_end + 1e-9:
        if _differences(_run(build, "python", t), _run(build, "native", t)):
            hi = t
            break
        lo, t = t, t + every_s
    if hi is None:
        return None
    while hi - lo > resolution:
        mid = (lo + hi) / 2
        if _differences(_run(build, "python", mid), _run(build, "native", mid)):
            hi = mid
        else:
            lo = mid
    before = _run(build, "python", lo)
    due = [_entry(at, kind, data) for at, _, kind, data in sorted(before._queue, key=lambda e: e[:2]) if lo < at <= hi]
    py = _run(build, "python", hi)
    return Divergence(hi, py.steps, _differences(py, _run(build, "native", hi)), due)
