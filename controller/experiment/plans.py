"""Plans rendered from an experiment: pure functions of (experiment, seed).

Each plan draws from its own ``random.Random(f"{seed}:{plan}")`` so that adding or changing one
plan never shifts the draws of another. Every backend carries out the same :class:`Plan`.
Times are run times: seconds from the start of the run; the warm-up ends at ``phases.warmup_s``.
"""

from __future__ import annotations

import hashlib
import math
import random
from collections.abc import Iterable
from dataclasses import dataclass, field

from controller.experiment import churn, content_workloads, topology, workloads
from controller.experiment.datafiles import PlanError
from controller.experiment.network import NetworkPlan
from controller.experiment.population import ContentWorkload
from controller.experiment.schema import Experiment
from node.protocols.dps.content import format_event

__all__ = ["Plan", "PlanError", "Publication", "Step", "render", "schedule"]


@dataclass(frozen=True, slots=True)
class Publication:
    at_s: float
    node: int
    topic: str


@dataclass
class Plan:
    subscriptions: list[frozenset[str]]
    contacts: list[list[int]]
    publications: list[Publication]
    churn: churn.ChurnPlan
    network: NetworkPlan
    end_s: float
    skipped_publications: int = 0
    topology: list[dict] = field(default_factory=list)
    """Stats of each network's static graph (``topology.stats``); empty without one."""
    static: bool = False
    """The contacts are a fixed graph (``topology``): a rejoining node gets its neighbours back."""
    contact_topics: list[dict[int, frozenset[str]]] = field(default_factory=list)
    """``nodes.contacts: per_topic``: per node, each contact's topics it was drawn for (what its
    descriptor lists); empty otherwise (a descriptor lists the contact's subscriptions)."""
    online_contacts: dict[int, tuple[list[int], list[int]]] = field(default_factory=dict, repr=False, compare=False)
    """``initial_contacts``' memo: contact list id -> (the list, its nodes online at the start)."""


def render(exp: Experiment) -> Plan:
    """The plan of every network (``sim.networks``; one unless set): network k's nodes are
    k * nodes.count + i, its topics carry the prefix ``nK.``, and it is drawn from its own seed."""
    nets = [network_experiment(exp, k) for k in range(exp.sim.networks)]
    parts = [_NetworkPart.render(e) for e in nets]
    last = max((t for p in parts for t in p.times), default=0.0)
    end = exp.phases.warmup_s + last + exp.phases.drain_s
    churn_plan = churn.render(exp, end)
    subs: list[frozenset[str]] = []
    contacts: list[list[int]] = []
    drawn_for: list[dict[int, frozenset[str]]] = []
    pubs: list[Publication] = []
    skipped = 0
    for k, (e, part) in enumerate(zip(nets, parts)):
        s, c, d = part.subscriptions, part.contacts, part.contact_topics
        ps, sk = publications(e, s, part.times, part.topics, churn_plan)
        skipped += sk
        if len(nets) > 1:
            prefix, offset = f"n{k}.", k * exp.nodes.count
            s = [frozenset(prefix + t for t in ts) for ts in s]
            shifted: dict[int, list[int]] = {}  # a list shared by many nodes stays shared
            c = [shifted.setdefault(id(cs), [j + offset for j in cs]) for cs in c]
            d = [{j + offset: frozenset(prefix + t for t in ts) for j, ts in m.items()} for m in d]
            ps = [Publication(p.at_s, p.node + offset, prefix + p.topic) for p in ps]
        subs, contacts, drawn_for, pubs = subs + s, contacts + c, drawn_for + d, pubs + ps
    pubs.sort(key=lambda p: p.at_s)  # stable: network order at one time
    graphs = [p.graph for p in parts if p.graph is not None]
    return Plan(subs, contacts, pubs, churn_plan, NetworkPlan(exp, len(subs)), end, skipped,
                topology=graphs, static=bool(graphs), contact_topics=drawn_for)


@dataclass
class _NetworkPart:
    """One network's draws: subscriptions, contacts (its graph, or bootstrap contacts), the
    publication slots, and the graph's stats."""

    subscriptions: list[frozenset[str]]
    contacts: list[list[int]]
    times: list[float]
    topics: list[str]
    graph: dict | None
    contact_topics: list[dict[int, frozenset[str]]]

    @classmethod
    def render(cls, exp: Experiment) -> _NetworkPart:
        subs = workloads.render(exp)
        times, topics = publication_slots(exp, subs)
        graph = topology.render(exp)
        if graph is not None:
            return cls(subs, graph[0], times, topics, graph[1], [])
        if exp.nodes.contacts == "per_topic":
            rng = random.Random(f"{exp.seed}:bootstrap")
            members = members_of_topics(subs, range(len(subs)))
            drawn = [per_topic_contacts(exp, subs, i, members, rng) for i in range(len(subs))]
            return cls(subs, [sorted(d) for d in drawn], times, topics, None, drawn)
        return cls(subs, bootstrap_contacts(exp), times, topics, None, [])


