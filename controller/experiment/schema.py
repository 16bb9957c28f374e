"""The experiment file: one typed, documented schema, validated before anything starts.

Every field has a default and a one-line description (the attribute docstring, which also lands
in the JSON Schema printed by ``overlaylab schema``). Unknown keys and wrong types are errors
that name the field's path and what was expected. Protocol parameters come from the protocol's
own config dataclass in its folder under ``node/protocols`` (one source of truth), chosen by ``protocol.name``.
"""

from __future__ import annotations

import itertools
import math
import os
from pathlib import Path
from typing import Annotated, Any, Literal, Union

import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    Tag,
    TypeAdapter,
    ValidationError,
    create_model,
    field_validator,
    model_validator,
)

from node.kit import dissemination_params, protocol_config_class, protocol_names, protocol_spec
from node.kit.rejoin import RejoinPolicy
from node.transport.settings import TransportSettings


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True, frozen=True)


PROTOCOL_MODELS: dict[str, type[BaseModel]] = {}
"""``protocol:`` as a model per registered protocol (name and params), built as they register."""


def protocol_union(names: list[str]) -> Any:
    """The ``protocol:`` section's type for the protocols ``names``: tagged by ``name``."""
    for name in names:
        if name not in PROTOCOL_MODELS:
            config = protocol_config_class(name)
            PROTOCOL_MODELS[name] = create_model(
                name, __base__=Strict, name=(Literal[name], ...), params=(config, Field(default_factory=config)))
    models = tuple(PROTOCOL_MODELS[n] for n in names)
    return Annotated[Union[models], Field(discriminator="name")] if len(models) > 1 else models[0]


ProtocolSpec: Any = protocol_union(protocol_names())


class Nodes(Strict):
    count: PositiveInt = 32
    """Number of peers."""
    peers_per_process: PositiveInt = 4
    """local backend: peers hosted by one OS process (one gRPC server each)."""
    bootstrap_contacts: PositiveInt = 5
    """Contacts each peer starts with (a later join: random live ones)."""
    contacts: Literal["random", "ring", "per_topic", "all", "seed"] = "random"
    """How the initial contacts are chosen. random: distinct random other nodes. ring: the
    bootstrap_contacts nearest ids around a ring of all nodes (half on each side, at least one),
    a fixed graph for protocols with a static topology layer. per_topic: for every topic of the
    node, a uniform sample of the topic's other subscribers, min(n_t - 1, ceil(ln n_t + c))
    of them, with c = -ln(-ln(contacts_connectivity)) (Kermarrec, Massoulie, Ganesh: random
    out-views of that size connect the topic's subscribers with that probability); each
    contact's descriptor lists the topics it was drawn for (per-topic overlays, StaN). all: every
    other node with its subscriptions (SpiderCast's full membership; a later join: every live
    node); on local and k8s at most 257 nodes (a join carries at most 256 contacts). seed: the
    lowest-id node (a later join: the lowest-id live node) and bootstrap_contacts - 1 random
    others: one well-known entry point for every node (DPS locates its trees there)."""
    contacts_connectivity: float = Field(0.99, gt=0.0, lt=1.0)
    """per_topic contacts: the probability of connectivity the per-topic sample is sized for."""


class Subscriptions(Strict):
    min: PositiveInt = 2
    """Fewest topics a node subscribes to."""
    max: PositiveInt = 2
    """Most topics a node subscribes to (sizes are uniform in [min, max])."""

    @model_validator(mode="after")
    def _ordered(self) -> Subscriptions:
        if self.min > self.max:
            raise ValueError(f"min ({self.min}) exceeds max ({self.max})")
        return self


class _SubscribesToTopics(Strict):
    """A workload of ``topics`` topics with ``subscriptions`` (min, max) topics per node."""

    @model_validator(mode="after")
    def _subscriptions_fit(self):
        subs, topics = self.subscriptions, self.topics  # type: ignore[attr-defined]
        if subs.max > topics:
            raise ValueError(f"subscriptions.max ({subs.max}) exceeds topics ({topics}): "
                             "a node cannot subscribe to more topics than there are")
        return self


class UniformWorkload(_SubscribesToTopics):
    """Every node picks its topics uniformly at random."""

    model: Literal["uniform"] = "uniform"
    topics: PositiveInt = 8
    """Number of topics."""
    subscriptions: Subscriptions = Subscriptions()
    """Topics per node."""


