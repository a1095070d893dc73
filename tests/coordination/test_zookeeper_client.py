"""How sparklog's kazoo clients (:mod:`sparklog.coordination.zookeeper_client`) reach a ZooKeeper
again: against fake servers on loopback (no ZooKeeper needed), counting connection attempts.

- a server that accepts connections and never answers (a ZooKeeper accepting them before it
  serves, as one does while it starts): the client gives up on each after a third of its session
  timeout and tries again, where kazoo's default waits the whole timeout in the first one;
- a server that closes every connection at once: the client keeps trying every half second or
  so, where kazoo's default doubles its wait after each attempt.

Counts within generous windows, not times: a slow machine makes fewer attempts, never more.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest
from kazoo.client import KazooClient

from sparklog.coordination.zookeeper_client import zookeeper_client

HOST = "127.0.0.1"


class FakeServer:
    """A loopback listener that notes when each connection came; ``silent``: it keeps them open
    without a word, else it closes each at once."""

    def __init__(self, silent: bool) -> None:
        self.silent = silent
        self.accepted: list[float] = []
        self._held: list[socket.socket] = []
        self._listener = socket.create_server((HOST, 0))
        self._listener.settimeout(0.1)
        self.port = self._listener.getsockname()[1]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="fake-zookeeper", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            self.accepted.append(time.monotonic())
            if self.silent:
                self._held.append(conn)
            else:
                conn.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        for conn in self._held:
            conn.close()
        self._listener.close()


@pytest.fixture
def started() -> Iterator[list[KazooClient]]:
    """Clients started (asynchronously) by a test, stopped at its end."""
    clients: list[KazooClient] = []
    yield clients
    for client in clients:
        client.stop()
        client.close()


def attempts(server: FakeServer, client: KazooClient, clients: list[KazooClient], seconds: float) -> list[float]:
    """The connection attempts ``client`` made in its first ``seconds``, as times from its start."""
    clients.append(client)
    began = time.monotonic()
    client.start_async()
    time.sleep(seconds)
    return [t - began for t in server.accepted]


def test_a_session_request_left_unanswered_is_given_up_after_a_third_of_the_session_timeout(
    started: list[KazooClient],
) -> None:
    server = FakeServer(silent=True)
    try:
        made = attempts(server, zookeeper_client(f"{HOST}:{server.port}", timeout=6.0), started, 5.0)
    finally:
        server.close()
    # 2 s each, then a new connection: kazoo's own client sits 6 s in the first one
    assert len(made) >= 2, made


def test_a_lost_zookeeper_is_tried_again_every_half_second_or_so(started: list[KazooClient]) -> None:
    server = FakeServer(silent=False)
    try:
        made = attempts(server, zookeeper_client(f"{HOST}:{server.port}", timeout=6.0), started, 7.0)
    finally:
        server.close()
    # kazoo's own client waits 0.1, 0.2, 0.4 ... 3.2 s (+-40%) between attempts: at most one
    # from 3 s to 6 s; these are at most 0.7 s apart
    assert len([t for t in made if 3.0 <= t <= 6.0]) >= 3, made
