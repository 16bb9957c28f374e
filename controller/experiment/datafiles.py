"""Reading the plain-text data files that plans come from (traces, edge lists, matrices)."""

from __future__ import annotations

import gzip
from collections.abc import Iterator
from pathlib import Path


class PlanError(ValueError):
    """A plan that cannot be rendered; the message names the file, line or field."""


def data_lines(path: str | Path, comments: str = "#") -> Iterator[tuple[int, str]]:
    """(line number, stripped line) of every line that is neither blank nor a comment; gzip is
    read transparently. An unreadable file is a PlanError naming it."""
    opener = gzip.open if str(path).endswith(".gz") else open
    try:
        with opener(path, "rt") as f:
            for lineno, line in enumerate(f, 1):
                line = line.strip()
                if line and line[0] not in comments:
                    yield lineno, line
    except OSError as e:
        raise PlanError(f"{path}: cannot read: {e}") from None
