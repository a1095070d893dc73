"""Shared pytest fixtures for sparklog."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from kazoo.client import KazooClient

    from sparklog.coordination.zookeeper_server import EmbeddedZooKeeper


@pytest.fixture(scope="session")
def zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedZooKeeper]:
    """A standalone ZooKeeper on a free loopback port, shared by the whole test session."""
    from sparklog.coordination.ports import free_port
    from sparklog.coordination.zookeeper_server import EmbeddedZooKeeper

    server = EmbeddedZooKeeper(tmp_path_factory.mktemp("zookeeper"), port=free_port())
    server.start(timeout=60.0)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def zk_client(zookeeper: EmbeddedZooKeeper, request: pytest.FixtureRequest) -> Iterator[KazooClient]:
    """A connected KazooClient chrooted to a fresh, unique znode (isolation between tests)."""
    from kazoo.client import KazooClient

    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", request.node.name)[:80]
    chroot = f"/tests/{name}-{uuid.uuid4().hex[:8]}"

    bootstrap = KazooClient(hosts=zookeeper.connect_string, timeout=10.0)
    bootstrap.start(timeout=15.0)
    try:
        bootstrap.ensure_path(chroot)
    finally:
        bootstrap.stop()
        bootstrap.close()

    client = KazooClient(hosts=zookeeper.connect_string + chroot, timeout=10.0)
    client.start(timeout=15.0)
    try:
        yield client
    finally:
        client.stop()
        client.close()


# ---------------------------------------------------------------------------------------------------
# Broker integration fixtures (tests/test_broker_*.py; helpers in tests/broker_helpers.py).


@pytest.fixture
def sparklog_connect(zookeeper: EmbeddedZooKeeper) -> str:
    """A ZooKeeper connect string with a fresh chroot: sparklog's root znode, unique to the test."""
    return f"{zookeeper.connect_string}/t-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def child_processes() -> Iterator[object]:
    """A ``broker_helpers.ProcessGroup``: every subprocess started through it ends with the test."""
    from broker_helpers import ProcessGroup

    group = ProcessGroup()
    try:
        yield group
    finally:
        group.close()


@pytest.fixture
def start_broker(sparklog_connect: str, child_processes: object, tmp_path_factory: pytest.TempPathFactory):
    """``start_broker(broker_id=1)`` -> a running ``broker_helpers.BrokerProcess`` (registered in
    ZooKeeper under ``sparklog_connect``); stopped with SIGTERM at the end of the test."""
    from broker_helpers import BrokerProcess

    base = tmp_path_factory.mktemp("brokers")
    started: list[BrokerProcess] = []

    def start(broker_id: int = 1) -> BrokerProcess:
        broker = BrokerProcess(broker_id, base / f"broker-{broker_id}", sparklog_connect, child_processes)
        started.append(broker)
        return broker.start()

    try:
        yield start
    finally:
        for broker in started:
            broker.stop_or_kill()
