"""matplotlib, headless, and the one way plots are saved."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

__all__ = ["plt", "save"]


def save(fig, plots: Path, name: str) -> str:
    """Write ``fig`` to ``plots/name``, close it; returns its path relative to the run directory."""
    fig.tight_layout()
    fig.savefig(plots / name, dpi=100)
    plt.close(fig)
    return f"{plots.name}/{name}"
