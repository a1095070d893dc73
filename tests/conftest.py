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
