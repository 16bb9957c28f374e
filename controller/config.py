"""The experiment file: one typed, documented schema, validated before anything starts.

Every field has a default and a one-line description (the attribute docstring, which also lands
in the JSON Schema printed by ``overlaylab schema``). Unknown keys and wrong types are errors
that name the field's path and what was expected. Protocol parameters come from the protocol's
own config dataclass in ``node/core`` (one source of truth), chosen by ``protocol.name``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal, Union

import yaml
from pydantic import (
    BaseModel, ConfigDict, Field, NonNegativeFloat, PositiveFloat, PositiveInt, ValidationError,
    create_model, model_validator,
)

from node.core import protocol_config_class, protocol_names


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True, frozen=True)


def _protocol_models() -> Any:
    models = [
        create_model(
            name,
            __base__=Strict,
            name=(Literal[name], ...),
            params=(protocol_config_class(name), Field(default_factory=protocol_config_class(name))),
        )
        for name in protocol_names()
    ]
    if len(models) == 1:
        return models[0]
    return Annotated[Union[tuple(models)], Field(discriminator="name")]


ProtocolSpec = _protocol_models()


class Nodes(Strict):
    count: PositiveInt = 32
    """Number of peers."""
    peers_per_process: PositiveInt = 4
    """local backend: peers hosted by one OS process (one gRPC server each)."""
    bootstrap_contacts: PositiveInt = 5
    """Random live contacts each joining peer gets from the controller."""


class Workload(Strict):
    model: Literal["uniform"] = "uniform"
    """Subscription model: uniform = every node picks its topics uniformly at random."""
    topics: PositiveInt = 8
    """Number of topics."""
    subscriptions_per_node: PositiveInt = 2
    """Topics each node subscribes to (uniform model)."""

    @model_validator(mode="after")
    def _fits(self) -> Workload:
        if self.subscriptions_per_node > self.topics:
            raise ValueError(
                f"subscriptions_per_node ({self.subscriptions_per_node}) exceeds topics ({self.topics})"
            )
        return self


class Publications(Strict):
    count: PositiveInt = 50
    """Events to publish."""
    rate_per_s: PositiveFloat = 10.0
    """Publications per second, evenly spaced."""
    topic_choice: Literal["uniform"] = "uniform"
    """How each event's topic is drawn (uniform over topics with at least one subscriber)."""
    payload_bytes: int = Field(64, ge=0, le=65536)
    """Payload size of each event."""


class Network(Strict):
    delay_ms: NonNegativeFloat = 0.0
    """One-way delay of every link."""
    jitter_ms: NonNegativeFloat = 0.0
    """Delay varies uniformly in [delay - jitter, delay + jitter] (clipped at 0)."""
    loss: float = Field(0.0, ge=0.0, le=1.0)
    """Probability that a message is lost."""


class Phases(Strict):
    warmup_s: NonNegativeFloat = 10.0
    """Overlay maintenance before the first publication."""
    drain_s: NonNegativeFloat = 5.0
    """Time after the last publication before the run ends."""


class Analysis(Strict):
    delivery_window_s: PositiveFloat | None = None
    """W: a copy counts as delivered within W seconds of the publication (default: the run's end)."""
    join_warmup_s: NonNegativeFloat = 0.0
    """A node is an expected receiver only this long after its join."""


class Sim(Strict):
    wire_codec: bool = True
    """Encode and decode every simulated message with the real protobuf codec."""
    check_invariants: bool = False
    """Check every core's invariants after each message (slow; for debugging)."""


class Outputs(Strict):
    dir: str = "runs"
    """Where run directories are created."""
    analyze: bool = True
    """Run the analysis when the experiment ends."""


class Experiment(Strict):
    name: str = Field("experiment", pattern=r"^[A-Za-z0-9_.-]+$")
    """Experiment name (part of the run id)."""
    seed: int = 1
    """Seed of every random choice: the same file and seed give the same plan."""
    backend: Literal["sim", "local", "k8s"] = "local"
    """Where peers run: sim (discrete-event), local (gRPC processes), k8s (Helm chart)."""
    protocol: ProtocolSpec = Field(default_factory=lambda: ProtocolSpec(name="gossip"))  # type: ignore[operator]
    """Protocol name and its parameters (defaults from the protocol spec)."""
    nodes: Nodes = Nodes()
    workload: Workload = Workload()
    publications: Publications = Publications()
    network: Network = Network()
    phases: Phases = Phases()
    analysis: Analysis = Analysis()
    sim: Sim = Sim()
    outputs: Outputs = Outputs()

    def cycle_s(self) -> float:
        """The protocol's gossip period in seconds (for per-cycle overhead)."""
        params = self.protocol.params
        cyclon = getattr(params, "cyclon", params)
        return getattr(cyclon, "cycle_ms", 1000.0) / 1000.0


class ExperimentError(ValueError):
    """An experiment file that cannot run; the message names the file and each bad field."""


def apply_overrides(data: dict, overrides: list[str]) -> dict:
    """Apply ``PATH=VALUE`` overrides (dotted path; VALUE parsed as YAML) to a raw file dict."""
    for item in overrides:
        path, sep, raw = item.partition("=")
        if not sep or not path:
            raise ExperimentError(f"--set {item!r}: expected PATH=VALUE, e.g. nodes.count=64")
        keys = path.split(".")
        node = data
        for key in keys[:-1]:
            child = node.setdefault(key, {})
            if not isinstance(child, dict):
                raise ExperimentError(f"--set {item!r}: {key!r} is not a section")
            node = child
        node[keys[-1]] = yaml.safe_load(raw)
    return data


def load_experiment(path: str | Path, overrides: list[str] = ()) -> Experiment:
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as e:
        raise ExperimentError(f"{path}: cannot read: {e}") from None
    if not isinstance(data, dict):
        raise ExperimentError(f"{path}: expected a mapping of sections at the top level")
    return parse_experiment(apply_overrides(data, list(overrides)), source=str(path))


def parse_experiment(data: dict, source: str = "<experiment>") -> Experiment:
    try:
        return Experiment.model_validate(data)
    except ValidationError as e:
        raise ExperimentError(format_errors(e, source)) from None


def format_errors(e: ValidationError, source: str) -> str:
    lines = [f"{source}: {e.error_count()} invalid field(s)"]
    for err in e.errors():
        loc = ".".join(str(p) for p in err["loc"]) or "(top level)"
        got = f" (got {err['input']!r})" if err["type"] != "missing" and not isinstance(err["input"], dict) else ""
        msg = "unknown field" if err["type"] in ("extra_forbidden", "unexpected_keyword_argument") else err["msg"]
        lines.append(f"  {loc}: {msg}{got}")
    return "\n".join(lines)


def dump_experiment(exp: Experiment) -> str:
    return yaml.safe_dump(exp.model_dump(mode="json"), sort_keys=False)
