"""DPS's parameters (spec ../shared/design/protocols/dps.md §6.1): one dataclass, the experiment
schema's source for ``protocol.params`` when ``protocol.name`` is dps."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass
class DpsConfig:
    traversal: Literal["root", "generic"] = "root"
    """root: every FIND_GROUP and PUBLISH starts at the root and goes down; generic: at a tree
    contact (a publisher's own group), going up and down (spec §4.3)."""
    step_ms: float = 200.0
    """Wall length of one step of the paper's simulator (spec §6.6)."""
    tick_steps: int = 5
    """Steps between the checks of timeouts and new subscriptions (choice)."""
    find_timeout_steps: int = 30
    """A subscription not joined after this long is retried from the start (spec T_find_timeout)."""
    create_timeout_steps: int = 10
    """A parent stays blocked for a child's creation at most this long (spec T_create_timeout)."""
    locate_retry_steps: int = 5
    """A node told that a tree is being created asks again after this long (choice)."""
    parent_side_filter: bool = True
    """A parent sends an event only to the children whose label matches it (spec §4.5)."""
    group_on: Literal["interval", "first_predicate"] = "interval"
    """The label of a subscription on its join attribute: the intersection of its predicates on
    it, or the first predicate alone (spec §2.2)."""
    join_attr_policy: Literal["random", "first"] = "random"
    """Which attribute's tree a subscription joins (spec §2.4)."""
    tree_contacts: int = 3
    """Recent subscribers of a tree the seed hands out as contacts (spec C_tree)."""
    seen_capacity: int = 100_000
    """Event ids remembered for duplicate suppression, LRU (spec SEEN_LRU)."""
    co_leaders: int = 1
    """Co-leaders per group, each with a replica of the leader's state (spec K_c); a root group
    without subscribers takes the leaders of its first children as routers (spec ROUTER)."""
    fd_min_steps: int = 10
    fd_max_steps: int = 25
    """Failure-detection probes every U[fd_min_steps, fd_max_steps] steps, redrawn (spec T_fd)."""
    probe_misses: int = 1
    """A node probed this many rounds running without a word from it in between is suspected
    (choice: the paper's heartbeats name no threshold; 0 = probes are one-way, only a failed
    send reveals a death, which needs ``sim.failure_detection: oracle``)."""
    owner_ttl_steps: int = 25
    """A tree's root leader this node has had no word of for this long is located again at the
    seed before a publication or FIND_GROUP goes to it (spec §4.4.2 step 1 locates the tree for
    each publication; choice: an entry heard of within one failure-detection period is trusted,
    as a neighbour is; 0 = located every time)."""
    silence_steps: int = 50
    """A member that heard nothing from its group this long probes its leader (spec T_silence)."""
    comm: Literal["leader", "epidemic"] = "leader"
    """leader: a leader per group relays everything; epidemic: every member keeps partial views
    of its group and of the neighbouring groups, and events and membership changes are gossiped
    (spec §4.6)."""
    fanout: int = 2
    """Epidemic: members an event is gossiped to inside a group (spec k)."""
    next_fanout: int = 2
    """Epidemic: contacts of each next group the tree-entry node sends an event to (spec k');
    other entry nodes send to one."""
    sub_fanout: int = 2
    """Epidemic: members a membership change is gossiped to (spec F_s)."""
    p0: float = 1.0
    """Epidemic: a node that forwarded a message c times forwards a later copy with probability
    p0 / (1 + c) (spec §4.6.1, decay_mode NODE)."""
    max_forwards: int = 4
    """Epidemic: most forwards of one message by one node (spec MAX_FWD)."""
    view_size: int = 10
    """Epidemic: groupview size (spec GV_MAX)."""
    group_contacts: int = 4
    """Epidemic: contacts kept per neighbouring group (spec K)."""
    root_replicas: int = 3
    """Epidemic: members of a root group, its owner and routers (spec ROOT_REPLICAS)."""
    seed_backups: int = 0
    """Backup seeds (not in the paper, which finds trees by random walks; 0 = none): the seed
    copies its directory of trees to the first nodes that ask it, up to this many, and names
    them to every asker; a node that finds its seed gone asks the first live backup, which
    serves from then on."""
    repair_window_steps: int = 0
    """Epidemic (not in the paper; 0 = off): each shuffle carries the ids of the events the
    sender has seen in that group over this many steps, and the partner sends it those it has
    and the sender lacks (anti-entropy: what rumour mongering misses is repaired)."""

    __pydantic_config__ = {"extra": "forbid"}

    def __post_init__(self) -> None:
        if self.step_ms <= 0 or min(self.tick_steps, self.find_timeout_steps, self.create_timeout_steps,
                                    self.locate_retry_steps, self.tree_contacts, self.seen_capacity,
                                    self.fd_min_steps, self.silence_steps, self.fanout, self.next_fanout,
                                    self.sub_fanout, self.max_forwards, self.view_size, self.group_contacts,
                                    self.root_replicas) < 1 \
                or min(self.co_leaders, self.repair_window_steps, self.seed_backups, self.probe_misses, self.owner_ttl_steps) < 0 \
                or not 0 < self.p0 <= 1:
            raise ValueError("step_ms must be positive, p0 in (0, 1], co_leaders, repair_window_steps, seed_backups, probe_misses "
                             "and owner_ttl_steps "
                             "at least 0 "
                             "and every other count and timeout at least 1")
        if self.fd_max_steps < self.fd_min_steps:
            raise ValueError("fd_max_steps must be at least fd_min_steps")

    @property
    def step_s(self) -> float:
        return self.step_ms / 1000.0
