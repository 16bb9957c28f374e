"""The addresses and node ids a real peer accepts from other peers (node/transport/entries.py)."""

import pytest

from node.kit.types import Descriptor, RemoteProtocolError
from node.transport.entries import Entries

GOOD_TCP = ["127.0.0.1:7000", "ovl-1a2b3c4d-peer-3.ovl-1a2b3c4d-peers:7001", "[::1]:65535", "peer-0:1"]
BAD_TCP = ["", "127.0.0.1", "127.0.0.1:0", "127.0.0.1:65536", "host:99999", ":7000", "unix:///var/run/docker.sock",
           "unix:/tmp/overlaylab-x/peer-1.sock", "http://evil:80", "a b:80", "-lead:80", "x" * 300 + ":80"]


@pytest.mark.parametrize("addr", GOOD_TCP)
def test_a_tcp_peer_accepts_host_and_port(addr):
    Entries().check(addr)


@pytest.mark.parametrize("addr", BAD_TCP)
def test_a_tcp_peer_refuses_anything_else(addr):
    with pytest.raises(RemoteProtocolError, match="address"):
        Entries().check(addr)


def test_a_peer_on_unix_sockets_accepts_its_run_s_sockets_only():
    rule = Entries("/tmp/overlaylab-ab12")
    rule.check("unix:/tmp/overlaylab-ab12/peer-7.sock")
    rule.check("unix:/tmp/overlaylab-ab12/host-0.sock")
    for bad in ["unix:///var/run/docker.sock", "unix:/tmp/overlaylab-ab12/../x/peer-1.sock",
                "unix:/tmp/overlaylab-other/peer-1.sock", "unix:/tmp/overlaylab-ab12/control-1.sock",
                "127.0.0.1:7000", ""]:
        with pytest.raises(RemoteProtocolError):
            rule.check(bad)


def test_node_ids_outside_the_run_are_refused():
    rule = Entries(nodes=8)
    rule.check_node(0)
    rule.check_all([Descriptor(7, "127.0.0.1:7000")])
    for bad in (8, 2**63):
        with pytest.raises(RemoteProtocolError, match="does not have"):
            rule.check_node(bad)
    with pytest.raises(RemoteProtocolError):
        rule.check_all([Descriptor(9, "127.0.0.1:7000")])
    Entries().check_node(10**9)  # no run size given: not checked