def manifest(plan: Plan) -> dict:
    """What ``run.json`` records of the plan beyond times: each network's static graph."""
    return {"topology": plan.topology} if plan.topology else {}


def network_experiment(exp: Experiment, k: int) -> Experiment:
    """Network k's experiment: the file's own for k = 0 (so one network is the plain run), else
    the same with a seed derived from (seed, k)."""
    if k == 0:
        return exp
    seed = int.from_bytes(hashlib.blake2b(f"{exp.seed}:network:{k}".encode(), digest_size=7).digest(), "big")
    return exp.model_copy(update={"seed": seed})


def bootstrap_contacts(exp: Experiment) -> list[list[int]]:
    """Each node's initial contacts (``nodes.contacts``): distinct random other nodes, or its
    nearest ids around a ring. Nodes that join later get live contacts from the backend at
    their join time."""
    n = exp.nodes.count
    if exp.nodes.contacts == "all":  # one list for every node (it leaves itself out): no N² copies
        return [list(range(n))] * n
    if exp.nodes.contacts == "ring":
        half = max(1, exp.nodes.bootstrap_contacts // 2)
        return [sorted({(i + d) % n for d in range(-half, half + 1)} - {i}) for i in range(n)]
    rng = random.Random(f"{exp.seed}:bootstrap")
    k = min(exp.nodes.bootstrap_contacts, n - 1)
    contacts = []
    for i in range(n):
        picks: set[int] = {0} if exp.nodes.contacts == "seed" and i != 0 else set()
        while len(picks) < k:
            j = rng.randrange(n)
            if j != i:
                picks.add(j)
        contacts.append(sorted(picks))
    return contacts


def per_topic_view_size(members: int, connectivity: float) -> int:
    """Out-view size that makes a random graph of ``members`` nodes connected with probability
    ``connectivity``: min(n - 1, ceil(ln n + c)), c = -ln(-ln(connectivity))."""
    c = -math.log(-math.log(connectivity))
    return max(0, min(members - 1, math.ceil(math.log(members) + c)))


def members_of_topics(subs: list[frozenset[str]], among: Iterable[int]) -> dict[str, list[int]]:
    """topic -> the nodes of ``among`` that subscribe to it, in the order of ``among``."""
    members: dict[str, list[int]] = {}
    for j in among:
        for t in sorted(subs[j]):
            members.setdefault(t, []).append(j)
    return members


def per_topic_contacts(exp: Experiment, subs: list[frozenset[str]], node: int, members: dict[str, list[int]],
                       rng: random.Random) -> dict[int, frozenset[str]]:
    """``nodes.contacts: per_topic``: for each topic of ``node`` (in topic order), a uniform
    sample of the topic's other ``members``; contact -> the topics it was drawn for."""
    drawn: dict[int, set[str]] = {}
    for t in sorted(subs[node]):
        others = [j for j in members.get(t, ()) if j != node]
        size = per_topic_view_size(len(others) + 1, exp.nodes.contacts_connectivity)
        for j in rng.sample(others, min(size, len(others))):
            drawn.setdefault(j, set()).add(t)
    return {j: frozenset(ts) for j, ts in sorted(drawn.items())}


def contact_topics(plan: Plan, node: int, contact: int) -> frozenset[str]:
    """The topics ``contact``'s descriptor lists when handed to ``node``: the topics it was drawn
    for (``per_topic`` contacts), else its subscriptions."""
    if plan.contact_topics:
        return plan.contact_topics[node].get(contact, frozenset())
    return plan.subscriptions[contact]


def publication_slots(exp: Experiment, subs: list[frozenset[str]]) -> tuple[list[float], list[str]]:
    """Times (seconds after the warm-up) and topics of every publication: evenly spaced at
    rate_per_s (mode rate), or rounds of one event per topic every round_interval_s (per_topic)."""
    rng = random.Random(f"{exp.seed}:publications")
    p = exp.publications
    if isinstance(exp.workload, ContentWorkload):  # a fresh event each (mode rate, any publisher)
        gen = content_workloads.ContentWorkload(exp.workload.name, exp.seed)
        return [i / p.rate_per_s for i in range(p.count)], [format_event(gen.event(rng)) for _ in range(p.count)]
    counts: dict[str, int] = {}
    for s in subs:
        for t in s:
            counts[t] = counts.get(t, 0) + 1
    topics = sorted(counts)
    if not topics:
        raise PlanError("workload: no node subscribes to anything, so nothing can be published")
    if p.mode == "per_topic":
        times, chosen = [], []
        for r in range(p.rounds):
            picked = topics if p.topics_per_round is None else sorted(rng.sample(topics, min(p.topics_per_round, len(topics))))
            times += [r * p.round_interval_s] * len(picked)
            chosen += picked
        return times, chosen
    if p.topic_choice == "popularity":
        chosen = rng.choices(topics, weights=[counts[t] for t in topics], k=p.count)
    else:
        chosen = [rng.choice(topics) for _ in range(p.count)]
    return [i / p.rate_per_s for i in range(len(chosen))], chosen


def publications(exp: Experiment, subs, times, topics, churn_plan: churn.ChurnPlan) -> tuple[list[Publication], int]:
    """The publisher of each event: a random subscriber of its topic, online at that moment (or,
    with ``publications.publisher: any``, a random online node). An event with no candidate is
    skipped (and counted)."""
    rng = random.Random(f"{exp.seed}:publishers")
    by_topic: dict[str, list[int]] = {}
    for node, ts in enumerate(subs):
        for t in sorted(ts):
            by_topic.setdefault(t, []).append(node)
    everyone = list(range(len(subs)))
    warm = exp.phases.warmup_s
    out, skipped = [], 0
    static = not churn_plan.events and not churn_plan.offline_at_start
    alive_at = churn_plan.alive_at_each((warm + at for at in times), exp.nodes.count)
    for at, topic in zip(times, topics):
        candidates = everyone if exp.publications.publisher == "any" else by_topic[topic]
        alive = next(alive_at)
        if not static:
            candidates = [v for v in candidates if v in alive]
        if not candidates:
            skipped += 1
            continue
        out.append(Publication(warm + at, rng.choice(candidates), topic))
    return out, skipped


def payload(exp: Experiment, index: int) -> bytes:
    size = max(exp.publications.payload_bytes, 8)
    return (b"%08d" % index).ljust(size, b".")[:size]


def join_contacts(exp: Experiment, plan: Plan, node: int, at_s: float, alive: set[int]) -> list[int]:
    """Live contacts for a node that joins at ``at_s`` (seeded by node and time, so every
    backend gives the same ones for the same alive set); on a static graph, its neighbours."""
    if plan.static:
        return plan.contacts[node]
    rng = random.Random(f"{exp.seed}:join:{node}:{at_s:.6f}")
    others = sorted(alive - {node})
    if plan.contact_topics:  # per-topic samples among the live subscribers
        members = members_of_topics(plan.subscriptions, others)
        plan.contact_topics[node] = per_topic_contacts(exp, plan.subscriptions, node, members, rng)
        return sorted(plan.contact_topics[node])
    if exp.nodes.contacts == "all":
        return others
    if exp.nodes.contacts == "seed" and others:  # the lowest-id live node, then random ones
        return [others[0], *rng.sample(others[1:], min(exp.nodes.bootstrap_contacts - 1, len(others) - 1))]
    return rng.sample(others, min(exp.nodes.bootstrap_contacts, len(others)))


def initial_contacts(plan: Plan, node: int) -> list[int]:
    """Bootstrap contacts among the nodes online at the start (a list many nodes share, as with
    ``nodes.contacts: all``, is filtered once and stays shared)."""
    contacts = plan.contacts[node]
    cached = plan.online_contacts.get(id(contacts))
    if cached is None or cached[0] is not contacts:
        cached = plan.online_contacts[id(contacts)] = (contacts, [j for j in contacts if j not in plan.churn.offline_at_start])
    return cached[1]


CHURN_KINDS = frozenset({"join", "leave", "crash"})


@dataclass(frozen=True, slots=True)
class Step:
    """One action of the plan at run time ``at_s``: a churn event (``join``, ``leave``,
    ``crash`` of ``node``), a partition of ``nodes`` going ``partition_on`` or ``partition_off``,
    a ``publish`` (publication number ``index``) or the start of the ``load`` phase (Locust)."""

    at_s: float
    kind: str
    node: int | None = None
    nodes: frozenset[int] = frozenset()
    index: int = -1
    publication: Publication | None = None


def schedule(exp: Experiment, plan: Plan, *, load: bool | None = None) -> list[Step]:
    """Every planned action in the order every backend carries them out: by time; at one time,
    churn, then partitions, then publications, each in plan order. ``load`` (default: when
    ``publications.driver`` is locust): one ``load`` step at the end of the warm-up instead of
    the publications (the simulator, which has no Locust, publishes the plan's schedule)."""
    steps = [Step(e.at_s, e.kind, node=e.node) for e in plan.churn.events]
    for w in plan.network.partitions:
        steps += [Step(w.start_s, "partition_on", nodes=w.nodes), Step(w.end_s, "partition_off", nodes=w.nodes)]
    if exp.publications.driver == "locust" if load is None else load:
        steps.append(Step(exp.phases.warmup_s, "load"))
    else:
        steps += [Step(p.at_s, "publish", node=p.node, index=k, publication=p) for k, p in enumerate(plan.publications)]
    return sorted(steps, key=lambda s: s.at_s)  # stable: plan order at one time
