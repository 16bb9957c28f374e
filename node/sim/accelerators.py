"""Accelerators: compiled loops that may take a simulation over, found by name.

The simulator knows them only through this interface and the table below, so it imports none
of them (:mod:`node.sim.native` imports the simulator, not the other way round). Each entry
names a function ``(simulation) -> (loop class or None, why none)``; the first that offers a
loop takes the run.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from node.kit.types import Descriptor, NodeSnapshot

if TYPE_CHECKING:
    import pyarrow as pa

ACCELERATORS = {"native": "node.sim.native:loop_for"}
"""Accelerator name -> the function that offers its loop for a simulation."""
class NoAccelerator(RuntimeError):
    """``sim.engine: native``, and no compiled loop can run the simulation (the reason says why)."""


STALE = "was verified against other Python code"
"""In the reason a loop gives for not running: code it mirrors changed since it was verified."""


class Accelerator(Protocol):
    """A compiled loop holding a run: ``take`` it from the Python objects, run it (``engine``),
    ``give_back``."""

    engine: Any
    """The loop's clock and queue: ``run_until``, ``settle``, ``now``, ``steps``, ``frozen_s``."""
    calls: dict[int, tuple[Callable[[], None], bool]]
    """Scheduled calls by the handle ``engine.run_until`` returns when one falls due."""
    publishes: bool
    """Whether a publication runs in the loop (otherwise the run is handed back for it)."""
    kind: str
    verified: str
    """A digest of the Python code the loop was verified against."""

    def take(self) -> None: ...
    def give_back(self) -> None: ...
    def call_at(self, at: float, fn: Callable[[], None], native_ok: bool) -> None: ...
    def publish(self, i: int, topic: str, payload: bytes) -> None: ...
    def start_node(self, i: int, contacts: Sequence[Descriptor]) -> bool:
        """Start stopped node ``i`` in the loop; False where the loop cannot (it hands back)."""
    def stop_node(self, i: int, graceful: bool) -> bool:
        """Stop node ``i`` in the loop (``graceful``: it leaves first); False where it cannot."""
    def snapshot(self, i: int) -> NodeSnapshot: ...
    def snapshot_table(self, nodes: list[int], t_ns: int, gossip_ns: int) -> pa.Table | None: ...
    def take_spans(self) -> None: ...


def accelerator_for(sim: Any) -> tuple[Callable[[Any], Accelerator] | None, str | None]:
    """The loop that can take ``sim`` over now, or None and why none can."""
    reasons = []
    for name, where in ACCELERATORS.items():
        module, _, function = where.partition(":")
        loop, reason = getattr(importlib.import_module(module), function)(sim)
        if loop is not None:
            return loop, None
        reasons.append(f"{name}: {reason}" if len(ACCELERATORS) > 1 else str(reason))
    return None, "; ".join(reasons)