class ZipfWorkload(_SubscribesToTopics):
    """Topic of rank i is picked with weight i^-alpha (without replacement)."""

    model: Literal["zipf"]
    topics: PositiveInt = 100
    """Number of topics."""
    alpha: float = Field(1.0, ge=0.0)
    """Zipf exponent."""
    subscriptions: Subscriptions = Subscriptions(min=10, max=10)
    """Topics per node."""


class SpiderCastWorkload(_SubscribesToTopics):
    """SpiderCast's popularity models (spidercast.md §6.2): uniform, RSS (Zipf 0.5), Zipf, NYSE."""

    model: Literal["spidercast"]
    topics: PositiveInt = 100
    """Number of topics."""
    popularity: Literal["uniform", "rss", "zipf", "nyse"] = "rss"
    """uniform; rss = Zipf(0.5); zipf = Zipf(alpha); nyse = exponential, top 10% of topics hold 55%."""
    alpha: float = Field(1.0, ge=0.0)
    """Exponent for popularity = zipf."""
    subscriptions: Subscriptions = Subscriptions(min=10, max=10)
    """Topics per node."""


class StanGridWorkload(Strict):
    """StaN's synthetic 2-D model (stan.md §6.2): nodes and topic points on a unit torus; a node
    subscribes to every topic with a point inside its (power-law) interest radius."""

    model: Literal["stan_grid"]
    topics: PositiveInt = 16
    """Number of topics before topics with fewer than 2 subscribers are dropped."""
    points_alpha: float = Field(2.0, gt=1.0)
    """Power-law exponent of the number of points per topic."""
    max_points: PositiveInt = 8
    """Largest number of points of one topic."""
    radius_alpha: float = Field(2.5, gt=1.0)
    """Power-law exponent of the interest radius."""
    radius_min: float | None = Field(None, gt=0.0, le=0.5)
    """Smallest radius (default 0.12 below 1,000 nodes, else 0.05)."""


class SocialWorkload(Strict):
    """PolderCast-style social workload (poldercast.md §7.2): users are topics, follows are
    subscriptions. The graph is BFS-sampled to nodes.count users, keeping every edge among them."""

    model: Literal["social"]
    graph: str = "synthetic"
    """'synthetic' (a directed Chung-Lu follower graph), 'geometric' (a directed geometric
    inhomogeneous random graph: the same heavy tails, with the clustering and shared followees
    of real social graphs) or the path of an edge list ("u v" lines)."""
    directed: bool = True
    """true: Twitter-like, u -> v means u follows v; false: Facebook-like, both follow each other."""
    synthetic_nodes: PositiveInt | None = None
    """Size of the synthetic graph before sampling (default 2 x nodes.count)."""
    mean_follows: PositiveFloat = 20.0
    """Synthetic graph: follow draws per user (repeats and self-follows are dropped)."""
    exponent: float = Field(2.2, gt=2.0)
    """Synthetic graph: power-law exponent of the in- and out-degree weights."""
    locality: float = Field(3.0, gt=1.0)
    """Geometric graph: the exponent of its connection probability; larger keeps follows nearer in
    the latent space (more clustering and link sharing)."""
    bfs_seeds: PositiveInt = 3
    """Random users the BFS starts from."""


class TraceWorkload(Strict):
    """Subscriptions from a file: one 'node topic' pair per line ('#' comments). Node labels are
    mapped to 0..N-1 in order of first appearance; nodes beyond nodes.count are left out."""

    model: Literal["trace"]
    path: str
    """The file (relative paths are resolved against the experiment file's folder)."""
    universe_seeds: PositiveInt | None = None
    """If set, build a StaN/Rappel self-contained universe from this many seed topics."""
    universe_grow: Literal["own_topic", "random_topic"] = "random_topic"
    """How the seed set grows: a user's own topic (LiveJournal) or one random topic (Wikipedia)."""
    universe_min_subscribers: PositiveInt = 30
    """Topics with fewer subscribers are pruned from the universe."""


def _by_model(default: str):
    """Discriminate a union on ``model``, which may be left out for the default model."""
    def tag(value) -> str:
        return value.get("model", default) if isinstance(value, dict) else getattr(value, "model", default)
    return Discriminator(tag)


def _tagged(*models) -> tuple:
    return tuple(Annotated[m, Tag(m.model_fields["model"].annotation.__args__[0])] for m in models)


class BernoulliWorkload(Strict):
    """Each node subscribes to each topic independently with probability sigma (the σ of
    ferretti-gossip.md §2, drawn once per node and network); a node may subscribe to nothing."""

    model: Literal["bernoulli"]
    topics: PositiveInt = 1
    """Number of topics (the paper's analysis has one event type)."""
    sigma: float = Field(0.1, ge=0.0, le=1.0)
    """σ: probability that a node subscribes to a topic."""


