"""The replica manager and the topic watcher on their own: a real ZooKeeper and real logs, its broker a fake
(:class:`ReplicaHost`: whether the session is live, which brokers are registered), its topics the
real catalog, and no Flight: the fetchers' leader endpoints are never asked for (fetching is off)."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from sparklog.broker.log_manager import LogManager
from sparklog.broker.replica_manager import ReplicaManager
from sparklog.broker.topic_catalog import TopicCatalog
from sparklog.broker.topic_watcher import TopicWatcher
from sparklog.coordination.cluster import BrokerInfo, ClusterMetadata, PartitionState, TopicMetadata
from sparklog.errors import NotLeader
from sparklog.schemas.registry import SchemaRegistry
from waiting import wait_for

HERE, OTHER, UNREGISTERED = 1, 2, 3


class FakeHost:
    """The broker as the replicas see it."""

    def __init__(self) -> None:
        self.zk_connected = True
        self.live_brokers = {b: BrokerInfo(b, "127.0.0.1", 9000 + b) for b in (HERE, OTHER)}


def no_endpoint(leader: int) -> object:
    raise AssertionError(f"fetching is off: nothing may ask for broker {leader}'s endpoint")


@pytest.fixture
def cluster(sparklog_connect: str) -> Iterator[ClusterMetadata]:
    with ClusterMetadata(sparklog_connect) as cluster:
        for b in (HERE, OTHER):
            cluster.register_broker(b, "127.0.0.1", 9000 + b)
        yield cluster


@dataclasses.dataclass
class Replicas:
    manager: ReplicaManager
    host: FakeHost
    catalog: TopicCatalog
    cluster: ClusterMetadata

    def assign(self, topic: str) -> None:
        """What the topic watcher does when a topic's metadata arrives."""
        meta = self.cluster.topic(topic)
        self.catalog.put(topic, meta)
        assert self.manager.assign(topic, meta)


@pytest.fixture
def replicas(cluster: ClusterMetadata, tmp_path: Path) -> Iterator[Replicas]:
    logs = LogManager(tmp_path / "data")
    catalog = TopicCatalog(cluster, SchemaRegistry.from_cluster(cluster), logs)
    host = FakeHost()
    manager = ReplicaManager(HERE, cluster, catalog, logs, host, no_endpoint, 10_000, threading.Event())
    yield Replicas(manager, host, catalog, cluster)
    manager.replication.stop()
    logs.close()


def test_roles_follow_the_partition_states(cluster: ClusterMetadata, replicas: Replicas) -> None:
    manager = replicas.manager
    cluster.create_topic("roles", 2, replication_factor=2)
    cluster.set_partition_state("roles", 0, PartitionState(HERE, 1, [HERE, OTHER]))
    cluster.set_partition_state("roles", 1, PartitionState(OTHER, 1, [OTHER, HERE]))
    replicas.assign("roles")

    assert manager.partitions[("roles", 0)].is_leader
    assert not manager.partitions[("roles", 1)].is_leader
    assert manager.replication.followed() == {("roles", 1): OTHER}
    assert manager.leader_partition("roles", 0).partition == 0
    with pytest.raises(NotLeader, match="does not lead roles-1"):
        manager.leader_partition("roles", 1)


def test_writes_are_fenced_while_the_session_is_away(cluster: ClusterMetadata, replicas: Replicas) -> None:
    manager, host = replicas.manager, replicas.host
    cluster.create_topic("fenced", 1, replication_factor=1)
    cluster.set_partition_state("fenced", 0, PartitionState(HERE, 1, [HERE]))
    replicas.assign("fenced")
    manager.leader_partition("fenced", 0, for_write=True)

    host.zk_connected = False
    with pytest.raises(NotLeader, match="lost its ZooKeeper session"):
        manager.leader_partition("fenced", 0, for_write=True)
    assert manager.leader_partition("fenced", 0).is_leader  # reads go on
    partition = manager.partitions[("fenced", 0)]
    assert not manager._update_isr(partition, [HERE])  # nor may it write an ISR
    assert cluster.partition_state("fenced", 0) == PartitionState(HERE, 1, [HERE])


