"""What the Kafka-protocol listener needs of the broker it serves, as narrow Protocols.

The listener (:mod:`sparklog.kafka.server` and its handlers) never sees the broker's own types: a
broker hands it an object offering these calls (``sparklog.broker.kafka_gateway``), and tests may
hand it a fake. Records cross as Arrow batches in sparklog's record columns (``offset``,
``timestamp``, ``key``, ``value``, ``headers``); errors as :class:`~sparklog.errors.SparklogError`,
which :mod:`sparklog.kafka.error_codes` turns into Kafka's error codes.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Protocol

import pyarrow as pa

from sparklog.security.acls import AclBinding, AclFilter

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

    def cluster(self, topics: Sequence[str] | None, listener: str) -> ClusterInfo:
        """Brokers (at their Kafka listeners of the security protocol ``listener``, as Kafka
        answers with the listener a request came in on), controller and the named topics (None:
        every topic)."""
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

    def kafka_brokers(self, listener: str) -> Sequence[BrokerEndpoint]:
        """The live brokers with a Kafka listener of the security protocol ``listener``, by id (at
        its advertised address)."""
        ...


class ConfigSource(enum.Enum):
    """Where a described config's value comes from."""

    TOPIC = "topic"  # set on the topic (Kafka's DYNAMIC_TOPIC_CONFIG)
    BROKER = "broker"  # the broker's own setting (STATIC_BROKER_CONFIG)
    DEFAULT = "default"  # nobody set it (DEFAULT_CONFIG)


@dataclasses.dataclass(frozen=True)
class ConfigEntry:
    """One config of a topic or of the broker as DescribeConfigs lists it: its value in effect,
    where that comes from, and the default it overrides (a topic config's one synonym)."""

    name: str
    value: str
    source: ConfigSource
    default: str
    kind: str  # "boolean", "long", "string" or "list" (Kafka's ConfigType names)
    read_only: bool = False


@dataclasses.dataclass(frozen=True)
class CreatedTopic:
    """A topic as created (or as it would be, when only validated)."""

    name: str
    partitions: int
    replication_factor: int
    configs: Sequence[ConfigEntry]


class TopicAdmin(Protocol):
    """Topic administration through sparklog's own code paths and checks, as its own clients
    administer topics. ``deadline`` (a ``time.monotonic()`` value; None: do not wait): a change is
    awaited until then in this broker's view of the cluster, so the client's next Metadata request
    here sees it; past it, the change stands and ``RequestTimedOut`` says the view lags."""

    def create_topic(
        self,
        name: str,
        partitions: int | None,
        replication_factor: int | None,
        replicas: Sequence[Sequence[int]] | None,
        configs: Mapping[str, str],
        validate_only: bool,
        deadline: float | None,
    ) -> CreatedTopic:
        """Create a topic (None: the broker's default partition count, replication factor);
        ``replicas``: an explicit assignment, partition by partition. TopicExists, InvalidTopic,
        InvalidPartitions, InvalidReplicationFactor, InvalidReplicaAssignment, InvalidConfig."""
        ...

    def delete_topic(self, name: str, deadline: float | None) -> None:
        """UnknownTopic, InvalidTopic (an internal topic)."""
        ...

    def create_partitions(
        self,
        name: str,
        total: int,
        replicas: Sequence[Sequence[int]] | None,
        validate_only: bool,
        deadline: float | None,
    ) -> None:
        """Grow a topic to ``total`` partitions (``replicas``: the new ones' assignment)."""
        ...

    def topic_configs(self, name: str) -> Sequence[ConfigEntry]:
        """Every config of the topic, set or default (UnknownTopic, InvalidTopic)."""
        ...

    def alter_topic_configs(
        self, name: str, configs: Mapping[str, str], delete: Collection[str], validate_only: bool
    ) -> None:
        """Set ``configs`` and remove the overrides named in ``delete``, validated together."""
        ...

    def replace_topic_configs(self, name: str, configs: Mapping[str, str], validate_only: bool) -> None:
        """Make ``configs`` the topic's only overrides (every other one back to its default, but
        sparklog's ``partitioner``, which a Kafka client does not know of)."""
        ...

    def broker_configs(self) -> Sequence[ConfigEntry]:
        """The few settings of this broker a Kafka client may want to see."""
        ...


class SecurityAdmin(Protocol):
    """Users' SCRAM credentials, ACLs and client quotas, in the very stores ``sparklog users|acls|
    quotas`` and the Flight listener's administration actions use (ZooKeeper, through the broker's
    session): one implementation, three ways in. ZooKeeper out of reach: CoordinatorNotAvailable;
    a bad value: InvalidRequest (or a subclass) naming it, and nothing of that call written."""

    def scram_iterations(self, users: Collection[str] | None) -> Mapping[str, int]:
        """Each user's SCRAM-SHA-256 iteration count, by name: every user (None), or those of
        ``users`` that exist (InvalidUserName for a name no user can have)."""
        ...

    def upsert_scram_credential(self, user: str, salt: bytes, salted: bytes, iterations: int) -> bool:
        """Set ``user``'s credential from the salt and salted password a client computed (never
        the password); True if the user is new. UnacceptableCredential (iterations, salt or salted
        password out of bounds), InvalidUserName."""
        ...

    def delete_scram_credential(self, user: str) -> bool:
        """Remove ``user``; whether there was one."""
        ...

    def describe_acls(self, acl_filter: AclFilter) -> Sequence[AclBinding]:
        """The stored ACLs ``acl_filter`` matches, sorted."""
        ...

    def create_acls(self, bindings: Sequence[AclBinding]) -> None:
        """Store ``bindings`` (one already stored stays as it is), all in one change."""
        ...

    def delete_acls(self, filters: Sequence[AclFilter]) -> Sequence[AclBinding]:
        """Remove every stored ACL one of ``filters`` matches (any fields left open); those removed."""
        ...

    def client_quotas(self) -> Mapping[str | None, Mapping[str, float]]:
        """Every user's quota (None: the default of every user without its own), as rates by
        sparklog's names (``producer_byte_rate``, ``consumer_byte_rate``, ``request_rate``)."""
        ...

    def alter_client_quota(self, user: str | None, rates: Mapping[str, float | None], validate_only: bool) -> None:
        """Set the rates of ``rates`` in ``user``'s quota (None: the default) and remove those
        mapped to None, keeping the others; ``validate_only``: check, write nothing."""
        ...


@dataclasses.dataclass(frozen=True)
class ReplicaSize:
    """One partition replica a broker holds in its log dir: the bytes of its log segments, and how
    far its log end is behind the high watermark it knows (Kafka's ``offset_lag``)."""

    topic: str
    partition: int
    size_bytes: int
    offset_lag: int


@dataclasses.dataclass(frozen=True)
class LogDir:
    """A broker's log dir (sparklog's one data dir), its volume's size and free bytes, and the
    replicas in it."""

    path: str
    total_bytes: int
    usable_bytes: int
    replicas: Sequence[ReplicaSize]


class LogDirs(Protocol):
    def log_dir(self) -> LogDir:
        """This broker's log dir as it stands now."""
        ...


class KafkaBroker(PartitionLogs, ClusterView, GroupOffsets, TopicAdmin, SecurityAdmin, LogDirs, Protocol):
    """Everything the listener's handlers call."""
