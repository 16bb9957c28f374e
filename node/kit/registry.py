"""Protocols by name: what a protocol declares once, and where every part of the testbed looks.

A protocol is a :class:`ProtocolSpec`: its name, its config dataclass (the one source of its
parameters, their defaults and docs; the experiment schema is built from it), a ``build``
function that stacks its layers and rule for one node, its cycle period and reply timeout (for
per-cycle overhead and the gRPC shell's deadlines), and the parameters only dissemination reads.

Protocols outside this package register the same way (see :mod:`node.kit.plugins` for loading
their modules in the controller and in every peer process).
"""

from __future__ import annotations

import importlib
import pkgutil
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from node.kit.stack import Stack
from node.kit.types import Descriptor, LocalProtocolError


@dataclass(frozen=True)
class ProtocolSpec:
    name: str
    config: type
    """The config dataclass (pydantic-validated, ``extra: forbid``)."""
    build: Callable[[Descriptor, Any, random.Random, dict[str, Any]], Stack]
    """One node's stack from its profile, the config, its random source and ``shared``: a dict
    the driver passes to every core it hosts, for memos that many cores can share (never state
    that changes a run: a core given a fresh one behaves the same)."""
    cycle_s: Callable[[Any], float]
    """The gossip cycle in seconds (what 'per cycle' means in the analysis)."""
    reply_timeout_s: Callable[[Any], float]
    """The longest a request waits for its reply (the gRPC deadline adds a margin to it)."""
    dissemination_params: frozenset[str] = frozenset()
    """Config fields only the dissemination rule reads (``sim.variants`` may change them)."""
    contacts: str | None = None
    """The ``nodes.contacts`` mode the protocol needs, if it works from one only (DPS: ``seed``)."""
    channels_follow_links: bool = False
    """The gRPC shell keeps channels only to the core's current neighbours (the union of its
    views), closing the others once idle at every timer tick: its open channels are then the
    node's physical links (StaN's PVS). Otherwise a channel stays open once used."""


_protocols: dict[str, ProtocolSpec] = {}


def register_protocol(spec: ProtocolSpec) -> ProtocolSpec:
    if spec.name in _protocols and _protocols[spec.name] != spec:
        raise LocalProtocolError(f"protocol {spec.name!r} is registered twice")
    _protocols[spec.name] = spec
    return spec


BUILTIN_PACKAGE = "node.protocols"


def _builtin_folders() -> list[str]:
    package = importlib.import_module(BUILTIN_PACKAGE)
    return sorted(m.name for m in pkgutil.iter_modules(package.__path__) if m.ispkg)


def load_builtin_protocols() -> None:
    """Import every folder of :mod:`node.protocols` (each registers its protocols)."""
    for folder in _builtin_folders():
        importlib.import_module(f"{BUILTIN_PACKAGE}.{folder}")


def protocol_names() -> list[str]:
    """Every protocol: the built-in ones and those registered from outside."""
    load_builtin_protocols()
    return sorted(_protocols)


def builtin_protocols() -> list[str]:
    """The protocols of :mod:`node.protocols` (those the container image carries without plugins)."""
    return [n for n in protocol_names() if _protocols[n].build.__module__.startswith(f"{BUILTIN_PACKAGE}.")]


def protocol_spec(name: str) -> ProtocolSpec:
    if name not in _protocols:
        if name in _builtin_folders():
            importlib.import_module(f"{BUILTIN_PACKAGE}.{name}")
        if name not in _protocols:
            load_builtin_protocols()
    try:
        return _protocols[name]
    except KeyError:
        raise LocalProtocolError(f"unknown protocol {name!r}; registered: {', '.join(protocol_names())}") from None


def protocol_config_class(name: str) -> type:
    return protocol_spec(name).config


def dissemination_params(name: str) -> frozenset[str]:
    return protocol_spec(name).dissemination_params


def create_protocol(name: str, me: Descriptor, config: Any, rng: random.Random,
                    shared: dict[str, Any] | None = None, incarnation: str = "0") -> Stack:
    """A new core; ``incarnation`` tells this core's event ids from an earlier core's of the node."""
    stack = protocol_spec(name).build(me, config, rng, {} if shared is None else shared)
    stack.incarnation = incarnation
    return stack
