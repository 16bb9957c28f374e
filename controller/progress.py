"""Progress display for long phases (rich), quiet when not on a terminal."""

from __future__ import annotations

from contextlib import contextmanager

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

console = Console(stderr=True)


@contextmanager
def phase(description: str, total: float):
    """A progress bar for one phase; yields ``advance_to(done)``."""
    with Progress(
        TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed:.0f}/{task.total:.0f}"),
        TimeElapsedColumn(), console=console, transient=False, disable=not console.is_terminal,
    ) as progress:
        task = progress.add_task(description, total=total)
        yield lambda done: progress.update(task, completed=done)
    if not console.is_terminal:
        console.print(f"{description}: done")