class UniverseWorkload(Strict):
    """A self-contained universe (stan.md §6.2) built from a generated LiveJournal-like or
    Wikipedia-like population (controller/experiment/universes.py; synthetic stand-ins for the dumps). It
    fixes the node count: ``overlaylab validate`` names it."""

    model: Literal["universe"]
    flavour: Literal["livejournal", "wikipedia"] = "livejournal"
    """livejournal: users own journals, the universe grows by own journals, mild correlation;
    wikipedia: pages, grows by one random page per user, stronger correlation."""
    population: PositiveInt = 10_000
    """Users of the generated population."""
    pages: PositiveInt | None = None
    """wikipedia: pages in the population (default population / 10)."""
    communities: PositiveInt | None = None
    """Communities users and topics belong to, what correlates subscriptions (default 100
    livejournal, 20 wikipedia)."""
    locality: float | None = Field(None, ge=0.0, le=1.0)
    """Share of a user's subscriptions in its own community (default 0.5 livejournal, 0.95 wikipedia)."""
    popularity_alpha: float = Field(1.0, ge=0.0)
    """Zipf exponent of topic popularity."""
    subscriptions_exponent: float = Field(1.6, gt=1.0)
    """Power-law exponent of subscriptions per user."""
    max_subscriptions: PositiveInt = 500
    """Most subscriptions of one user in the population."""
    seeds: PositiveInt = 100
    """Seed topics of the universe (the paper's Table 1 'Seeds')."""
    min_subscribers: PositiveInt = 30
    """Topics with fewer subscribers are pruned (the paper: 30)."""
    candidates: PositiveInt = 5
    """Universes built; the one with the median topics/nodes ratio is kept (the paper: 100)."""
    seed: int = 1
    """The universe's own seed: runs with different seeds (sweep.seeds) share the universe."""

    def build(self) -> tuple[frozenset[str], ...]:
        from controller.experiment.universes import build

        return build(self.flavour, self.population, self.pages, self.communities, self.locality, self.popularity_alpha,
                     self.subscriptions_exponent, self.max_subscriptions, self.seeds, self.min_subscribers,
                     self.candidates, self.seed)


class ContentWorkload(Strict):
    """Content-based subscriptions and events: one of the DPS paper's Table 1 workloads
    (controller/experiment/content_workloads.py). A subscription is a filter (``?price>=10&symbol*='a'``),
    an event an attribute map (``?price=42&symbol='acgtacg'``) drawn for each publication; an
    event's expected receivers are the nodes with a filter it matches."""

    model: Literal["content"]
    name: Literal["stock", "game", "alert"] = "game"
    """stock (WL1: price and symbol), game (WL2: two coordinates), alert (WL3: three readings)."""
    subscriptions: Subscriptions = Subscriptions(min=1, max=1)
    """Filters per node."""


Workload = Annotated[
    Union[_tagged(UniformWorkload, ZipfWorkload, SpiderCastWorkload, StanGridWorkload, SocialWorkload, TraceWorkload,
                  BernoulliWorkload, UniverseWorkload, ContentWorkload)],
    _by_model("uniform"),
]


class NoTopology(Strict):
    """No fixed graph: each node starts from ``nodes.contacts`` and its protocol builds the overlay."""

    model: Literal["none"] = "none"


class PoissonTopology(Strict):
    """Configuration model with Poisson degrees (ferretti-gossip.md §4.1)."""

    model: Literal["poisson"]
    mean_degree: PositiveFloat = 5.0
    """λ: the mean of the Poisson degree distribution."""


class ConfigurationTopology(Strict):
    """Configuration model from a degree sequence: one degree per line, in node order."""

    model: Literal["configuration"]
    degrees: str
    """The degree-sequence file (relative paths resolve against the experiment file's folder)."""


class AclTopology(Strict):
    """Aiello-Chung-Lu power law (ferretti-gossip.md §4.2): floor(e^a / x^b) nodes of degree x, for
    x = 1 .. floor(e^(a/b)); it fixes the node count (a = 6, b = 1: 2,482)."""

    model: Literal["acl"]
    a: PositiveFloat = 6.0
    """Scale: e^a nodes of degree 1."""
    b: PositiveFloat = 1.0
    """Power-law exponent of the degree distribution."""

    def counts(self) -> list[tuple[int, int]]:
        """(degree x, nodes of that degree) for x = 1 .. floor(e^(a/b))."""
        return [(x, math.floor(math.exp(self.a) / x ** self.b)) for x in range(1, math.floor(math.exp(self.a / self.b)) + 1)]

    def size(self) -> int:
        """N = the sum over x of floor(e^a / x^b)."""
        return sum(c for _, c in self.counts())


