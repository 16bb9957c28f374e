"""The experiment schema's sections of what happens during a run: ``publications``, ``churn``,
``network`` (delays, loss, partitions) and ``phases``."""

from __future__ import annotations

from typing import Annotated, Literal, Union

from pydantic import (
    BeforeValidator,
    Field,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    model_validator,
)

from controller.experiment.strict import MAX_PUBLICATIONS, MAX_RATE_PER_S, BandwidthKbps, DelayMs, Strict, by_model, tagged
from node.kit.rejoin import RejoinPolicy


class Publications(Strict):
    driver: Literal["schedule", "locust"] = "schedule"
    """schedule: the controller publishes the planned events at their times; locust: Locust users
    publish at rate_per_s for count / rate_per_s seconds, choosing topic and publisher the same way
    (local backend)."""
    locust_users: PositiveInt = 16
    """locust: simulated users; each publishes rate_per_s / locust_users times per second."""
    mode: Literal["rate", "per_topic"] = "rate"
    """rate: `count` events at `rate_per_s`; per_topic: one event per non-empty topic per round (the papers)."""
    count: Annotated[int, Field(gt=0, le=MAX_PUBLICATIONS)] = 50
    """Events to publish (mode rate)."""
    rate_per_s: Annotated[float, Field(gt=0.0, le=MAX_RATE_PER_S)] = 10.0
    """Publications per second, evenly spaced (both modes)."""
    rounds: PositiveInt = 1
    """Rounds of one event per topic (mode per_topic)."""
    round_interval_s: PositiveFloat = 1.0
    """per_topic: a round starts every so many seconds; its events are published together."""
    topics_per_round: PositiveInt | None = None
    """per_topic: publish on this many random non-empty topics per round (default: all)."""
    freeze: bool = False
    """per_topic, sim: each round disseminates on a frozen overlay (gossip paused until no event
    message is in flight), as the papers measure."""
    topic_choice: Literal["uniform", "popularity"] = "uniform"
    """Topic of each event (mode rate): uniform over non-empty topics, or in proportion to subscribers."""
    payload_bytes: int = Field(64, ge=0, le=65536)
    """Payload size of each event."""
    publisher: Literal["subscriber", "any"] = "subscriber"
    """Who publishes an event: a random (online) subscriber of its topic, or any random online
    node (ferretti-gossip.md §10 item 7: sources need not subscribe)."""


class Lengths(Strict):
    """A distribution of durations (session or downtime lengths)."""

    distribution: Literal["exponential", "weibull", "pareto", "constant"] = "exponential"
    """exponential(mean), weibull(mean, shape), pareto(mean, shape > 1), constant(mean)."""
    mean_s: PositiveFloat = 60.0
    """Mean length in seconds."""
    shape: PositiveFloat = 1.5
    """Shape parameter (weibull k; pareto alpha, must exceed 1)."""

    @model_validator(mode="after")
    def _pareto(self) -> Lengths:
        if self.distribution == "pareto" and self.shape <= 1:
            raise ValueError("pareto needs shape > 1 for a finite mean")
        return self


class FlashCrowd(Strict):
    kind: Literal["flash_crowd"]
    at_s: NonNegativeFloat
    """When it starts (seconds after the warm-up)."""
    nodes: PositiveInt
    """Nodes that arrive (they are offline until then)."""
    over_s: NonNegativeFloat = 0.0
    """Arrivals spread uniformly over this long."""


class SharpDrop(Strict):
    kind: Literal["sharp_drop"]
    at_s: NonNegativeFloat
    """When it happens (seconds after the warm-up)."""
    fraction: float = Field(gt=0.0, le=1.0)
    """Share of the nodes alive at that moment that crash at once."""
    return_after_s: PositiveFloat | None = None
    """If set, the crashed nodes come back after this long."""


class Crashes(Strict):
    """The DPS paper's failure model: every ``every_s`` from ``at_s`` to ``until_s``, with
    ``probability``, one live node chosen uniformly crashes (its E2: every step with p; its E3
    burst: every 2 steps with 1)."""

    kind: Literal["crashes"]
    at_s: NonNegativeFloat
    """When they start (seconds after the warm-up)."""
    until_s: PositiveFloat
    """When they stop (seconds after the warm-up)."""
    every_s: PositiveFloat
    """One draw per this long."""
    probability: float = Field(1.0, gt=0.0, le=1.0)
    """Chance that a draw crashes a node."""
    spare: list[NonNegativeInt] = []
    """Nodes never chosen (a protocol's seed, say)."""

    @model_validator(mode="after")
    def _window(self) -> Crashes:
        if self.until_s <= self.at_s:
            raise ValueError("until_s must be after at_s")
        return self


