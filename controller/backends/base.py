"""The Runner interface: one experiment, carried out by one backend, into one run directory."""

from __future__ import annotations

from abc import ABC, abstractmethod

from controller.backends.rundir import RunDir
from controller.experiment.schema import Experiment


class Runner(ABC):
    @abstractmethod
    def run(self, exp: Experiment, rd: RunDir) -> None:
        """Start the peers, carry out the plans, collect traces, snapshots and stats into ``rd``,
        and stop everything it started, also on KeyboardInterrupt."""
