"""What the controller hands a peer process: one typed model, written by the hosting code
(:func:`controller.backends.hosting.peer_config`, every backend) and read by ``python -m node``,
validated on both sides (an unknown key or a wrong type is an error naming the field).
Importable without gRPC or protobuf."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from node.kit.rejoin import RejoinPolicy
from node.transport.settings import TransportSettings


class PeerConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    run_id: str = Field(min_length=1)
    protocol: str = Field(min_length=1)
    params: dict[str, Any]
    """The protocol's parameters (its config dataclass's fields; the peer validates them against it)."""
    seed: int
    nodes: list[int] = Field(min_length=1)
    """The node ids this process hosts."""
    incarnations: dict[int, int] = {}
    """Node -> which life this process starts (0, the default: its first; the rejoin rule,
    :mod:`node.kit.rejoin`, derives the core's seed from it)."""
    rejoin: RejoinPolicy = "resume"
    """resume: a node restores its checkpoint from ``state_dir`` where there is one; fresh: never."""
    trace_dir: str | None = None
    host: str = "127.0.0.1"
    """Where the Peer service binds."""
    advertise: str | None = None
    """The host name other peers use, where it differs from ``host`` (a pod's DNS name)."""
    ports: dict[int, int] = {}
    """Fixed Peer service ports per node (a restarted peer keeps its address); 0 or absent: any."""
    control_ports: dict[int, int] = {}
    control_host: str = "127.0.0.1"
    """Where the Control listener binds: loopback, so only this machine's controller reaches it,
    unless a controller in another pod must."""
    run_nodes: int | None = Field(None, ge=1)
    """The run's node count: a message naming a node id outside it is refused (None: unchecked)."""
    socket_dir: str | None = None
    """Listen on Unix sockets in this folder (``peer-<node>.sock``, ``control-<node>.sock``, and
    ``host-<first node>.sock`` for a stream server), not on TCP: only users who may open the folder
    connect. ``host``, ``advertise`` and the ports are then unused."""
    pki: str | None = None
    """A folder with the run's ``ca.pem``, ``peer.pem`` and ``peer.key``: mutual TLS everywhere."""
    state_dir: str | None = None
    """Checkpoints: each core is saved there at every tick and restored on a ``resume`` restart."""
    otlp_endpoint: str | None = None
    """Export spans to a Collector instead of ``trace_dir``."""
    refuse_before_join: bool = False
    transport: TransportSettings = TransportSettings()
    exit_with_parent: bool = False
    """Stop, flushing traces, when stdin reaches end of file (the controller holding it died)."""
    standby: bool = False
    """Load, then wait for a line ``START`` on stdin before starting the peers."""

    @model_validator(mode="after")
    def _nodes_known(self) -> PeerConfig:
        for field in ("incarnations", "ports", "control_ports"):
            extra = set(getattr(self, field)) - set(self.nodes)
            if extra:
                raise ValueError(f"{field} names nodes this process does not host: {sorted(extra)}")
        if any(k < 0 for k in self.incarnations.values()):
            raise ValueError("incarnations must be at least 0")
        return self
