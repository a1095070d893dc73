"""What the Kafka-protocol listener (:mod:`sparklog.kafka`) reaches of a broker: the
:class:`~sparklog.kafka.broker_access.KafkaBroker` calls, answered by the same parts the Flight
service uses (the partitions this broker leads, the lake's union read, the change counter that
wakes waiting fetches, the watched view of brokers, topics and partition states, the committed
offsets in ZooKeeper, topic administration through :class:`ClusterMetadata`'s own checks on the
broker's session, as :mod:`sparklog.broker.cluster_requests` answers sparklog's clients; users,
ACLs and client quotas through the stores :mod:`sparklog.broker.admin_requests` and ``sparklog
users|acls|quotas`` use, on the same session; the partition replicas in the broker's data dir). The
listener never sees the ``Broker`` or a ``Partition``: only records as Arrow batches and plain
values."""

from __future__ import annotations

import logging
import shutil
import threading
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Protocol

import pyarrow as pa

from sparklog.broker.cluster_requests import zookeeper_errors
from sparklog.broker.lake.union_read import UnionRead
from sparklog.broker.partition import Partition
from sparklog.broker.produce_request import append_produced
from sparklog.broker.replication.partition_changes import PartitionChanges
from sparklog.broker.typed_values import from_avro, to_avro
from sparklog.config import PARTITIONER_CONFIG, TopicConfig
from sparklog.coordination.cluster import (
    DEFAULT_NUM_PARTITIONS,
    DEFAULT_REPLICATION_FACTOR,
    BrokerInfo,
    ClusterMetadata,
    PartitionState,
    TopicMetadata,
)
from sparklog.coordination.zk_layout import DEFAULT_QUOTA_USER
from sparklog.errors import (
    FencedLeaderEpoch,
    GroupNotEmpty,
    RequestTimedOut,
    SparklogError,
    UnknownLeaderEpoch,
    UnknownTopic,
)
from sparklog.kafka.broker_access import (
    Appended,
    BrokerEndpoint,
    ClusterInfo,
    ConfigEntry,
    ConfigSource,
    CreatedTopic,
    LogDir,
    PartitionInfo,
    PartitionOffsets,
    PartitionRead,
    ReplicaSize,
    StoredBatch,
    TopicInfo,
    TopicPartition,
)
from sparklog.names import check_topic_name, is_internal
from sparklog.schemas.value_schema import ValueSchema
from sparklog.security.acl_store import AclStore
from sparklog.security.acls import AclBinding, AclFilter
from sparklog.security.credential_store import CredentialStore
from sparklog.security.quotas import QuotaStore

log = logging.getLogger(__name__)

CONTROLLER_CACHE_S = 1.0  # how long a read of the controller znode answers Metadata requests
VIEW_POLL_S = 0.02  # how often an administered topic is looked for in this broker's view
_KINDS = {"int": "long", "bool": "boolean", "str": "string"}
_LIST_CONFIGS = frozenset({"cleanup.policy"})  # comma-separated values

LeaderLookup = Callable[..., Partition]  # (topic, partition, for_write=False) -> the partition it leads
PartitionStates = Callable[[str, Iterable[int]], Mapping[int, tuple[PartitionState, int]]]
HostedPartitions = Callable[[], Mapping[TopicPartition, Partition]]  # the replicas this broker holds


