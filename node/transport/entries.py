"""What a real peer checks, beyond the codec, in the node entries other peers send (gossip,
signals, a join's contacts) and in event copies: addresses, and node ids.

Node ids run from 0 to the run's node count less one (``PeerConfig.run_nodes``): a message that
names another node (as sender, publisher or entry) is refused.

An address another peer hands out becomes a connection this peer opens, so a forged one must not
point it anywhere: on TCP an address is ``host:port`` (a DNS name, an IPv4 address or a
bracketed IPv6 one, port 1 to 65535); on Unix sockets (``PeerConfig.socket_dir``) it is one of the
run's own sockets, ``unix:<socket_dir>/peer-<n>.sock`` or ``host-<n>.sock``, never another file
(``unix:///var/run/docker.sock``). The simulator's addresses are names, not connections: it does
not check them.
"""

from __future__ import annotations

import re

from node.kit.types import Descriptor, RemoteProtocolError

TCP = re.compile(r"(?:[A-Za-z0-9](?:[A-Za-z0-9.-]{0,252})|\[[0-9A-Fa-f:.]{2,45}\]):([0-9]{1,5})")
REMEMBERED = 65_536
"""Valid addresses kept so that each is checked once (a run has as many as it has peers)."""


class Entries:
    def __init__(self, socket_dir: str | None = None, nodes: int | None = None) -> None:
        self.unix = re.compile(rf"unix:{re.escape(socket_dir)}/(?:peer|host)-[0-9]{{1,7}}\.sock") if socket_dir else None
        self.nodes = nodes
        """The run's node count (None: ids are not checked)."""
        self._valid: set[str] = set()

    def check_node(self, node_id: int) -> None:
        if self.nodes is not None and not 0 <= node_id < self.nodes:
            raise RemoteProtocolError(f"a message naming node {node_id}, which this run of {self.nodes} nodes does not have")

    def check(self, addr: str) -> None:
        """RemoteProtocolError unless ``addr`` is an address a peer of this run can have."""
        if addr in self._valid:
            return
        if self.unix is not None:
            ok = self.unix.fullmatch(addr) is not None
        else:
            m = TCP.fullmatch(addr)
            ok = m is not None and 1 <= int(m[1]) <= 65_535
        if not ok:
            raise RemoteProtocolError(f"node entry with the address {addr[:80]!r}, which no peer of this run can have")
        if len(self._valid) >= REMEMBERED:
            self._valid.clear()
        self._valid.add(addr)

    def check_all(self, descriptors: tuple[Descriptor, ...] | list[Descriptor]) -> None:
        for d in descriptors:
            self.check(d.addr)
            self.check_node(d.node_id)
