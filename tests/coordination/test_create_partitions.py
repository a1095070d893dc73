"""``ClusterMetadata.create_partitions`` (Kafka's CreatePartitions) and config deletion against a
real ZooKeeper, without brokers: where the new partitions' replicas go, what is written first, and
what it refuses; and what a broker's call table asks of a client that adds partitions through it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sparklog.coordination.cluster import ClusterMetadata, PartitionState
from sparklog.coordination.ports import free_port
from sparklog.errors import InvalidConfig, InvalidPartitions, InvalidRequest, InvalidTopic, UnknownTopic


@pytest.fixture
def meta(sparklog_connect: str) -> Iterator[ClusterMetadata]:
    with ClusterMetadata(sparklog_connect) as cluster:
        for broker_id in (1, 2, 3):
            cluster.register_broker(broker_id, "127.0.0.1", free_port())
        yield cluster


def test_new_partitions_continue_the_ring_with_the_topic_s_replication_factor(meta: ClusterMetadata) -> None:
    created = meta.create_topic("grow", 2, 2, {"retention.ms": "60000"})
    grown = meta.create_partitions("grow", 5)
    assert grown.replicas[:2] == created.replicas  # the old partitions keep their replicas
    start = [1, 2, 3].index(created.replicas[0][0])
    assert grown.replicas == [[[1, 2, 3][(start + p + r) % 3] for r in range(2)] for p in range(5)]
    assert meta.topic("grow") == grown and grown.configs == created.configs
    states = meta.partition_states("grow", range(5))
    for p in range(2, 5):  # a new partition's first state, as a creation writes it
        assert states[p][0] == PartitionState(grown.replicas[p][0], 0, grown.replicas[p])


def test_states_an_interrupted_addition_left_are_overwritten(meta: ClusterMetadata) -> None:
    meta.create_topic("half", 1, 1)
    path = meta.layout.partition_state("half", 1)
    meta.zk.create(path, PartitionState(9, 7, [9]).to_json(), makepath=True)  # left by a client that died
    grown = meta.create_partitions("half", 3)
    assert meta.partition_state("half", 1) == PartitionState(grown.replicas[1][0], 0, grown.replicas[1])
    assert meta.topic("half").partitions == 3


def test_what_create_partitions_refuses(meta: ClusterMetadata) -> None:
    meta.create_topic("fixed", 3, 3)
    with pytest.raises(InvalidPartitions, match="can only be increased, and 2 would remove 1"):
        meta.create_partitions("fixed", 2)
    with pytest.raises(InvalidPartitions, match="already has 3 partitions"):
        meta.create_partitions("fixed", 3)
    with pytest.raises(InvalidPartitions, match="num.partitions.max=10"):
        meta.create_partitions("fixed", 11, num_partitions_max=10)
    with pytest.raises(UnknownTopic):
        meta.create_partitions("nope", 4)
    with pytest.raises(InvalidTopic):
        meta.create_partitions("__sparklog_staging", 4)
    meta.request_reassignment("fixed", {0: [3, 2, 1]})
    with pytest.raises(InvalidRequest, match="reassignment"):
        meta.create_partitions("fixed", 4)
    meta.zk.delete(meta.layout.reassignment("fixed"))
    meta.zk.delete(meta.layout.broker(3))  # replication factor 3, two live brokers
    with pytest.raises(InvalidRequest, match="need 3 live brokers"):
        meta.create_partitions("fixed", 4)
    assert meta.topic("fixed").partitions == 3
    assert sorted(meta.zk.get_children(meta.layout.topic_partitions("fixed"))) == ["0", "1", "2"]


def test_config_overrides_are_deleted_with_the_same_checks(meta: ClusterMetadata) -> None:
    meta.create_topic("conf", 1, 1, {"retention.ms": "60000", "cleanup.policy": "compact"})
    altered = meta.alter_topic_configs("conf", {"segment.bytes": "4096"}, delete=["retention.ms", "flush.ms"])
    assert altered.configs == {"partitioner": "murmur2", "cleanup.policy": "compact", "segment.bytes": "4096"}
    assert meta.topic("conf").configs == altered.configs
    with pytest.raises(InvalidConfig, match="unknown topic config 'no.such'"):
        meta.alter_topic_configs("conf", {}, delete=["no.such"])
    with pytest.raises(InvalidConfig, match="cannot be deleted"):
        meta.alter_topic_configs("conf", {}, delete=["partitioner"])
    with pytest.raises(InvalidConfig, match="both set and deleted"):
        meta.alter_topic_configs("conf", {"segment.bytes": "8192"}, delete=["segment.bytes"])
    assert meta.topic("conf").configs == altered.configs


def test_adding_partitions_through_a_broker_needs_alter_on_the_topic() -> None:
    """Kafka's CreatePartitions: Alter on the topic (as AlterConfigs), from the call table."""
    from sparklog.broker.call_authorization import Acl, Call, needs
    from sparklog.protocol import wire
    from sparklog.security.acls import Operation, ResourceType

    assert wire.CREATE_PARTITIONS in wire.CLUSTER_ACTIONS
    wanted = [Acl(Operation.ALTER, ResourceType.TOPIC, "grow")]
    assert needs(Call.ACTION, wire.CREATE_PARTITIONS, {"name": "grow", "partitions": 4}) == wanted
    with pytest.raises(InvalidTopic):
        needs(Call.ACTION, wire.CREATE_PARTITIONS, {"name": "../grow", "partitions": 4})
