"""The experiment schema's population sections: ``nodes``, ``workload`` (who subscribes to what)
and ``topology`` (a fixed graph the nodes start from)."""

from __future__ import annotations

import math
from typing import Annotated, Literal, Union

from pydantic import (
    Field,
    PositiveFloat,
    PositiveInt,
    model_validator,
)

from controller.experiment.strict import MAX_NODES, Strict, by_model, tagged


class Nodes(Strict):
    count: Annotated[int, Field(gt=0, le=MAX_NODES)] = 32
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
    Union[tagged(UniformWorkload, ZipfWorkload, SpiderCastWorkload, StanGridWorkload, SocialWorkload, TraceWorkload,
                  BernoulliWorkload, UniverseWorkload, ContentWorkload)],
    by_model("uniform"),
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
    Union[tagged(NoTopology, PoissonTopology, ConfigurationTopology, AclTopology, SmallWorldTopology)],
    by_model("none"),
]