class FetchMeter(Protocol):
    """Where a consumer's fetch is counted (:class:`~sparklog.broker.metrics.BrokerMetrics`): once
    per batch read, never per record."""

    def fetched(self, topic: str, records: int, size: int) -> None: ...


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
        data_dir: Path,
        hosted: HostedPartitions,
        meter: FetchMeter | None = None,
    ) -> None:
        """``meter``: counts each batch a Kafka consumer's fetch reads (None: nothing counted)."""
        self.broker_id = broker_id
        self._meter = meter
        self._leader_partition = leader_partition
        self._value_schemas = value_schemas
        self._union = union_read
        self._changes = changes
        self._cluster = cluster
        self._live_brokers = live_brokers
        self._topic_metadata = topic_metadata
        self._partition_states = partition_states
        self._data_dir = data_dir
        self._hosted = hosted
        self._credentials = CredentialStore(cluster.zk, cluster.layout)
        self._acls = AclStore(cluster.zk, cluster.layout)
        self._quotas = QuotaStore(cluster.zk, cluster.layout)
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

    def max_message_bytes(self, topic: str, partition: int) -> int:
        return self._leader(topic, partition, for_write=True).log.config.max_message_bytes

    def append(
        self, topic: str, partition: int, records: pa.RecordBatch, acks: str, producer_id: int, sequence: int
    ) -> Appended:
        led = self._leader(topic, partition, for_write=True)
        schemas = self._value_schemas.get(topic)
        if schemas:  # a typed topic: Kafka clients write Avro binary of its latest schema
            records = from_avro(records, schemas)
        info = append_produced(led, records, schemas, None, acks, producer_id, sequence, wait=False)
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
        led = self._leader(topic, partition, current_leader_epoch)
        hw = led.high_watermark
        stored = self._union.read(led, offset, max_bytes, hw)
        if self._meter is not None:
            for batch, _header in stored:
                self._meter.fetched(topic, batch.num_rows, batch.nbytes)
        schemas = self._value_schemas.get(topic)
        return PartitionRead(
            [
                StoredBatch(to_avro(batch, schemas) if schemas else batch, header.leader_epoch)
                for batch, header in stored
            ],
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
    def cluster(self, topics: Sequence[str] | None, listener: str) -> ClusterInfo:
        controller = self._controller_id()
        live = self._live_brokers()
        if controller >= 0 and controller not in live:
            # The view of live brokers (a watch) lags a registration: the controller registered
            # before it took the controller znode. A Kafka admin client told of a controller that
            # is not among the brokers waits for its next metadata refresh, minutes away
            # (librdkafka): read the brokers now.
            try:
                live = self._cluster.brokers()
            except Exception:  # ZooKeeper away: what the watch saw
                log.debug("could not read the live brokers", exc_info=True)
        names = list(self._cluster.topics()) if topics is None else list(topics)
        return ClusterInfo(self._id(), controller, self._endpoints(live, listener), [self._topic(n) for n in names])

    def kafka_brokers(self, listener: str) -> Sequence[BrokerEndpoint]:
        return self._endpoints(self._live_brokers(), listener)

    @staticmethod
    def _endpoints(live: Mapping[int, BrokerInfo], listener: str) -> Sequence[BrokerEndpoint]:
        brokers = []
        for info in sorted(live.values(), key=lambda b: b.broker_id):
            address = info.kafka_address(listener)
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
            check_topic_name(name)  # before it becomes a znode path
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
        with zookeeper_errors(self._cluster.zk):
            self._cluster.commit_offsets(group, dict(offsets))

    def committed_offsets(self, group: str, topic: str | None = None) -> Mapping[TopicPartition, int]:
        with zookeeper_errors(self._cluster.zk):
            return self._cluster.committed_offsets(group, topic)

    def groups(self) -> Sequence[str]:
        with zookeeper_errors(self._cluster.zk):
            return list(self._cluster.groups())

    def delete_offsets(self, group: str, partitions: Collection[TopicPartition] | None = None) -> int:
        with zookeeper_errors(self._cluster.zk):
            members = self._cluster.group_members(group)  # sparklog's own consumers, by the topics they read
            topics = None if partitions is None else {t for t, _ in partitions}
            reading = [t for read in members for t in read if topics is None or t in topics]
            if reading:
                raise GroupNotEmpty(f"sparklog consumers of group {group!r} read {sorted(set(reading))}")
            return self._cluster.delete_committed_offsets(group, partitions)

    # ----------------------------------------------------------------- topic administration
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
        if replicas is not None:  # the assignment says how many of each
            partitions, replication_factor = len(replicas), max((len(r) for r in replicas), default=0)
        with zookeeper_errors(self._cluster.zk):
            meta = self._cluster.create_topic(
                name,
                DEFAULT_NUM_PARTITIONS if partitions is None else partitions,
                DEFAULT_REPLICATION_FACTOR if replication_factor is None else replication_factor,
                configs,
                replicas=replicas,
                validate_only=validate_only,
            )
        if not validate_only:
            self._await_view(name, lambda seen: seen is not None and seen.partitions >= meta.partitions, deadline)
        return CreatedTopic(meta.name, meta.partitions, len(meta.replicas[0]), topic_config_entries(meta.configs))

    def delete_topic(self, name: str, deadline: float | None) -> None:
        with zookeeper_errors(self._cluster.zk):
            self._cluster.delete_topic(name)
        self._await_view(name, lambda seen: seen is None, deadline)

    def create_partitions(
        self,
        name: str,
        total: int,
        replicas: Sequence[Sequence[int]] | None,
        validate_only: bool,
        deadline: float | None,
    ) -> None:
        with zookeeper_errors(self._cluster.zk):
            self._cluster.create_partitions(name, total, replicas=replicas, validate_only=validate_only)
        if not validate_only:
            self._await_view(name, lambda seen: seen is not None and seen.partitions >= total, deadline)

    def topic_configs(self, name: str) -> Sequence[ConfigEntry]:
        check_topic_name(name)
        with zookeeper_errors(self._cluster.zk):
            meta = self._cluster.topic(name)  # ZooKeeper's, not the watched copy: an alter just made shows
        return topic_config_entries(meta.configs)

    def alter_topic_configs(
        self, name: str, configs: Mapping[str, str], delete: Collection[str], validate_only: bool
    ) -> None:
        with zookeeper_errors(self._cluster.zk):
            self._cluster.alter_topic_configs(name, configs, delete=delete, validate_only=validate_only)

    def replace_topic_configs(self, name: str, configs: Mapping[str, str], validate_only: bool) -> None:
        """Every override not in ``configs`` is removed, ``partitioner`` excepted: a Kafka client
        does not know it, and removing it would move every key (:func:`check_deletable_configs`)."""
        check_topic_name(name)
        with zookeeper_errors(self._cluster.zk):
            current = self._cluster.topic(name).configs
            delete = [k for k in current if k not in configs and k != PARTITIONER_CONFIG]
            self._cluster.alter_topic_configs(name, configs, delete=delete, validate_only=validate_only)

    def broker_configs(self) -> Sequence[ConfigEntry]:
        """Its id, and what a topic created without a partition count or replication factor gets
        (Kafka's ``num.partitions`` and ``default.replication.factor``; fixed in sparklog)."""
        fixed = {"num.partitions": DEFAULT_NUM_PARTITIONS, "default.replication.factor": DEFAULT_REPLICATION_FACTOR}
        return [
            ConfigEntry("broker.id", str(self.broker_id), ConfigSource.BROKER, "-1", "long", read_only=True),
            *(ConfigEntry(k, str(v), ConfigSource.DEFAULT, str(v), "long", read_only=True) for k, v in fixed.items()),
        ]

    # ----------------------------------------------------------------- users, ACLs, client quotas
    def scram_iterations(self, users: Collection[str] | None) -> Mapping[str, int]:
        with zookeeper_errors(self._cluster.zk):
            return self._credentials.iterations(None if users is None else list(users))

    def upsert_scram_credential(self, user: str, salt: bytes, salted: bytes, iterations: int) -> bool:
        with zookeeper_errors(self._cluster.zk):
            return self._credentials.upsert_salted(user, salt, salted, iterations)

    def delete_scram_credential(self, user: str) -> bool:
        with zookeeper_errors(self._cluster.zk):
            return self._credentials.remove(user)

    def describe_acls(self, acl_filter: AclFilter) -> Sequence[AclBinding]:
        with zookeeper_errors(self._cluster.zk):
            return self._acls.describe(acl_filter)

    def create_acls(self, bindings: Sequence[AclBinding]) -> None:
        with zookeeper_errors(self._cluster.zk):
            self._acls.add(bindings)

    def delete_acls(self, filters: Sequence[AclFilter]) -> Sequence[AclBinding]:
        with zookeeper_errors(self._cluster.zk):
            return self._acls.delete_matching(filters)

    def client_quotas(self) -> Mapping[str | None, Mapping[str, float]]:
        with zookeeper_errors(self._cluster.zk):
            quotas = self._quotas.quotas()
        return {None if user == DEFAULT_QUOTA_USER else user: quota.to_dict() for user, quota in quotas.items()}

    def alter_client_quota(self, user: str | None, rates: Mapping[str, float | None], validate_only: bool) -> None:
        with zookeeper_errors(self._cluster.zk):
            self._quotas.alter(DEFAULT_QUOTA_USER if user is None else user, rates, validate_only)

    # ----------------------------------------------------------------- log dir
    def log_dir(self) -> LogDir:
        """The data dir, its volume (-1: unknown, as Kafka says) and every replica held here, with
        the bytes of its segments and its log end's lag behind its high watermark."""
        replicas = []
        hosted = dict(self._hosted())  # a copy: replicas come and go meanwhile
        for (topic, p), partition in sorted(hosted.items(), key=lambda item: item[0]):
            plog = partition.log
            with plog.lock:
                size, end = plog.size_bytes, plog.log_end_offset
            replicas.append(ReplicaSize(topic, p, size, max(partition.high_watermark - end, 0)))
        try:
            usage = shutil.disk_usage(self._data_dir)
            total, usable = usage.total, usage.free
        except OSError:
            total = usable = -1
        return LogDir(str(self._data_dir.resolve()), total, usable, replicas)

    def _await_view(self, name: str, holds: Callable[[TopicMetadata | None], bool], deadline: float | None) -> None:
        """Wait until this broker's view of topic ``name`` (None: no such topic) ``holds``."""
        if deadline is None:
            return
        while True:
            try:
                with zookeeper_errors(self._cluster.zk):  # a topic not in the view yet is read
                    seen: TopicMetadata | None = self._topic_metadata(name)
            except UnknownTopic:
                seen = None
            if holds(seen):
                return
            if time.monotonic() >= deadline:
                raise RequestTimedOut(
                    f"topic {name!r} was changed, but this broker's view of it has not caught up yet; it will"
                )
            time.sleep(VIEW_POLL_S)


def topic_config_entries(configs: Mapping[str, str]) -> list[ConfigEntry]:
    """Every topic config, with the value in effect given a topic's overrides ``configs`` (as
    :class:`TopicConfig` reads them, normalized) and its default."""
    values = TopicConfig.from_stored(configs).to_dict()
    defaults = TopicConfig().to_dict()
    kinds = TopicConfig.value_types()
    return [
        ConfigEntry(
            name,
            value,
            ConfigSource.TOPIC if name in configs else ConfigSource.DEFAULT,
            defaults[name],
            "list" if name in _LIST_CONFIGS else _KINDS[kinds[name]],
        )
        for name, value in values.items()
    ]
