"""The base of every section of the experiment schema: unknown keys refused, attribute
docstrings as field descriptions, values frozen; and the tagged unions of sections by ``model``."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag

from node.kit.links import BANDWIDTH_KBPS, MAX_DELAY_MS


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True, frozen=True, allow_inf_nan=False)


DelayMs = Annotated[float, Field(ge=0.0, le=MAX_DELAY_MS)]
"""A link delay or its spread, in milliseconds: at most an hour."""
BandwidthKbps = Annotated[float, Field(ge=BANDWIDTH_KBPS[0], le=BANDWIDTH_KBPS[1])]
"""A link's bandwidth: 1 kbps to 1 Tbps."""
MAX_RATE_PER_S = 100_000.0
"""The most publications per second a plan may ask for."""
MAX_NODES = 1_000_000
"""The most nodes an experiment may have (the simulator's reach; a backend of real peers runs fewer)."""
MAX_PUBLICATIONS = 10_000_000
"""The most publications a plan may ask for."""



def by_model(default: str) -> Discriminator:
    """Discriminate a union on ``model``, which may be left out for the default model."""
    def tag(value) -> str:
        return value.get("model", default) if isinstance(value, dict) else getattr(value, "model", default)
    return Discriminator(tag)


def tagged(*models: type[Strict]) -> tuple:
    """Each model tagged with its ``model`` literal, for :func:`by_model`."""
    return tuple(Annotated[m, Tag(m.model_fields["model"].annotation.__args__[0])] for m in models)
