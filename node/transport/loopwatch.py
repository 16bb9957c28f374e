"""How well a peer process keeps up with its plan: a timer every :data:`SAMPLE_S` on its event
loop, and how late it fires (the loop's lag: every emulated delay, timer and reply waits that
long too), with the process's CPU time. Monotone counters in the process's stats (reported with
its first peer's ``GetStats``), which the controller reads during the run and the analysis turns
into ``summary.json`` ``fidelity.verdict`` (analysis/fidelity.py). At each sample the host's
backlogs are read too, as gauges (``host.<name>``, the last sample's value, and
``host.<name>_max``): its resident memory, copies waiting in its inbox, messages queued on its links or held by the
link emulation, spans waiting for export."""

from __future__ import annotations

import asyncio
import os
import time
from collections import Counter
from collections.abc import Callable

SAMPLE_S = 0.2
"""How often the loop's lag is sampled (a timer; about 5 µs of CPU each)."""
LAG_BUCKETS_MS = (10, 100, 1000)
"""Samples later than each of these are counted (``host.lag_over_<b>ms``)."""


class LoopWatch:
    def __init__(self, stats: Counter[str], gauges: Callable[[], dict[str, int]] = dict) -> None:
        self.stats = stats
        self.gauges = gauges
        self._loop: asyncio.AbstractEventLoop | None = None
        self._handle: asyncio.TimerHandle | None = None
        self._due = 0.0

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._arm(loop.time())

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()

    def _arm(self, now: float) -> None:
        assert self._loop is not None
        self._due = now + SAMPLE_S
        self._handle = self._loop.call_at(self._due, self._tick)

    def _tick(self) -> None:
        assert self._loop is not None
        now = self._loop.time()
        lag_ms = (now - self._due) * 1000.0
        st = self.stats
        st["host.lag_samples"] += 1
        for bucket in LAG_BUCKETS_MS:
            if lag_ms > bucket:
                st[f"host.lag_over_{bucket}ms"] += 1
        st["host.lag_ms_sum"] += int(lag_ms)
        st["host.lag_ms_max"] = max(st["host.lag_ms_max"], int(lag_ms))
        st["host.cpu_ms"] = int(time.process_time() * 1000)
        for name, value in {"rss_kib": resident_kib(), **self.gauges()}.items():
            st[f"host.{name}"] = value
            st[f"host.{name}_max"] = max(st[f"host.{name}_max"], value)
        self._arm(now)


_PAGE_KIB = os.sysconf("SC_PAGE_SIZE") // 1024


def resident_kib() -> int:
    """The process's resident memory now (``/proc/self/statm``; 0 where there is none)."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * _PAGE_KIB
    except OSError:
        return 0
