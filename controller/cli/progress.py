"""Progress display for long phases (rich): a bar on a terminal; elsewhere (a log, CI, nohup) a
plain line every ``LOG_EVERY_S`` seconds of wall time, so a run of an hour says how far it is.
Used by the backends and by the analysis (which imports nothing else of the controller)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

console = Console(stderr=True)
LOG_EVERY_S = 60.0


def _clock(seconds: float) -> str:
    s = int(seconds)
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"


@contextmanager
def phase(description: str, total: float) -> Iterator[Callable[..., None]]:
    """A progress bar for one phase; yields ``advance_to(done, step=None)``: ``step`` names what
    the phase is doing now (shown after the description)."""
    terminal = console.is_terminal
    with Progress(
        TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed:.0f}/{task.total:.0f}"),
        TimeElapsedColumn(), TimeRemainingColumn(), console=console, transient=False, disable=not terminal,
    ) as progress:
        task = progress.add_task(description, total=total)
        base = description
        start = last = time.monotonic()

        def advance(done: float, step: str | None = None) -> None:
            nonlocal last, description
            if step is not None:
                description = f"{base}: {step}"
            progress.update(task, completed=done, description=description)
            now = time.monotonic()
            if terminal or now - last < LOG_EVERY_S or not 0 < done < total:
                return
            last = now
            left = (now - start) * (total - done) / done
            console.print(f"{description}: {done:.0f}/{total:.0f} ({done / total:.0%}) after {_clock(now - start)},"
                          f" about {_clock(left)} left at the rate so far", soft_wrap=True)

        yield advance
    if not terminal:
        console.print(f"{base}: done")
