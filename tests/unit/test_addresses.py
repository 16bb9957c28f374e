"""The addresses a real peer accepts in node entries (node/transport/addresses.py)."""

import pytest

from node.kit.types import RemoteProtocolError
from node.transport.addresses import Addresses

GOOD_TCP = ["127.0.0.1:7000", "ovl-1a2b3c4d-peer-3.ovl-1a2b3c4d-peers:7001", "[::1]:65535", "peer-0:1"]
BAD_TCP = ["", "127.0.0.1", "127.0.0.1:0", "127.0.0.1:65536", "host:99999", ":7000", "unix:///var/run/docker.sock",
           "unix:/tmp/overlaylab-x/peer-1.sock", "http://evil:80", "a b:80", "-lead:80", "x" * 300 + ":80"]


@pytest.mark.parametrize("addr", GOOD_TCP)
def test_a_tcp_peer_accepts_host_and_port(addr):
    Addresses().check(addr)


@pytest.mark.parametrize("addr", BAD_TCP)
def test_a_tcp_peer_refuses_anything_else(addr):
    with pytest.raises(RemoteProtocolError, match="address"):
        Addresses().check(addr)


def test_a_peer_on_unix_sockets_accepts_its_run_s_sockets_only():
    rule = Addresses("/tmp/overlaylab-ab12")
    rule.check("unix:/tmp/overlaylab-ab12/peer-7.sock")
    rule.check("unix:/tmp/overlaylab-ab12/host-0.sock")
    for bad in ["unix:///var/run/docker.sock", "unix:/tmp/overlaylab-ab12/../x/peer-1.sock",
                "unix:/tmp/overlaylab-other/peer-1.sock", "unix:/tmp/overlaylab-ab12/control-1.sock",
                "127.0.0.1:7000", ""]:
        with pytest.raises(RemoteProtocolError):
            rule.check(bad)
