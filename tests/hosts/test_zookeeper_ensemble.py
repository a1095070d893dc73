"""A ZooKeeper ensemble of three on hosts of their own (``EmbeddedZooKeeper(ensemble=...,
namespace=...)``), its client on a fourth: what a deployment on several hosts relies on. A follower
lost and the leader's host cut off each leave a quorum that takes writes again, and a server that
comes back catches up with what was written without it."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from sparklog.coordination.zookeeper_server import EmbeddedZooKeeper, four_letter_word
from sparklog.hosts.network import HostNetwork, namespaces_available

pytestmark = [
    pytest.mark.skipif(namespaces_available() is not None, reason=str(namespaces_available())),
    pytest.mark.timeout(240),
]
CLIENT_HOST = 4


@pytest.fixture
def ensemble(tmp_path: Path) -> Iterator[tuple[HostNetwork, dict[int, EmbeddedZooKeeper]]]:
    with HostNetwork(4) as net:
        hosts = {i: net.address(i) for i in (1, 2, 3)}
        servers = {
            i: EmbeddedZooKeeper(
                tmp_path / f"zk{i}", port=2181, host=host, ensemble=hosts, server_id=i, namespace=net.namespace(i)
            )
            for i, host in hosts.items()
        }
        try:
            for server in servers.values():
                server.start(wait=False)
            for server in servers.values():
                server.wait_until_serving(60)
            yield net, servers
        finally:
            for server in servers.values():
                server.stop()


def mode(net: HostNetwork, server: EmbeddedZooKeeper, host: int) -> str:
    """``leader``, ``follower`` or why the server does not say (it may be electing)."""
    try:
        with net.inside(host):
            reply = four_letter_word(server.host, server.port, "srvr", timeout=1.0)
    except OSError as exc:
        return type(exc).__name__
    return next((line.split(": ")[1] for line in reply.splitlines() if line.startswith("Mode")), reply[:60])


def leader(net: HostNetwork, servers: dict[int, EmbeddedZooKeeper]) -> int:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        found = [i for i, server in servers.items() if mode(net, server, i) == "leader"]
        if len(found) == 1:
            return found[0]
        time.sleep(0.2)
    raise AssertionError(f"no single leader: {[mode(net, s, i) for i, s in servers.items()]}")


def client(net: HostNetwork, servers: dict[int, EmbeddedZooKeeper]) -> KazooClient:
    with net.inside(CLIENT_HOST):  # its connection thread lives on the client host
        zk = KazooClient(hosts=",".join(s.connect_string for s in servers.values()), timeout=6.0)
        zk.start(timeout=30)
    return zk


def write_again(zk: KazooClient, path: str, value: bytes, timeout: float = 60.0) -> float:
    """Seconds until a write of ``path`` succeeds."""
    start = time.monotonic()
    while True:
        try:
            zk.set(path, value)
            return time.monotonic() - start
        except Exception:
            if time.monotonic() - start > timeout:
                raise
            time.sleep(0.2)


def test_a_lost_follower_and_a_cut_off_leader_leave_a_quorum_that_writes(
    ensemble: tuple[HostNetwork, dict[int, EmbeddedZooKeeper]],
) -> None:
    net, servers = ensemble
    zk = client(net, servers)
    try:
        zk.create("/events", b"0")
        first = leader(net, servers)
        follower = next(i for i in servers if i != first)
        servers[follower].kill()  # kill -9 of a follower: two of three remain
        write_again(zk, "/events", b"1")
        servers[follower].start(wait=True, timeout=60)  # it rejoins and catches up
        net.cut_off(first)  # the leader's host falls off the network
        write_again(zk, "/events", b"2")
        new = leader(net, {i: s for i, s in servers.items() if i != first})
        assert new != first
        net.reconnect(first)
        deadline = time.monotonic() + 60
        while mode(net, servers[first], first) != "follower" and time.monotonic() < deadline:
            time.sleep(0.3)
        assert mode(net, servers[first], first) == "follower"
        for i in servers:  # every server has every write, the cut-off one included
            with net.inside(CLIENT_HOST):
                alone = KazooClient(hosts=servers[i].connect_string, timeout=6.0, read_only=False)
                alone.start(timeout=30)
            try:
                alone.sync("/events")
                assert alone.get("/events")[0] == b"2", i
            finally:
                alone.stop()
                alone.close()
    finally:
        zk.stop()
        zk.close()
