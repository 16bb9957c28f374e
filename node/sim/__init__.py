"""Deterministic discrete-event simulation of protocol cores (virtual clock, seeded)."""

from node.sim.engine import Simulation, SpanColumns

__all__ = ["Simulation", "SpanColumns"]