class SmallWorldTopology(Strict):
    """Watts-Strogatz small world: a ring lattice of ``neighbours`` links per node, each rewired
    with probability ``rewire``."""

    model: Literal["small_world"]
    neighbours: PositiveInt = 4
    """Lattice degree (each node links to neighbours / 2 on each side; rounded down to even)."""
    rewire: float = Field(0.1, ge=0.0, le=1.0)
    """Probability of rewiring each lattice link to a random node."""


Topology = Annotated[
    Union[_tagged(NoTopology, PoissonTopology, ConfigurationTopology, AclTopology, SmallWorldTopology)],
    _by_model("none"),
]


class Publications(Strict):
    driver: Literal["schedule", "locust"] = "schedule"
    """schedule: the controller publishes the planned events at their times; locust: Locust users
    publish at rate_per_s for count / rate_per_s seconds, choosing topic and publisher the same way
    (local backend)."""
    locust_users: PositiveInt = 16
    """locust: simulated users; each publishes rate_per_s / locust_users times per second."""
    mode: Literal["rate", "per_topic"] = "rate"
    """rate: `count` events at `rate_per_s`; per_topic: one event per non-empty topic per round (the papers)."""
    count: PositiveInt = 50
    """Events to publish (mode rate)."""
    rate_per_s: PositiveFloat = 10.0
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
    arrival_rate_per_s: NonNegativeFloat = 0.0
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
    ms: NonNegativeFloat = 0.0
    """One-way delay of every link."""


class DistributionDelay(Strict):
    """Each directed link gets a fixed one-way delay drawn once from a distribution."""

    model: Literal["distribution"]
    distribution: Literal["uniform", "normal", "lognormal", "exponential", "pareto"] = "lognormal"
    """The distribution of per-link delays."""
    mean_ms: PositiveFloat = 50.0
    """Mean per-link delay."""
    std_ms: NonNegativeFloat = 20.0
    """Standard deviation (uniform, normal, lognormal)."""
    shape: PositiveFloat = 2.5
    """Pareto alpha (> 1)."""


class GeoDelay(Strict):
    """Nodes placed uniformly at random on a unit square; delay grows with distance."""

    model: Literal["geo"]
    base_ms: NonNegativeFloat = 5.0
    """Delay at distance 0."""
    ms_per_unit: PositiveFloat = 100.0
    """Added delay per unit of distance (the square's side is 1)."""


class MatrixDelay(Strict):
    """Delays from a measured matrix (King format: one row per line, whitespace-separated RTTs,
    gzip allowed). Nodes map to matrix hosts at random (seeded), reusing hosts if needed."""

    model: Literal["matrix"]
    path: str
    """The matrix file (relative paths resolve against the experiment file's folder)."""
    scale: PositiveFloat = 0.5
    """One-way delay = value x scale (0.5 turns an RTT in ms into a one-way delay in ms)."""


Delay = Annotated[Union[_tagged(ConstantDelay, DistributionDelay, GeoDelay, MatrixDelay)], _by_model("constant")]


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
    jitter_ms: NonNegativeFloat = 0.0
    """Each message's delay varies uniformly in [delay - jitter, delay + jitter] (clipped at 0)."""
    loss: float = Field(0.0, ge=0.0, le=1.0)
    """Probability that a message is lost."""
    bandwidth_kbps: PositiveFloat | None = None
    """Per-sender serialisation delay: message bytes x 8 / bandwidth (none: unlimited)."""
    partitions: list[Partition] = []
    """Node sets cut off from the others during a time window."""
    fidelity_links: int = Field(20, ge=0)
    """local: links probed at the end of the run to check delay, jitter and loss against the plan."""
    fidelity_probes: PositiveInt = 100
    """Probes per sampled link."""
    fidelity_interval_ms: PositiveFloat = 50.0
    """Time between two probes on one link (links are probed at the same time)."""


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
    engine: Literal["auto", "native", "python"] = "auto"
    """Who runs the overlay while only CYCLON runs (a gossip overlay before its first
    publication): the compiled CYCLON loop (node/sim/native/, built where cargo is present),
    byte for byte as the Python cores would, or the Python cores. ``auto``: the compiled loop
    where it can; ``native``: an error where it cannot; ``python``: never the compiled loop (docs/architecture.md, "The compiled CYCLON loop")."""
    variants: list[dict[str, Any]] = []
    """Dissemination settings to compare on one overlay (e.g. the paper's E3 sweep of fanout and
    shortcut source): the overlay is built once, up to the first publication, and the run then
    forks into one run per entry, each a protocol.params override such as {fanout: 3,
    shortcut_source: cyclon}, in its own run directory under ``variants/``. Only parameters that
    gossip never reads are allowed (PolderCast: fanout, shortcut_source, ring_failover; gossip:
    gamma, ttl), so each variant is exactly the run its own file gives from scratch."""
    parallel_variants: PositiveInt | None = None
    """How many variants run at once (default: the machine's cores)."""
    networks: PositiveInt = 1
    """Independent networks simulated side by side in one run, as the papers average over random
    graphs: each has nodes.count nodes (ids k * nodes.count + i), its own topology, subscriptions
    and publications from a seed derived from (seed, k), and its own topics (``nK.`` prefix).
    The summary reports reach per network (static_gossip) and over all."""


