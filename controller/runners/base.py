"""The Runner interface: one experiment, carried out by one backend, into one run directory."""

from __future__ import annotations

from abc import ABC, abstractmethod

from ..config import Experiment
from ..rundir import RunDir


class Runner(ABC):
    @abstractmethod
    def run(self, exp: Experiment, rd: RunDir) -> None:
        """Start the peers, carry out the plans, collect traces, snapshots and stats into ``rd``,
        and stop everything it started, also on KeyboardInterrupt."""


def get_runner(backend: str, load_ui: bool = False) -> Runner:
    if backend == "sim":
        from .sim import SimRunner
        return SimRunner()
    if backend == "local":
        from .local import LocalRunner
        return LocalRunner(load_ui=load_ui)
    if backend == "k8s":
        from .k8s import K8sRunner
        return K8sRunner()
    raise ValueError(f"unknown backend {backend!r}")
