"""What the Kafka-protocol listener (:mod:`sparklog.kafka`) reaches of a broker: the
:class:`~sparklog.kafka.broker_access.KafkaBroker` calls, answered by the same parts the Flight
service uses (the partitions this broker leads, the lake's union read, the change counter that
wakes waiting fetches, the watched view of brokers, topics and partition states, the committed
offsets in ZooKeeper). The listener never sees the ``Broker`` or a ``Partition``: only records
as Arrow batches and plain values."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence

import pyarrow as pa
from kazoo.exceptions import KazooException
from kazoo.handlers.threading import KazooTimeoutError

from sparklog.broker.lake.union_read import UnionRead
from sparklog.broker.partition import Partition
from sparklog.broker.produce_request import append_produced
from sparklog.broker.replication.partition_changes import PartitionChanges
from sparklog.coordination.cluster import BrokerInfo, ClusterMetadata, PartitionState, TopicMetadata
from sparklog.errors import (
    CoordinatorNotAvailable,
    FencedLeaderEpoch,
    GroupNotEmpty,
    InvalidRecord,
    SparklogError,
    UnknownLeaderEpoch,
)
from sparklog.kafka.broker_access import (
    Appended,
    BrokerEndpoint,
    ClusterInfo,
    PartitionInfo,
    PartitionOffsets,
    PartitionRead,
    StoredBatch,
    TopicInfo,
    TopicPartition,
)
from sparklog.names import is_internal
from sparklog.schemas.value_schema import ValueSchema

CONTROLLER_CACHE_S = 1.0  # how long a read of the controller znode answers Metadata requests

LeaderLookup = Callable[..., Partition]  # (topic, partition, for_write=False) -> the partition it leads
PartitionStates = Callable[[str, Iterable[int]], Mapping[int, tuple[PartitionState, int]]]


class KafkaGateway:
    """A broker's side of :class:`~sparklog.kafka.broker_access.KafkaBroker`."""

    def __init__(
        self,
        broker_id: int,
        leader_partition: LeaderLookup,
        value_schemas: Mapping[str, Sequence[ValueSchema]],
        union_read: UnionRead,
        changes: PartitionChanges,
        cluster: ClusterMetadata,
        live_brokers: Callable[[], Mapping[int, BrokerInfo]],
        topic_metadata: Callable[[str], TopicMetadata],
        partition_states: PartitionStates,
    ) -> None:
        self.broker_id = broker_id
        self._leader_partition = leader_partition
        self._value_schemas = value_schemas
        self._union = union_read
        self._changes = changes
        self._cluster = cluster
        self._live_brokers = live_brokers
        self._topic_metadata = topic_metadata
        self._partition_states = partition_states
        self._cluster_id: str | None = None
        self._controller = (-1, 0.0)  # (id, when read)
        self._lock = threading.Lock()

    # ----------------------------------------------------------------- partitions
    def _leader(self, topic: str, partition: int, current_leader_epoch: int = -1, for_write: bool = False) -> Partition:
        led = self._leader_partition(topic, partition, for_write)
        if current_leader_epoch >= 0:
            epoch = led.leader_epoch
            if current_leader_epoch < epoch:
                raise FencedLeaderEpoch(
                    f"{topic}-{partition}: leader epoch {current_leader_epoch} is older than the leader's {epoch}"
                )
            if current_leader_epoch > epoch:
                raise UnknownLeaderEpoch(
                    f"{topic}-{partition}: leader epoch {current_leader_epoch} is newer than this broker's {epoch}"
                )
        return led

    def _untyped(self, topic: str) -> None:
        if self._value_schemas.get(topic):
            raise InvalidRecord(f"{topic!r} is a typed topic: typed topics are not served to Kafka clients yet")

    def max_message_bytes(self, topic: str, partition: int) -> int:
        return self._leader(topic, partition, for_write=True).log.config.max_message_bytes

    def append(
        self, topic: str, partition: int, records: pa.RecordBatch, acks: str, producer_id: int, sequence: int
    ) -> Appended:
        self._untyped(topic)
        led = self._leader(topic, partition, for_write=True)
        info = append_produced(led, records, None, None, acks, producer_id, sequence, wait=False)
        config = led.log.config
        return Appended(
            info.base_offset,
            info.last_offset,
            info.max_timestamp if config.message_timestamp_type == "LogAppendTime" else -1,
            led.log.log_start_offset,
            info.leader_epoch,
            info.duplicate,
        )

    def await_replicated(self, topic: str, partition: int, appended: Appended, deadline: float) -> None:
        led = self._leader(topic, partition)
        min_isr = led.log.config.min_insync_replicas
        led.await_high_watermark(appended.last_offset + 1, min_isr, appended.leader_epoch, deadline)

    def read(self, topic: str, partition: int, offset: int, max_bytes: int, current_leader_epoch: int) -> PartitionRead:
        self._untyped(topic)
        led = self._leader(topic, partition, current_leader_epoch)
        hw = led.high_watermark
        stored = self._union.read(led, offset, max_bytes, hw)
        return PartitionRead(
            [StoredBatch(batch, header.leader_epoch) for batch, header in stored],
            hw,
            led.log.log_start_offset,
            led.leader_epoch,
            led.log.config.message_timestamp_type == "LogAppendTime",
        )

    def offsets(self, topic: str, partition: int, current_leader_epoch: int) -> PartitionOffsets:
        led = self._leader(topic, partition, current_leader_epoch)
        return PartitionOffsets(self._union.earliest(led), led.high_watermark, led.leader_epoch)

    def offset_for_time(self, topic: str, partition: int, timestamp_ms: int) -> tuple[int, int] | None:
        led = self._leader(topic, partition)
        hw = led.high_watermark
        found = self._union.offset_for_time(led, timestamp_ms)
        if found is None or found >= hw:
            return None
        for batch, _ in self._union.read(led, found, 1, hw):
            offsets = batch.column("offset").to_pylist()
            if found in offsets:
                stamp = batch.column("timestamp").cast(pa.int64())[offsets.index(found)].as_py()
                return found, int(stamp)
        return found, timestamp_ms

    def epoch_end(self, topic: str, partition: int, epoch: int) -> tuple[int, int]:
        plog = self._leader(topic, partition).log
        with plog.lock:
            return plog.epochs.end_offset_for(epoch, plog.log_end_offset)

    @property
    def change_version(self) -> int:
        return self._changes.version

    def wait_for_change(
        self, since: int, partitions: Collection[TopicPartition], deadline: float, give_up: Callable[[], bool]
    ) -> int:
        version, _ = self._changes.wait_for(since, set(partitions), deadline, give_up)
        return version

    # ----------------------------------------------------------------- cluster
    def cluster(self, topics: Sequence[str] | None) -> ClusterInfo:
        brokers = self.kafka_brokers()
        names = list(self._cluster.topics()) if topics is None else list(topics)
        return ClusterInfo(self._id(), self._controller_id(), brokers, [self._topic(name) for name in names])

    def kafka_brokers(self) -> Sequence[BrokerEndpoint]:
        brokers = []
        for info in sorted(self._live_brokers().values(), key=lambda b: b.broker_id):
            address = info.kafka_address()
            if address is not None:  # a broker without a Kafka listener cannot serve Kafka clients
                brokers.append(BrokerEndpoint(info.broker_id, address[0], address[1]))
        return brokers

    def _id(self) -> str:
        if self._cluster_id is None:
            self._cluster_id = self._cluster.cluster_id()
        return self._cluster_id

    def _controller_id(self) -> int:
        with self._lock:
            known, when = self._controller
            if time.monotonic() - when < CONTROLLER_CACHE_S:
                return known
        try:
            known = self._cluster.controller_id()
        except Exception:  # ZooKeeper away: the last one read
            return known
        with self._lock:
            self._controller = (known, time.monotonic())
        return known

    def _topic(self, name: str) -> TopicInfo:
        try:
            meta = self._topic_metadata(name)
            states = self._partition_states(name, range(meta.partitions))
        except SparklogError as exc:
            return TopicInfo(name, exc)
        partitions = []
        for p, replicas in enumerate(meta.replicas):
            found = states.get(p)
            state = found[0] if found else None
            partitions.append(
                PartitionInfo(
                    p,
                    state.leader if state else -1,
                    state.leader_epoch if state else -1,
                    list(replicas),
                    list(state.isr) if state else [],
                )
            )
        return TopicInfo(name, None, partitions, is_internal(name))

    # ----------------------------------------------------------------- group offsets
    def commit_offsets(self, group: str, offsets: Mapping[TopicPartition, int]) -> None:
        with _zookeeper_errors():
            self._cluster.commit_offsets(group, dict(offsets))

    def committed_offsets(self, group: str, topic: str | None = None) -> Mapping[TopicPartition, int]:
        with _zookeeper_errors():
            return self._cluster.committed_offsets(group, topic)

    def groups(self) -> Sequence[str]:
        with _zookeeper_errors():
            return list(self._cluster.groups())

    def delete_offsets(self, group: str, partitions: Collection[TopicPartition] | None = None) -> int:
        with _zookeeper_errors():
            members = self._cluster.group_members(group)  # sparklog's own consumers, by the topics they read
            topics = None if partitions is None else {t for t, _ in partitions}
            reading = [t for read in members for t in read if topics is None or t in topics]
            if reading:
                raise GroupNotEmpty(f"sparklog consumers of group {group!r} read {sorted(set(reading))}")
            return self._cluster.delete_committed_offsets(group, partitions)


@contextlib.contextmanager
def _zookeeper_errors() -> Iterator[None]:
    try:
        yield
    except (KazooException, KazooTimeoutError) as exc:
        raise CoordinatorNotAvailable(f"the broker could not reach ZooKeeper ({type(exc).__name__}); retry") from None