def test_only_a_registered_broker_joins_an_isr(cluster: ClusterMetadata, replicas: Replicas) -> None:
    manager = replicas.manager
    cluster.create_topic("joins", 1, replication_factor=2)
    cluster.set_partition_state("joins", 0, PartitionState(HERE, 1, [HERE]))
    replicas.assign("joins")
    partition = manager.partitions[("joins", 0)]

    assert not manager._update_isr(partition, [HERE, UNREGISTERED])
    assert cluster.partition_state("joins", 0).isr == [HERE]
    assert manager._update_isr(partition, [HERE, OTHER])
    assert cluster.partition_state("joins", 0).isr == [HERE, OTHER]
    assert partition.state is not None and partition.state.isr == [HERE, OTHER]


def test_a_stale_isr_write_learns_the_new_state(cluster: ClusterMetadata, replicas: Replicas) -> None:
    """The compare-and-set fails when the controller moved the partition meanwhile: the manager
    reads the state again and takes the follower role it now has."""
    manager = replicas.manager
    cluster.create_topic("stale", 1, replication_factor=2)
    cluster.set_partition_state("stale", 0, PartitionState(HERE, 1, [HERE, OTHER]))
    replicas.assign("stale")
    partition = manager.partitions[("stale", 0)]
    manager.replication.unfollow(("stale", 0))

    # the controller elects OTHER; this broker's watch has not fired yet
    cluster.zk.set(cluster.layout.partition_state("stale", 0), PartitionState(OTHER, 2, [OTHER]).to_json())
    assert not manager._update_isr(partition, [HERE])
    assert partition.state == PartitionState(OTHER, 2, [OTHER])
    assert manager.replication.followed() == {("stale", 0): OTHER}


def test_handing_over_and_dropping(cluster: ClusterMetadata, replicas: Replicas, tmp_path: Path) -> None:
    manager = replicas.manager
    cluster.create_topic("handed", 1, replication_factor=2)
    cluster.set_partition_state("handed", 0, PartitionState(HERE, 3, [HERE, OTHER]))
    replicas.assign("handed")
    manager.partitions[("handed", 0)].log.append(pa.table({"value": [b"kept"]}))

    manager.hand_over_leadership()
    assert cluster.partition_state("handed", 0) == PartitionState(OTHER, 4, [OTHER])

    manager.drop_topic("handed")
    assert manager.partitions == {}
    assert not manager.holds_topic("handed")
    assert not (tmp_path / "data" / "handed-0").exists()

    # The hand-over's state change notifies this broker too; arriving after the drop (the
    # catalog still names the topic) it must not bring the replica or its directory back.
    manager.read_state("handed", 0)
    assert manager.partitions == {}
    assert not (tmp_path / "data" / "handed-0").exists()


class RecordedAssignments:
    """The replicas as the topic watcher sees them: what it was told."""

    def __init__(self) -> None:
        self.assigned: list[tuple[str, int]] = []  # (topic, partitions)
        self.dropped: list[str] = []

    def assign(self, topic: str, meta: TopicMetadata) -> bool:
        self.assigned.append((topic, meta.partitions))
        return True

    def holds_topic(self, topic: str) -> bool:
        return any(name == topic for name, _ in self.assigned)

    def drop_topic(self, topic: str) -> None:
        self.dropped.append(topic)


def test_the_topic_watcher_assigns_created_topics_and_drops_deleted_ones(
    cluster: ClusterMetadata, tmp_path: Path
) -> None:
    logs = LogManager(tmp_path / "data")
    catalog = TopicCatalog(cluster, SchemaRegistry.from_cluster(cluster), logs)
    recorded, stopped = RecordedAssignments(), threading.Event()
    TopicWatcher(cluster, catalog, recorded, stopped).start()
    try:
        cluster.create_topic("watched", 3, replication_factor=1)
        wait_for(lambda: ("watched", 3) in recorded.assigned, 20, "the created topic's assignment")
        assert catalog.get("watched") is not None and catalog.get("watched").partitions == 3

        cluster.delete_topic("watched")
        wait_for(lambda: "watched" in recorded.dropped, 20, "the deleted topic's drop")
        assert catalog.get("watched") is None
    finally:
        stopped.set()
        logs.close()