class Churn(Strict):
    model: Literal["none", "sessions", "trace"] = "none"
    """none; sessions: synthetic on/off sessions; trace: replay a file of (node, join, leave)."""
    fraction: float = Field(0.2, ge=0.0, le=1.0)
    """sessions: share of the nodes that churn (the others stay up)."""
    session: Lengths = Lengths()
    """sessions: how long a churning node stays up."""
    downtime: Lengths = Lengths(mean_s=30.0)
    """sessions: how long it stays down before it rejoins."""
    arrival_rate_per_s: Annotated[float, Field(ge=0.0, le=MAX_RATE_PER_S)] = 0.0
    """sessions: Poisson arrival rate of churning nodes that start offline (0: all start online)."""
    start_s: float = 0.0
    """Churn begins this long after the warm-up (negative: during the warm-up)."""
    path: str | None = None
    """trace: the file. Plain format: 'node join_s leave_s' per line; or PeerSim sessions (see docs)."""
    format: Literal["plain", "peersim"] = "plain"
    """trace: the file's format."""
    align: Literal["absolute", "per_user"] = "absolute"
    """trace (peersim): one time axis for all, or each user's sessions from its own first record."""
    time_scale: PositiveFloat = 1.0
    """trace: divide trace times by this (compress time)."""
    offset_s: NonNegativeFloat = 0.0
    """trace: skip this much of the trace (after scaling)."""
    leave: Literal["crash", "graceful"] = "crash"
    """How nodes go: crash (SIGKILL, no goodbye) or graceful (Leave, then SIGTERM)."""
    rejoin: Annotated[RejoinPolicy, BeforeValidator(lambda v: "resume" if v == "keep_state" else v)] = "resume"
    """What a node that comes back resumes (the one rule of :mod:`node.kit.rejoin`, on every
    backend): resume: its state (views, subscriptions) as it went down; fresh: nothing, a new
    incarnation with a seed of its own and new event ids. (keep_state: resume's former name.)"""
    phases: list[Annotated[Union[FlashCrowd, SharpDrop, Crashes], Field(discriminator="kind")]] = []
    """Flash crowds, sharp drops and crash series on top of the model."""

    @model_validator(mode="after")
    def _trace_path(self) -> Churn:
        if self.model == "trace" and not self.path:
            raise ValueError("churn.model trace needs churn.path")
        return self


class ConstantDelay(Strict):
    model: Literal["constant"] = "constant"
    ms: DelayMs = 0.0
    """One-way delay of every link."""


class DistributionDelay(Strict):
    """Each directed link gets a fixed one-way delay drawn once from a distribution."""

    model: Literal["distribution"]
    distribution: Literal["uniform", "normal", "lognormal", "exponential", "pareto"] = "lognormal"
    """The distribution of per-link delays."""
    mean_ms: Annotated[DelayMs, Field(gt=0.0)] = 50.0
    """Mean per-link delay."""
    std_ms: DelayMs = 20.0
    """Standard deviation (uniform, normal, lognormal)."""
    shape: PositiveFloat = 2.5
    """Pareto alpha (> 1)."""


class GeoDelay(Strict):
    """Nodes placed uniformly at random on a unit square; delay grows with distance."""

    model: Literal["geo"]
    base_ms: DelayMs = 5.0
    """Delay at distance 0."""
    ms_per_unit: Annotated[DelayMs, Field(gt=0.0)] = 100.0
    """Added delay per unit of distance (the square's side is 1)."""


class MatrixDelay(Strict):
    """Delays from a measured matrix (King format: one row per line, whitespace-separated RTTs,
    gzip allowed). Nodes map to matrix hosts at random (seeded), reusing hosts if needed."""

    model: Literal["matrix"]
    path: str
    """The matrix file (relative paths resolve against the experiment file's folder)."""
    scale: PositiveFloat = 0.5
    """One-way delay = value x scale (0.5 turns an RTT in ms into a one-way delay in ms)."""


Delay = Annotated[Union[tagged(ConstantDelay, DistributionDelay, GeoDelay, MatrixDelay)], by_model("constant")]


class Partition(Strict):
    start_s: float
    """When the cut begins (seconds after the warm-up)."""
    end_s: float
    """When it heals."""
    nodes: list[int] | None = None
    """The nodes cut off from the rest; or use fraction."""
    fraction: float | None = Field(None, gt=0.0, lt=1.0)
    """Share of nodes (chosen at random, seeded) cut off from the rest."""

    @model_validator(mode="after")
    def _which(self) -> Partition:
        if (self.nodes is None) == (self.fraction is None):
            raise ValueError("give exactly one of nodes or fraction")
        if self.end_s <= self.start_s:
            raise ValueError(f"end_s ({self.end_s}) must come after start_s ({self.start_s})")
        return self


class Network(Strict):
    delay: Delay = ConstantDelay()
    """Per-link one-way delay model."""
    jitter_ms: DelayMs = 0.0
    """Each message's delay varies uniformly in [delay - jitter, delay + jitter] (clipped at 0)."""
    loss: float = Field(0.0, ge=0.0, le=1.0)
    """Probability that a message is lost."""
    bandwidth_kbps: BandwidthKbps | None = None
    """Per-sender serialisation delay: message bytes x 8 / bandwidth (none: unlimited)."""
    partitions: list[Partition] = []
    """Node sets cut off from the others during a time window."""
    fidelity_links: int = Field(20, ge=0)
    """Real backends (local, k8s): links probed at the end of the run to check delay, jitter and
    loss against the plan (sim applies the plan exactly and probes nothing)."""
    fidelity_probes: PositiveInt = 100
    """Probes per sampled link at the end of the run."""
    fidelity_interval_ms: PositiveFloat = 50.0
    """Time between two probes on one link (links are probed at the same time)."""
    fidelity_every_s: NonNegativeFloat = 5.0
    """Real backends: during the run, a round of probes every this many seconds (0: none), on
    ``fidelity_links`` links drawn among the live nodes: delay and loss under the run's own load."""
    fidelity_round_probes: PositiveInt = 5
    """Probes per link in each round during the run."""


class Phases(Strict):
    warmup_s: NonNegativeFloat = 10.0
    """Overlay maintenance before the first publication."""
    drain_s: NonNegativeFloat = 5.0
    """Time after the last publication before the run ends."""
