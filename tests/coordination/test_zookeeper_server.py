"""Tests for the embedded standalone ZooKeeper (real JVM, loopback only; a few seconds in total)."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from sparklog.coordination.ports import free_port, port_is_open
from sparklog.coordination.zookeeper_server import (
    CLASSPATH_ENV,
    EmbeddedZooKeeper,
    ZooKeeperNotAvailable,
    ZooKeeperStartError,
    four_letter_word,
)

HOST = "127.0.0.1"


def _group_alive(pgid: int) -> bool:
    """True if any process is left in the process group (the JVM leads its own group)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.fixture
def servers() -> Iterator[list[EmbeddedZooKeeper]]:
    """Collects the servers a test creates and makes sure every one of them is stopped."""
    created: list[EmbeddedZooKeeper] = []
    yield created
    for server in created:
        server.kill()


def _new_server(servers: list[EmbeddedZooKeeper], data_dir: Path, port: int) -> EmbeddedZooKeeper:
    server = EmbeddedZooKeeper(data_dir, port=port)
    servers.append(server)
    return server


def _client(server: EmbeddedZooKeeper) -> KazooClient:
    client = KazooClient(hosts=server.connect_string, timeout=10.0)
    client.start(timeout=15.0)
    return client


def test_start_create_read_stop(tmp_path: Path, servers: list[EmbeddedZooKeeper]) -> None:
    server = _new_server(servers, tmp_path / "zk", free_port())
    began = time.monotonic()
    server.start(timeout=60.0)
    start_call = time.monotonic() - began
    assert server.is_running()
    assert server.connect_string == f"{HOST}:{server.port}"
    # startup_seconds is the start() call it reports on (a figure, not a speed to assert)
    assert server.startup_seconds is not None and 0 < server.startup_seconds <= start_call
    assert "Mode: standalone" in four_letter_word(HOST, server.port, "srvr", timeout=5.0)
    assert four_letter_word(HOST, server.port, "ruok", timeout=5.0) == "imok"
    pid = server.pid
    assert pid is not None

    client = _client(server)
    try:
        client.create("/sparklog/hello", b"world", makepath=True)
        data, stat = client.get("/sparklog/hello")
        assert data == b"world"
        assert stat.version == 0
    finally:
        client.stop()
        client.close()

    server.stop()
    assert not server.is_running()
    assert not port_is_open(HOST, server.port)
    assert not _group_alive(pid)
    log = server.log_path.read_text()
    assert "binding to port" in log  # the server log really goes to <data_dir>/zookeeper.log


def test_restart_keeps_znodes(tmp_path: Path, servers: list[EmbeddedZooKeeper]) -> None:
    data_dir, port = tmp_path / "zk", free_port()

    first = _new_server(servers, data_dir, port)
    first.start(timeout=60.0)
    client = _client(first)
    try:
        client.create("/persisted", b"v1")
    finally:
        client.stop()
        client.close()
    first.stop()
    assert not port_is_open(HOST, port)

    second = _new_server(servers, data_dir, port)
    second.start(timeout=60.0)
    client = _client(second)
    try:
        assert client.get("/persisted")[0] == b"v1"
        client.set("/persisted", b"v2")
    finally:
        client.stop()
        client.close()
    second.kill()  # crash: acknowledged writes must survive SIGKILL too
    assert not _group_alive(second.pid or 0)

    third = _new_server(servers, data_dir, port)
    third.start(timeout=60.0)
    client = _client(third)
    try:
        assert client.get("/persisted")[0] == b"v2"
    finally:
        client.stop()
        client.close()
    third.stop()


def test_context_manager_stops_server(tmp_path: Path) -> None:
    with EmbeddedZooKeeper(tmp_path / "zk", port=free_port()) as server:
        pid = server.pid
        assert server.is_running()
    assert pid is not None and not _group_alive(pid)
    assert not port_is_open(HOST, server.port)


def test_not_installed_is_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    empty = tmp_path / "no-jars"
    empty.mkdir()
    monkeypatch.setenv(CLASSPATH_ENV, str(empty))
    server = EmbeddedZooKeeper(tmp_path / "zk", port=free_port())
    with pytest.raises(ZooKeeperNotAvailable, match="install_zookeeper.sh"):
        server.start()
    assert server.pid is None


def test_process_dying_at_startup_is_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CLASSPATH_ENV, str(tmp_path / "missing.jar"))  # JVM exits: main class not found
    server = EmbeddedZooKeeper(tmp_path / "zk", port=free_port())
    with pytest.raises(ZooKeeperStartError, match="QuorumPeerMain"):
        server.start(timeout=30.0)
    assert not server.is_running()


def test_zk_client_fixture_is_chrooted(zk_client: KazooClient) -> None:
    zk_client.create("/only-mine", b"x")
    assert zk_client.get_children("/") == ["only-mine"]