class Sweep(Strict):
    grid: dict[str, list[Any]] = {}
    """``--set`` paths to the values to try, e.g. {nodes.count: [1000, 2000], protocol.params.fanout:
    [2, 3]}: every combination is one point of ``overlaylab sweep`` (``overlaylab run`` ignores it)."""
    points: list[dict[str, Any]] = []
    """More points, one by one, after the grid's combinations: each maps ``--set`` paths to values
    (for settings that are no product, e.g. gamma 0.1 with sigma 0.2..0.6, then sigma 0.1 with
    gamma 0.2..0.6)."""
    seeds: list[int] = []
    """The seeds every point runs with (default: the file's seed); seeds alone sweep the file as
    it is over them."""
    parallel: PositiveInt | None = None
    """Points run at once (default: one per core)."""

    @field_validator("grid")
    @classmethod
    def _lists(cls, grid: dict[str, list[Any]]) -> dict[str, list[Any]]:
        for path, values in grid.items():
            if not values:
                raise ValueError(f"{path}: no values")
            _sweepable(path)
        return grid

    @field_validator("points")
    @classmethod
    def _settings(cls, points: list[dict[str, Any]]) -> list[dict[str, Any]]:
        for k, settings in enumerate(points):
            if not settings:
                raise ValueError(f"points[{k}]: no settings")
            for path in settings:
                _sweepable(path)
        return points

    def settings(self) -> list[dict[str, Any]]:
        """Every point's settings: the grid's combinations, then ``points``."""
        combos = [dict(zip(self.grid, c)) for c in itertools.product(*self.grid.values())] if self.grid else []
        return combos + [dict(p) for p in self.points]

    def paths(self) -> list[str]:
        """Every path a point sets, in order of first appearance."""
        return list(dict.fromkeys(path for s in self.settings() for path in s))


def _sweepable(path: str) -> None:
    if path.split(".")[0] == "sweep":
        raise ValueError(f"{path}: a sweep cannot sweep its own settings")


