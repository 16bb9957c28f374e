"""The one rejoin rule, used by every backend: what a node that comes back resumes.

- ``resume``: the node's core as it went down (views, subscriptions, event counter): the
  simulator keeps the core object, real peers restore it from their checkpoint.
- ``fresh``: a new incarnation. Incarnation ``k`` (0 for the first life) draws from its own
  random source, :func:`core_seed`, so it never replays an earlier life's draws, and publishes
  under new event ids (the core's ``incarnation`` tag is part of every id).
"""

from __future__ import annotations

from typing import Literal

RejoinPolicy = Literal["resume", "fresh"]


def core_seed(run_seed: int, node_id: int, incarnation: int) -> str:
    """The seed of node ``node_id``'s ``incarnation``-th core (0: its first life)."""
    return f"{run_seed}:node:{node_id}" + (f":{incarnation}" if incarnation else "")
