"""What the Kafka-protocol listener needs of the broker it serves, as narrow Protocols.

The listener (:mod:`sparklog.kafka.server` and its handlers) never sees the broker's own types: a
broker hands it an object offering these calls (``sparklog.broker.kafka_gateway``), and tests may
hand it a fake. Records cross as Arrow batches in sparklog's record columns (``offset``,
``timestamp``, ``key``, ``value``, ``headers``); errors as :class:`~sparklog.errors.SparklogError`,
which :mod:`sparklog.kafka.error_codes` turns into Kafka's error codes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Protocol

import pyarrow as pa

TopicPartition = tuple[str, int]


@dataclasses.dataclass(frozen=True)
class Appended:
    """Where a produced batch landed (``duplicate``: a retried batch already stored: nothing new)."""

    base_offset: int
    last_offset: int
    log_append_time_ms: int  # -1 unless the topic stamps records with the broker's time
    log_start_offset: int
    leader_epoch: int  # the epoch it was appended in: acknowledged only while still leading in it
    duplicate: bool = False


@dataclasses.dataclass(frozen=True)
class StoredBatch:
    """One stored batch as a consumer reads it: its records (sparklog's record columns) and the
    leader epoch it was written in."""

    records: pa.RecordBatch
    leader_epoch: int


@dataclasses.dataclass(frozen=True)
class PartitionRead:
    """What a fetch of one partition found: batches from the one holding the offset on (none at or
    past the high watermark), and where the partition stands."""

    batches: Sequence[StoredBatch]
    high_watermark: int
    log_start_offset: int
    leader_epoch: int
    log_append_time: bool  # the topic's timestamps are the broker's (LogAppendTime)


@dataclasses.dataclass(frozen=True)
class PartitionOffsets:
    log_start_offset: int
    high_watermark: int
    leader_epoch: int


class PartitionLogs(Protocol):
    """The partitions this broker leads: append, read, offsets, and the wake-up of waiting fetches."""

    broker_id: int

    def max_message_bytes(self, topic: str, partition: int) -> int:
        """The largest batch the partition takes (``max.message.bytes``); NotLeader, UnknownTopic."""
        ...

    def append(
        self, topic: str, partition: int, records: pa.RecordBatch, acks: str, producer_id: int, sequence: int
    ) -> Appended:
        """Append ``records`` (columns ``timestamp``, ``key``, ``value``, ``headers``) as the
        partition's leader; with ``acks`` ``"all"`` refused below ``min.insync.replicas`` but not
        waited for (:meth:`await_replicated`)."""
        ...

    def await_replicated(self, topic: str, partition: int, appended: Appended, deadline: float) -> None:
        """Return once the high watermark covers ``appended`` (``deadline``: a ``time.monotonic()``
        value); NotLeader, NotEnoughReplicas."""
        ...

    def read(self, topic: str, partition: int, offset: int, max_bytes: int, current_leader_epoch: int) -> PartitionRead:
        """Committed batches at ``offset`` (at least one if any, about ``max_bytes``);
        OffsetOutOfRange, NotLeader, UnknownTopic, and a fenced or unknown leader epoch."""
        ...

    def offsets(self, topic: str, partition: int, current_leader_epoch: int) -> PartitionOffsets: ...

    def offset_for_time(self, topic: str, partition: int, timestamp_ms: int) -> tuple[int, int] | None:
        """The first (offset, timestamp) at or after ``timestamp_ms`` below the high watermark."""
        ...

    def epoch_end(self, topic: str, partition: int, epoch: int) -> tuple[int, int]:
        """Where ``epoch`` ends in the leader's log: (the largest epoch at most ``epoch``, end offset)."""
        ...

    @property
    def change_version(self) -> int:
        """A counter of changes (appends, high watermarks, roles), read before looking."""
        ...

    def wait_for_change(
        self, since: int, partitions: Collection[TopicPartition], deadline: float, give_up: Callable[[], bool]
    ) -> int:
        """Wait until one of ``partitions`` changed after ``since``, ``deadline`` passes or
        ``give_up()``; the counter after."""
        ...


@dataclasses.dataclass(frozen=True)
class BrokerEndpoint:
    broker_id: int
    host: str
    port: int


@dataclasses.dataclass(frozen=True)
class PartitionInfo:
    partition: int
    leader: int  # -1: none
    leader_epoch: int
    replicas: Sequence[int]
    isr: Sequence[int]


@dataclasses.dataclass(frozen=True)
class TopicInfo:
    name: str
    error: Exception | None  # UnknownTopic, AuthorizationFailed... (then no partitions)
    partitions: Sequence[PartitionInfo] = ()
    internal: bool = False


@dataclasses.dataclass(frozen=True)
class ClusterInfo:
    cluster_id: str
    controller_id: int  # -1: none
    brokers: Sequence[BrokerEndpoint]  # the live brokers at their advertised Kafka addresses
    topics: Sequence[TopicInfo]


class ClusterView(Protocol):
    """The cluster as the broker's watches see it."""

    def cluster(self, topics: Sequence[str] | None) -> ClusterInfo:
        """Brokers, controller and the named topics (None: every topic)."""
        ...


class GroupOffsets(Protocol):
    """Committed offsets of consumer groups (the same ones sparklog's own consumers commit), and
    the brokers a group's coordinator is chosen among. ZooKeeper out of reach:
    CoordinatorNotAvailable; a group name ZooKeeper cannot hold: InvalidGroupId."""

    def commit_offsets(self, group: str, offsets: Mapping[TopicPartition, int]) -> None: ...

    def committed_offsets(self, group: str, topic: str | None = None) -> Mapping[TopicPartition, int]: ...

    def groups(self) -> Sequence[str]:
        """Every group with committed offsets."""
        ...

    def delete_offsets(self, group: str, partitions: Collection[TopicPartition] | None = None) -> int:
        """Remove the group's committed offsets of ``partitions`` (None: all of them, and the
        group with them); how many there were. GroupNotEmpty while sparklog's own consumers in
        the group read one of the topics."""
        ...

    def kafka_brokers(self) -> Sequence[BrokerEndpoint]:
        """The live brokers with a Kafka listener, by id (at their advertised Kafka addresses)."""
        ...


class KafkaBroker(PartitionLogs, ClusterView, GroupOffsets, Protocol):
    """Everything the listener's handlers call."""