class Kubernetes(Strict):
    namespace: str = Field("default", pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length=63)
    """k8s: namespace the run is installed into (it must exist)."""
    context: str | None = None
    """k8s: kubeconfig context to use (default: the current one)."""
    image: str = "overlaylab:0.1.0"
    """k8s: the overlaylab image (peers, controller, Locust, results server); `make image` builds it."""
    image_pull_policy: Literal["IfNotPresent", "Always", "Never"] = "IfNotPresent"
    """k8s: pull policy of the overlaylab image (Never for an image loaded into kind/minikube)."""
    peers_per_pod: PositiveInt = 4
    """k8s: peers hosted by one pod of the peer StatefulSet (nodes that churn get a pod each)."""
    peer_port: int = Field(7000, ge=1024, le=65000)
    """k8s: gRPC port of a pod's first peer; its k-th peer listens on peer_port + k."""
    control_port: int = Field(7400, ge=1024, le=65000)
    """k8s: port of the Control service (controller and Locust only) of a pod's first peer; its
    k-th peer's is control_port + k."""
    collector_image: str = "otel/opentelemetry-collector-contrib:0.139.0"
    """k8s: the OpenTelemetry Collector image (contrib: it has the file exporter)."""
    storage_class: str | None = None
    """k8s: storage class of the results volume (default: the cluster's default class)."""
    storage_size: str = Field("2Gi", pattern=r"^[0-9]+(Mi|Gi|Ti)$")
    """k8s: size of the results volume (traces and run directories)."""
    storage_access_mode: Literal["ReadWriteOnce", "ReadWriteMany"] = "ReadWriteOnce"
    """k8s: the Collector and the controller Job share the results volume: ReadWriteOnce puts
    them on one node (kind, minikube); on a multi-node cluster use an RWX class."""
    results_host_path: str | None = None
    """k8s: keep results in this directory of the (single) node instead of a PersistentVolumeClaim,
    for clusters without a storage provisioner; it must exist and be writable by uid 10001. The
    Pod Security Standards (baseline, restricted) refuse hostPath volumes: there, give the
    cluster a PersistentVolume and set storage_class instead."""
    network_faults: Literal["peers", "chaos_mesh"] = "peers"
    """k8s: who emulates delay, jitter and loss: the peers' transport (as in local) or Chaos Mesh
    NetworkChaos (kernel netem; needs Chaos Mesh installed and a kernel with netem)."""
    churn_faults: Literal["controller", "chaos_mesh"] = "controller"
    """k8s: who crashes nodes: the controller deletes pods at the churn plan's times, or a Chaos
    Mesh Schedule of PodChaos pod-kill at the plan's mean crash rate (the controller records each
    kill it sees and joins the restarted node)."""
    locust_workers: PositiveInt = 2
    """k8s: Locust worker pods (publications.driver: locust)."""
    ready_timeout_s: PositiveFloat = 600.0
    """k8s: how long to wait for pods to be ready and for the controller Job to finish setup."""
    teardown: bool = True
    """k8s: delete everything labelled with the run id when the run ends."""

    @model_validator(mode="after")
    def _ports_apart(self) -> Kubernetes:
        peer, control, k = self.peer_port, self.control_port, self.peers_per_pod
        if peer < control + k and control < peer + k:
            raise ValueError(f"peer ports {peer}..{peer + k - 1} overlap control ports {control}..{control + k - 1}")
        return self


class Security(Strict):
    tls: bool | Literal["auto"] = "auto"
    """Mutual TLS between peers, the controller and Locust, from a CA made for the run
    (docs/security.md): true, false, or auto (on for k8s, off for local; sim has no transport)."""


class Outputs(Strict):
    dir: str = "runs"
    """Where run directories are created."""
    analyze: bool = True
    """Run the analysis when the experiment ends."""
    snapshot_every_s: PositiveFloat | None = None
    """Snapshot every node's links this often (convergence over time; on local and k8s peers
    through Control.GetSnapshot, so a snapshot is not one instant); always at the end."""


