"""gRPC channels to peers by address, each host name looked up once.

A peer that opens and closes channels as its links change (StaN) would otherwise send the
cluster's DNS a lookup per channel. A call that fails as unavailable forgets the address (a pod
that restarted has a new one); the next use opens a new channel and looks the host up again.
So does a call that timed out on a channel that never connected when the host's name no longer
leads to the address looked up: on Kubernetes a deleted pod's old address answers nothing, not
even a reset, so connects to it hang until the connect timeout (``transport.connect_timeout_ms``)
and every call on the channel fails. A timeout on an address that still holds (a TLS handshake
on a busy host) keeps the channel: dropping it would cancel the calls under way and start the
handshake again.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable, Coroutine

import grpc

from node.transport.security import Credentials, aio_channel


def channel_options(connect_timeout_ms: float) -> list[tuple[str, int]]:
    """gRPC options of every channel to a peer."""
    return [
        # A peer that crashed and restarted on its port should be reachable again within a
        # cycle, not after gRPC's default reconnect backoff (up to two minutes).
        ("grpc.initial_reconnect_backoff_ms", 100),
        ("grpc.max_reconnect_backoff_ms", 1000),
        # gRPC's name for the minimum connect timeout (20 s by default). A connect whose SYNs are
        # dropped (a partition) only completes at the kernel's next SYN retransmission, seconds
        # after the path heals; a new attempt sends a new one. Not 100 ms: a TLS handshake
        # on a busy host takes longer (every such connection failed "before receiving SETTINGS").
        ("grpc.min_reconnect_backoff_ms", int(connect_timeout_ms)),
    ]


class Channels:
    def __init__(self, credentials: Credentials | None, spawn: Callable[[Coroutine], None],
                 connect_timeout_ms: float) -> None:
        self.credentials = credentials
        self.spawn = spawn
        """Runs a coroutine in the background (closing a channel)."""
        self.options = channel_options(connect_timeout_ms)
        self.open: dict[str, grpc.aio.Channel] = {}
        self._hosts: dict[str, str] = {}  # host name -> address, resolved once

    def __contains__(self, addr: str) -> bool:
        return addr in self.open

    def get(self, addr: str) -> grpc.aio.Channel:
        channel = self.open.get(addr)
        if channel is None:
            host, _, port = addr.rpartition(":")
            target = f"{self._hosts[host]}:{port}" if host in self._hosts else addr
            channel = self.open[addr] = aio_channel(target, self.credentials, self.options)
        return channel

    async def resolve(self, addr: str) -> None:
        """Look ``addr``'s host up, once for every channel to it (call before ``get``)."""
        host = addr.rpartition(":")[0]
        if host in self._hosts or not host or host[0].isdigit() or host.startswith("[") or addr.startswith("unix:"):
            return
        try:
            infos = await asyncio.get_running_loop().getaddrinfo(host, None, type=socket.SOCK_STREAM)
        except OSError:
            return  # the channel resolves it itself
        ip = infos[0][4][0]
        self._hosts[host] = f"[{ip}]" if ":" in ip else ip

    async def stale(self, addr: str, channel: grpc.aio.Channel, code: grpc.StatusCode) -> bool:
        """Whether a call on ``channel`` that failed with ``code`` means ``addr`` must be looked
        up again (see the module's docstring); only while ``channel`` is still the open one, not
        a newer channel that a later send opened."""
        if self.open.get(addr) is not channel:
            return False
        if code == grpc.StatusCode.UNAVAILABLE:
            return True
        if code != grpc.StatusCode.DEADLINE_EXCEEDED or self.connected(addr):
            return False
        return await self.moved(addr) and self.open.get(addr) is channel

    def connected(self, addr: str) -> bool:
        channel = self.open.get(addr)
        return channel is not None and channel.get_state() == grpc.ChannelConnectivity.READY

    async def moved(self, addr: str) -> bool:
        """Whether ``addr``'s host name no longer resolves to the address it was looked up as
        (False where it was not looked up here)."""
        host = addr.rpartition(":")[0]
        looked_up = self._hosts.get(host)
        if looked_up is None:
            return False
        try:
            infos = await asyncio.get_running_loop().getaddrinfo(host, None, type=socket.SOCK_STREAM)
        except OSError:
            return True  # the name is gone (the pod is down)
        return looked_up.strip("[]") not in {info[4][0] for info in infos}

    def forget(self, addr: str) -> None:
        """Close the channel to ``addr``; the next use opens a new one, looking the host up again."""
        self._hosts.pop(addr.rpartition(":")[0], None)
        channel = self.open.pop(addr, None)
        if channel is not None:
            self.spawn(channel.close())

    async def close(self) -> None:
        for channel in self.open.values():
            await channel.close()
        self.open.clear()
