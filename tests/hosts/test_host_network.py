"""The several-hosts harness itself (``sparklog.hosts.network``): hosts reach each other over their
switch and nothing else, and each fault does what it says: a host cut off is silent (connections
time out, they are not refused), a partition separates exactly its two sides, a host losing packets
loses about the share asked for, and everything the network made is gone after it closes."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator

import pytest

from sparklog.hosts.network import HostNetwork, namespaces_available

pytestmark = pytest.mark.skipif(namespaces_available() is not None, reason=str(namespaces_available()))

PORT = 7000
# a server on the host's address answering each connection with "hi", and a client reporting one connection
SERVER = (
    "import socket,sys\n"
    "s=socket.create_server((sys.argv[1],7000))\n"
    "while True:\n"
    "    c,_=s.accept(); c.sendall(b'hi'); c.close()\n"
)
CLIENT = (
    "import socket,sys\n"
    "try:\n"
    "    c=socket.create_connection((sys.argv[1],7000),timeout=float(sys.argv[2])); print(c.recv(2).decode())\n"
    "except TimeoutError: print('timeout')\n"
    "except ConnectionRefusedError: print('refused')\n"
)


@pytest.fixture
def net() -> Iterator[HostNetwork]:
    with HostNetwork(3) as network:
        servers = [network.popen(h, ["python3", "-c", SERVER, network.address(h)]) for h in (1, 2, 3)]
        try:
            deadline = time.monotonic() + 10
            while any(reach(network, 1, h) != "hi" for h in (2, 3)) and time.monotonic() < deadline:
                time.sleep(0.1)
            yield network
        finally:
            for server in servers:
                server.kill()
                server.wait(5)


def reach(net: HostNetwork, source: int, target: int, timeout: float = 1.0) -> str:
    done = net.run(source, ["python3", "-c", CLIENT, net.address(target), str(timeout)], timeout=30)
    return done.stdout.strip() or done.stderr.strip()[-200:]


def namespaces() -> str:
    return subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout


def test_hosts_reach_each_other_and_a_host_cut_off_is_silent(net: HostNetwork) -> None:
    assert [reach(net, 1, 2), reach(net, 2, 3), reach(net, 3, 1)] == ["hi", "hi", "hi"]
    assert reach(net, 1, 1) == "hi"  # its own address
    net.cut_off(2)
    assert reach(net, 1, 2) == "timeout" and reach(net, 2, 3) == "timeout"
    assert reach(net, 1, 3) == "hi"  # the others still talk
    net.reconnect(2)
    assert reach(net, 1, 2) == "hi"


def test_a_host_reaches_nothing_outside_its_network(net: HostNetwork) -> None:
    probe = (
        "import socket\n"
        "try: socket.create_connection(('8.8.8.8',53),timeout=1); print('out')\n"
        "except OSError as e: print(type(e).__name__)"
    )
    assert net.run(1, ["python3", "-c", probe]).stdout.strip() in ("OSError", "TimeoutError")


def test_a_partition_separates_its_two_sides_only(net: HostNetwork) -> None:
    net.partition([1], [2, 3])
    assert reach(net, 1, 2) == "timeout" and reach(net, 3, 1) == "timeout"
    assert reach(net, 2, 3) == "hi"
    net.heal()
    assert reach(net, 1, 2) == "hi" and reach(net, 3, 1) == "hi"


def test_lost_packets_are_about_the_share_asked_for(net: HostNetwork) -> None:
    """UDP datagrams from host 1 to host 2, which drops 30% of what it receives."""
    receiver = (
        "import socket,sys\ns=socket.socket(socket.AF_INET,socket.SOCK_DGRAM); s.bind((sys.argv[1],7001))\n"
        "s.settimeout(2); n=0\n"
        "try:\n    while True: s.recv(10); n+=1\nexcept TimeoutError: print(n)\n"
    )
    sender = (
        "import socket,sys,time\ns=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\n"
        "for _ in range(1000): s.sendto(b'x',(sys.argv[1],7001)); time.sleep(0.0005)\n"
    )
    net.lose_packets(2, 30)
    got = net.popen(2, ["python3", "-c", receiver, net.address(2)], stdout=subprocess.PIPE, text=True)
    time.sleep(0.5)
    net.run(1, ["python3", "-c", sender, net.address(2)])
    received = int(got.communicate(timeout=30)[0])
    assert 550 <= received <= 850, received  # 700 expected; binomial spread is about 15
    net.heal()


def test_closing_removes_every_namespace() -> None:
    network = HostNetwork(2).start()
    names = [network.switch, network.namespace(1), network.namespace(2)]
    assert all(name in namespaces() for name in names)
    network.close()
    assert not any(name in namespaces() for name in names)
