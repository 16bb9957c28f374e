"""The backends that carry out an experiment (``sim``, ``local``, ``k8s``), found by name, and
what they share: the run directory, the driver over the peers' Control API, peer hosting and the
chart's values."""

from __future__ import annotations

import importlib

from controller.backends.base import Runner

BACKENDS = {"sim": "controller.backends.sim:SimRunner",
            "local": "controller.backends.local:LocalRunner",
            "k8s": "controller.backends.k8s:K8sRunner"}
"""Backend name -> its Runner class (imported when asked for: ``local`` needs no Kubernetes client)."""


def get_runner(backend: str, load_ui: bool = False) -> Runner:
    try:
        module, _, cls = BACKENDS[backend].partition(":")
    except KeyError:
        raise ValueError(f"unknown backend {backend!r}; one of {', '.join(BACKENDS)}") from None
    runner: type[Runner] = getattr(importlib.import_module(module), cls)
    return runner(load_ui=load_ui) if backend == "local" else runner()


__all__ = ["BACKENDS", "Runner", "get_runner"]