class Experiment(Strict):
    name: str = Field("experiment", pattern=r"^[A-Za-z0-9_.-]+$")
    """Experiment name (part of the run id)."""
    seed: int = 1
    """Seed of every random choice: the same file and seed give the same plan."""
    backend: Literal["sim", "local", "k8s"] = "local"
    """Where peers run: sim (discrete-event), local (gRPC processes), k8s (Helm chart)."""
    protocol: ProtocolSpec = Field(default_factory=lambda: PROTOCOL_MODELS["gossip"](name="gossip"))
    """Protocol name and its parameters (defaults from the protocol spec)."""
    nodes: Nodes = Nodes()
    topology: Topology = Field(default_factory=NoTopology)
    """A fixed graph the nodes start from (their contacts are their neighbours in it): built by
    the controller from the seed, once per network, for protocols with a static topology layer."""
    workload: Workload = Field(default_factory=UniformWorkload)
    churn: Churn = Churn()
    publications: Publications = Publications()
    network: Network = Network()
    transport: TransportSettings = Field(default_factory=TransportSettings)
    """local and k8s: how peers carry messages (one call per message, or a stream per link)."""
    phases: Phases = Phases()
    analysis: Analysis = Analysis()
    sim: Sim = Sim()
    k8s: Kubernetes = Kubernetes()
    security: Security = Security()
    outputs: Outputs = Outputs()
    sweep: Sweep = Sweep()

    @model_validator(mode="after")
    def _variants(self) -> Experiment:
        labels = [variant_label(v) for v in self.sim.variants]
        if len(set(labels)) < len(labels):
            raise ValueError(f"sim.variants: two variants are the same ({', '.join(labels)})")
        for k, overrides in enumerate(self.sim.variants):
            if self.backend != "sim":
                raise ValueError("sim.variants: only the sim backend forks a run into variants")
            try:
                variant_params(self.protocol, overrides)
            except ValueError as e:
                raise ValueError(f"sim.variants[{k}]: {e}") from None
        return self

    @model_validator(mode="after")
    def _networks(self) -> Experiment:
        if isinstance(self.workload, UniverseWorkload) and len(self.workload.build()) != self.nodes.count:
            size = len(self.workload.build())
            raise ValueError(f"workload: the {self.workload.flavour} universe of {self.workload.seeds} seeds has {size} "
                             f"nodes; set nodes.count: {size} (got {self.nodes.count})")
        if isinstance(self.topology, AclTopology) and self.topology.size() != self.nodes.count:
            raise ValueError(f"topology: acl a={self.topology.a:g} b={self.topology.b:g} has {self.topology.size()} nodes; "
                             f"set nodes.count: {self.topology.size()} (got {self.nodes.count})")
        if isinstance(self.workload, ContentWorkload):
            if self.publications.publisher != "any" or self.publications.mode != "rate":
                raise ValueError("publications: a content workload draws a fresh event for each publication, "
                                 "from any node: set publications.publisher: any and mode: rate")
            if self.protocol.name != "dps":
                raise ValueError(f"workload: content filters need a content-based protocol (dps), not {self.protocol.name!r}")
        needs = protocol_spec(self.protocol.name).contacts
        if needs is not None and self.nodes.contacts != needs:
            raise ValueError(f"nodes.contacts: {self.protocol.name} needs {needs!r} (got {self.nodes.contacts!r})")
        if self.nodes.contacts == "all" and self.backend != "sim":
            from node.wire.codec import MAX_ENTRIES
            if self.nodes.count > MAX_ENTRIES + 1:
                raise ValueError(f"nodes.contacts: all hands every node to every node, and a join carries at most "
                                 f"{MAX_ENTRIES} contacts: {self.backend} runs take at most {MAX_ENTRIES + 1} nodes "
                                 f"(got nodes.count {self.nodes.count})")
        if self.sim.networks > 1:
            if self.backend != "sim":
                raise ValueError("sim.networks: only the sim backend runs several networks in one run")
            if self.churn.model != "none" or self.churn.phases or self.network.partitions:
                raise ValueError("sim.networks: runs of several networks take no churn and no partitions")
            if self.sim.variants:
                raise ValueError("sim.networks: several networks and sim.variants do not combine")
        return self

    def tls(self) -> bool:
        """Whether this run's transport uses mutual TLS (``security.tls``)."""
        return self.security.tls is True or (self.security.tls == "auto" and self.backend == "k8s")

    def cycle_s(self) -> float:
        """The protocol's gossip period in seconds (for per-cycle overhead)."""
        return protocol_spec(self.protocol.name).cycle_s(self.protocol.params)


def variant_params(protocol, overrides: dict[str, Any]):
    """The protocol's params with one variant's ``overrides``, validated; ValueError names the bad
    key and what was expected."""
    allowed = dissemination_params(protocol.name)
    for key in overrides:
        if key not in allowed:
            raise ValueError(f"{key!r} is not a dissemination parameter of {protocol.name} "
                             f"(allowed: {', '.join(sorted(allowed)) or 'none'})")
    merged = {**TypeAdapter(type(protocol.params)).dump_python(protocol.params, mode="json"), **overrides}
    try:
        return TypeAdapter(type(protocol.params)).validate_python(merged)
    except ValidationError as e:
        raise ValueError("; ".join(": ".join(filter(None, (".".join(map(str, err["loc"])), err["msg"].removeprefix("Value error, "))))
                                   for err in e.errors())) from None


def variant_experiment(exp: Experiment, overrides: dict[str, Any]) -> Experiment:
    """``exp`` as the single run of one variant: its params applied, no variants left."""
    data = exp.model_dump(mode="json")
    data["protocol"]["params"].update(overrides)
    data["sim"]["variants"] = []
    return Experiment.model_validate(data)


def variant_label(overrides: dict[str, Any]) -> str:
    """A run-directory name for a variant: ``fanout-3_shortcut_source-cyclon``."""
    return "_".join(f"{k}-{v}" for k, v in overrides.items()) or "base"


class ExperimentError(ValueError):
    """An experiment file that cannot run; the message names the file and each bad field."""


