"""Fetches of different partitions go over their own TCP connections to a broker (gRPC receives a
connection's messages on one thread at a time; consuming 6 partitions measured 15-44% faster so):
``FETCH_CONNECTIONS`` in all, at least one per broker, the first shared with the client's requests
and, with bootstrap servers, its metadata (each connection costs the client two threads)."""

from __future__ import annotations

import os
import threading
from typing import Any

from sparklog import Admin, Consumer, Producer
from sparklog.client.cluster_client import FETCH_CONNECTIONS, fetch_connection


def connections_to(port: int) -> set[str]:
    """The socket inodes of this process's established TCP connections to ``port`` on loopback
    (compared as sets: a connection a closed client still holds may go away while a test counts)."""
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    established = set()
    for table in ("/proc/self/net/tcp", "/proc/self/net/tcp6"):
        with open(table) as f:
            for line in f.readlines()[1:]:
                fields = line.split()
                remote_port, state, inode = int(fields[2].rsplit(":", 1)[1], 16), fields[3], fields[9]
                if remote_port == port and state == "01" and inode in inodes:  # 01: ESTABLISHED
                    established.add(inode)
    return established


def test_partitions_spread_over_the_fetch_connections() -> None:
    assert {fetch_connection(p) for p in range(2 * FETCH_CONNECTIONS)} == set(range(FETCH_CONNECTIONS))
    # partitions led by two brokers in turn: each broker's spread over half the connections
    for first in (0, 1):
        led = range(first, 4 * FETCH_CONNECTIONS, 2)
        assert {fetch_connection(p, leaders=2) for p in led} == set(range(FETCH_CONNECTIONS // 2))
    # as many brokers as connections, or more: one connection each
    assert {fetch_connection(p, leaders=FETCH_CONNECTIONS + 2) for p in range(50)} == {0}


def fetch_threads() -> int:
    return sum(1 for t in threading.enumerate() if t.name.startswith("sparklog-fetch-"))


def topic_with_records(topic: str, partitions: int, **connect: Any) -> None:
    """``topic`` with 100 records ``b"<partition>-<i>"`` in each partition (one replica)."""
    with Admin(**connect) as admin:
        admin.create_topic(topic, partitions, 1)
    with Producer(**connect) as producer:
        for p in range(partitions):
            producer.send_batch(topic, {"value": [b"%d-%d" % (p, i) for i in range(100)]}, partition=p)


def read_values(consumer: Consumer, count: int) -> list[bytes]:
    values: list[bytes] = []
    while len(values) < count:
        for batch in consumer.poll_batches(timeout=5.0):
            values += batch.column("value").to_pylist()
    return values


def test_a_consumer_fetches_each_partition_over_its_own_connection(start_broker: Any, sparklog_connect: str) -> None:
    broker = start_broker(1)
    topic_with_records("spread", 4, zookeeper=sparklog_connect)
    before = connections_to(broker.port)
    with Consumer("spread", zookeeper=sparklog_connect, auto_offset_reset="earliest") as consumer:
        assert len(read_values(consumer, 400)) == 400
        assert len(connections_to(broker.port) - before) >= 4


def test_a_bootstrap_consumer_shares_its_first_fetch_connection_with_its_requests(start_broker: Any) -> None:
    broker = start_broker(1)
    servers = f"127.0.0.1:{broker.port}"
    topic_with_records("shared", 8, bootstrap_servers=servers)
    before = connections_to(broker.port)
    with Consumer("shared", bootstrap_servers=servers, auto_offset_reset="earliest") as consumer:
        assert len(read_values(consumer, 800)) == 800
        # metadata, offsets and the fetches: FETCH_CONNECTIONS connections, not one more
        assert len(connections_to(broker.port) - before) == FETCH_CONNECTIONS
        assert fetch_threads() == FETCH_CONNECTIONS


def test_a_consumer_of_many_brokers_opens_one_connection_to_each(cluster: Any, sparklog_connect: str) -> None:
    topic_with_records("wide", 6, zookeeper=sparklog_connect)  # two partitions led by each of the 3 brokers
    ports = [b.port for b in cluster.brokers.values()]
    before = {port: connections_to(port) for port in ports}
    with Consumer("wide", zookeeper=sparklog_connect, auto_offset_reset="earliest") as consumer:
        values = read_values(consumer, 600)
        assert sorted(values) == sorted(b"%d-%d" % (p, i) for p in range(6) for i in range(100))
        assert {port: len(connections_to(port) - before[port]) for port in ports} == {port: 1 for port in ports}
        assert fetch_threads() == 3
