"""The broker's cache of partition states for clients' metadata, over a real ZooKeeper: a state is
read from ZooKeeper once, then served from memory until its znode changes (the data watch's event
drops it) or the connection is lost; a change during a read is not cached over."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

import pytest
from kazoo.protocol.states import KazooState, WatchedEvent

from sparklog.broker.partition_state_cache import PartitionStateCache, States
from sparklog.coordination.cluster import ClusterMetadata, PartitionState
from waiting import wait_for

TOPIC, PARTITIONS = "t", 50


@pytest.fixture
def cluster(sparklog_connect: str) -> Iterator[ClusterMetadata]:
    with ClusterMetadata(sparklog_connect) as cluster:
        for p in range(PARTITIONS):
            cluster.zk.create(
                cluster.layout.partition_state(TOPIC, p), PartitionState(1, 0, [1, 2]).to_json(), makepath=True
            )
        yield cluster


class CountingReader:
    """ClusterMetadata.partition_states, counting the znodes it reads."""

    def __init__(self, cluster: ClusterMetadata) -> None:
        self.cluster = cluster
        self.read: list[int] = []

    def __call__(self, topic: str, partitions: Iterable[int], watch: Callable[[WatchedEvent], None]) -> States:
        wanted = list(partitions)
        self.read += wanted
        return self.cluster.partition_states(topic, wanted, watch)


def test_states_are_read_once_and_again_after_their_znode_changes(cluster: ClusterMetadata) -> None:
    reader = CountingReader(cluster)
    cache = PartitionStateCache(reader, cluster.layout.partition_state)
    first = cache.states(TOPIC, range(PARTITIONS))
    expected = {p: PartitionState(1, 0, [1, 2]) for p in range(PARTITIONS)}
    assert {p: state for p, (state, _v) in first.items()} == expected
    assert sorted(reader.read) == list(range(PARTITIONS))
    for _ in range(5):  # metadata refreshes: served from memory
        assert cache.states(TOPIC, range(PARTITIONS)) == first
    assert len(reader.read) == PARTITIONS

    cluster.set_partition_state(TOPIC, 7, PartitionState(2, 1, [2]))  # a failover
    wait_for(lambda: cache.states(TOPIC, [7])[7][0] == PartitionState(2, 1, [2]), 10, "the new state of partition 7")
    assert reader.read[PARTITIONS:].count(7) >= 1 and set(reader.read[PARTITIONS:]) == {7}
    assert cache.states(TOPIC, range(PARTITIONS))[3] == first[3]

    cluster.zk.delete(cluster.layout.partition_state(TOPIC, 9))  # the topic being deleted
    wait_for(lambda: 9 not in cache.states(TOPIC, range(PARTITIONS)), 10, "partition 9 to be gone")


def test_a_lost_connection_drops_every_state(cluster: ClusterMetadata) -> None:
    reader = CountingReader(cluster)
    cache = PartitionStateCache(reader, cluster.layout.partition_state)
    cache.states(TOPIC, range(PARTITIONS))
    cache.on_connection_state(KazooState.CONNECTED)
    cache.states(TOPIC, range(PARTITIONS))
    assert len(reader.read) == PARTITIONS
    cache.on_connection_state(KazooState.SUSPENDED)  # changes may go unseen while disconnected
    cache.states(TOPIC, range(PARTITIONS))
    assert len(reader.read) == 2 * PARTITIONS


def test_a_state_that_changes_while_it_is_read_is_not_kept(cluster: ClusterMetadata) -> None:
    """The watch's event can come before the read's caller stores what it read: what it read is
    answered, not cached."""
    calls: list[Any] = []

    def reader(topic: str, partitions: Iterable[int], watch: Callable[[WatchedEvent], None]) -> States:
        found = cluster.partition_states(topic, partitions, watch)
        calls.append(list(partitions))
        if len(calls) == 1:  # partition 4 changes at once; its event arrives before the read returns
            cluster.set_partition_state(TOPIC, 4, PartitionState(2, 1, [2]))
            wait_for(lambda: cache._watched.get(cluster.layout.partition_state(TOPIC, 4)) is None, 10, "the event")
        return found

    cache = PartitionStateCache(reader, cluster.layout.partition_state)
    assert cache.states(TOPIC, range(PARTITIONS))[4][0] == PartitionState(1, 0, [1, 2])  # as read
    assert cache.states(TOPIC, range(PARTITIONS))[4][0] == PartitionState(2, 1, [2])  # read again
    assert calls[1] == [4]