def apply_overrides(data: dict, overrides: list[str]) -> dict:
    """Apply ``PATH=VALUE`` overrides (dotted path, a number indexes a list such as
    ``churn.phases.0.probability``; VALUE parsed as YAML) to a raw file dict."""
    for item in overrides:
        path, sep, raw = item.partition("=")
        if not sep or not path:
            raise ExperimentError(f"--set {item!r}: expected PATH=VALUE, e.g. nodes.count=64")
        keys = path.split(".")
        node: Any = data
        for key in keys[:-1]:
            if isinstance(node, list):
                node = node[_index(item, key, node)]
            else:
                node = node.setdefault(key, {})
            if not isinstance(node, (dict, list)):
                raise ExperimentError(f"--set {item!r}: {key!r} is not a section")
        if isinstance(node, list):
            node[_index(item, keys[-1], node)] = yaml.safe_load(raw)
        else:
            node[keys[-1]] = yaml.safe_load(raw)
    return data


def _index(item: str, key: str, items: list) -> int:
    if not key.isdigit() or int(key) >= len(items):
        raise ExperimentError(f"--set {item!r}: {key!r} is not an index of a list of {len(items)}")
    return int(key)


def load_experiment(path: str | Path, overrides: list[str] = ()) -> Experiment:
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as e:
        raise ExperimentError(f"{path}: cannot read: {e}") from None
    if not isinstance(data, dict):
        raise ExperimentError(f"{path}: expected a mapping of sections at the top level")
    if not data:
        raise ExperimentError(f"{path}: empty experiment file (write at least a name: and the sections that differ "
                              "from the defaults; `overlaylab schema` lists them)")
    data = apply_overrides(data, list(overrides))
    _resolve_paths(data, path.resolve().parent)
    return parse_experiment(data, source=str(path))


def check_data_files(exp: Experiment, source: str = "<experiment>") -> None:
    """Every data file the experiment names exists and is a file: checked before a run directory
    is created (and by ``overlaylab validate``), not halfway through a run."""
    missing = []
    for keys in PATH_FIELDS:
        node: Any = exp
        for k in keys:
            node = getattr(node, k, None)
        if isinstance(node, str) and node not in GENERATED and not Path(node).is_file():
            missing.append(f"  {'.'.join(keys)}: no such file: {node}")
    if missing:
        raise ExperimentError("\n".join([f"{source}: {len(missing)} missing data file(s)", *missing]))


PATH_FIELDS = (("workload", "path"), ("workload", "graph"), ("churn", "path"), ("network", "delay", "path"),
               ("topology", "degrees"))
GENERATED = ("synthetic", "geometric")
"""Values of a path field that name a generator, not a file."""


def data_dir() -> Path:
    """Where ``data:`` paths point: $OVERLAYLAB_DATA_DIR, else ../shared/datasets beside the project."""
    env = os.environ.get("OVERLAYLAB_DATA_DIR")
    return Path(env) if env else Path(__file__).resolve().parent.parent.parent / "shared" / "datasets"


def resolve_path(value: str, base: Path) -> str:
    if value.startswith("data:"):
        return str(data_dir() / value[5:])
    p = Path(value)
    return str(p if p.is_absolute() else (base / p).resolve())


def _resolve_paths(data: dict, base: Path) -> None:
    """Make file paths absolute (relative to the experiment file; ``data:`` to the data folder),
    so the resolved experiment in a run directory still finds its files."""
    for keys in PATH_FIELDS:
        node = data
        for k in keys[:-1]:
            node = node.get(k) if isinstance(node, dict) else None
        if isinstance(node, dict) and isinstance(node.get(keys[-1]), str) and node[keys[-1]] not in GENERATED:
            node[keys[-1]] = resolve_path(node[keys[-1]], base)


def sync_protocols() -> None:
    """Let ``Experiment`` accept every protocol registered so far (one registered after this
    module was imported, e.g. by a test or a plugin, included)."""
    names = protocol_names()
    if sorted(PROTOCOL_MODELS) != names:
        Experiment.model_fields["protocol"].annotation = protocol_union(names)
        Experiment.model_rebuild(force=True)


def experiment_schema(protocols: list[str] | None = None) -> dict:
    """The experiment file's JSON Schema, for every registered protocol or only ``protocols``."""
    sync_protocols()
    if protocols is None:
        return Experiment.model_json_schema()
    model = create_model("Experiment", __base__=Experiment, __doc__=Experiment.__doc__, protocol=(
        protocol_union(protocols),
        Field(default_factory=lambda: PROTOCOL_MODELS["gossip"](name="gossip"),
              description=Experiment.model_fields["protocol"].description)))
    return model.model_json_schema()


def parse_experiment(data: dict, source: str = "<experiment>") -> Experiment:
    sync_protocols()
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
