"""Where each node runs: the one peer-process contract, and the pod layout of the k8s backend.

Every backend starts peers with the same JSON config (``python -m node --config``, see
``node/__main__.py``); ``peer_config`` writes it. On Kubernetes (and in the container test) the
layout is a pure function of the experiment file and its seed, so the peer pods, the in-cluster
controller and the Locust workers each compute it on their own and agree:

- the peer StatefulSet ``<release>-peer`` hosts the nodes that never churn, ``k8s.peers_per_pod``
  to a pod, in node order;
- the StatefulSet ``<release>-churner`` hosts each node the churn plan touches in a pod of its own
  (so deleting that pod crashes exactly that node), in node order;
- a pod's k-th node listens on ``k8s.peer_port + k`` (Peer service) and ``k8s.control_port + k``
  (Control service), except that with ``transport.mode: stream`` the pod's nodes share one Peer
  server on ``k8s.peer_port`` (``node/transport/host.py``); both are reached by the pod's DNS name under the headless Service
  ``<release>-peers`` (``<pod>.<release>-peers``).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import asdict, dataclass

from controller.experiment import plans
from controller.experiment.schema import Experiment
from node.transport.peer_config import PeerConfig


def peer_config(exp: Experiment, run_id: str, nodes: list[int], **extra) -> PeerConfig:
    """The peer-process config of ``nodes`` (``extra``: the other fields of :class:`PeerConfig`)."""
    return PeerConfig(run_id=run_id, protocol=exp.protocol.name, params=asdict(exp.protocol.params), seed=exp.seed,
                      nodes=nodes, rejoin=exp.churn.rejoin, transport=exp.transport, run_nodes=exp.nodes.count, **extra)


def release_name(run_id: str) -> str:
    """A short DNS-safe Helm release name for a run (pod names must stay under 63 characters)."""
    return "ovl-" + hashlib.sha1(run_id.encode()).hexdigest()[:8]


@dataclass(frozen=True)
class PodLayout:
    release: str
    peer_pods: tuple[tuple[int, ...], ...]
    churner_pods: tuple[tuple[int, ...], ...]
    port: int
    control_port: int
    domain: str
    """Appended to a pod name to reach it: ``.<release>-peers`` in a cluster, empty on a docker
    network (container name = pod name)."""
    shared_port: bool = False
    """The nodes of a pod share one Peer server on ``port`` (``transport.mode: stream``)."""

    @property
    def service(self) -> str:
        return f"{self.release}-peers"

    def pods(self) -> dict[str, tuple[int, ...]]:
        out = {f"{self.release}-peer-{k}": nodes for k, nodes in enumerate(self.peer_pods)}
        out.update({f"{self.release}-churner-{k}": nodes for k, nodes in enumerate(self.churner_pods)})
        return out

    def nodes_of(self, pod: str) -> tuple[int, ...]:
        m = re.fullmatch(re.escape(self.release) + r"-(peer|churner)-(\d+)", pod)
        groups = {"peer": self.peer_pods, "churner": self.churner_pods}
        if not m or int(m[2]) >= len(groups[m[1]]):
            raise ValueError(f"pod {pod!r} is not in the layout of release {self.release!r}")
        return groups[m[1]][int(m[2])]

    def pod_of(self) -> dict[int, str]:
        return {node: pod for pod, nodes in self.pods().items() for node in nodes}

    def addrs(self, control: bool = False) -> dict[int, str]:
        """Each node's Peer service address, or its Control service address."""
        first = self.control_port if control else self.port
        step = 0 if self.shared_port and not control else 1
        return {node: f"{pod}{self.domain}:{first + step * k}"
                for pod, nodes in self.pods().items() for k, node in enumerate(nodes)}


def pod_layout(exp: Experiment, plan: plans.Plan, release: str, domain: str | None = None) -> PodLayout:
    churning = plan.churn.churning
    stable = [i for i in range(exp.nodes.count) if i not in churning]
    k = exp.k8s.peers_per_pod
    return PodLayout(
        release=release,
        peer_pods=tuple(tuple(stable[i:i + k]) for i in range(0, len(stable), k)),
        churner_pods=tuple((n,) for n in sorted(churning)),
        port=exp.k8s.peer_port,
        control_port=exp.k8s.control_port,
        domain=f".{release}-peers" if domain is None else domain,
        shared_port=exp.transport.mode == "stream",
    )
