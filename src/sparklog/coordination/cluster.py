"""Cluster metadata in ZooKeeper: brokers, topics and their partition assignment, partition state,
and consumer groups' committed offsets. Used by brokers, clients and the CLI alike (through kazoo)."""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import json
import uuid
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError, NotEmptyError, RolledBackError
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import WatchedEvent, ZnodeStat

from sparklog.config import PARTITIONER_CONFIG, TopicConfig
from sparklog.coordination.zk_layout import ZkLayout, split_connect_string
from sparklog.coordination.zookeeper_acls import ZooKeeperDigest, client_options
from sparklog.coordination.zookeeper_client import zookeeper_client
from sparklog.errors import (
    CoordinatorNotAvailable,
    InvalidConfig,
    InvalidPartitions,
    InvalidReplicaAssignment,
    InvalidReplicationFactor,
    InvalidRequest,
    TopicExists,
    UnknownGroup,
    UnknownTopic,
)
from sparklog.lake.layout import check_value_columns
from sparklog.names import check_group_id, check_not_internal, check_topic_name
from sparklog.partitioner_names import NEW_TOPIC_PARTITIONER

if TYPE_CHECKING:
    import pyarrow as pa

# the most partitions a topic may have (Kafka's num.partitions.max; KIP-578 has no default, we pick
# one that keeps a topic's metadata a small fraction of ZooKeeper's 1 MB znode limit)
NUM_PARTITIONS_MAX = 10_000
# what a topic gets when its creator names no partition count or replication factor (Kafka's
# num.partitions and default.replication.factor, at their defaults): `sparklog topics create`,
# Admin.create_topic and a Kafka client's CreateTopics with -1
DEFAULT_NUM_PARTITIONS = 1
DEFAULT_REPLICATION_FACTOR = 1
# ZooKeeper refuses requests (and znodes) over jute.maxbuffer, 1 MB by default: a topic's metadata
# must fit one znode, and its partitions are written in transactions well below that
ZK_MAX_DATA_BYTES = 1_000_000
ZK_TXN_MAX_BYTES = 256 * 1024
ZK_TXN_MAX_OPS = 500
CREATING = "creating"
DELETING = "deleting"


@dataclasses.dataclass(frozen=True)
class BrokerInfo:
    """A live broker and where its Flight server listens: ``host``/``port`` is its first listener;
    ``endpoints`` each advertised listener as (security protocol, host, port); ``principal`` whom
    it authenticates as to other brokers (None without inter-broker authentication)."""

    broker_id: int
    host: str
    port: int
    endpoints: tuple[tuple[str, str, int], ...] = ()
    principal: str | None = None
    kafka_endpoints: tuple[tuple[str, str, int], ...] = ()  # its Kafka-protocol listeners, advertised
    metrics_url: str | None = None  # where Prometheus scrapes it (None: no metrics endpoint)

    def kafka_address(self, protocol: str = "PLAINTEXT") -> tuple[str, int] | None:
        """Where a Kafka client with ``security.protocol`` = ``protocol`` reaches this broker."""
        for name, host, port in self.kafka_endpoints:
            if name == protocol:
                return host, port
        return None

    @property
    def location(self) -> str:
        return self.location_for("PLAINTEXT")

    def listens(self, protocol: str) -> bool:
        """Whether this broker has a listener for security protocol ``protocol``."""
        return any(name == protocol for name, _, _ in self.endpoints) if self.endpoints else protocol == "PLAINTEXT"

    def location_for(self, protocol: str) -> str:
        """Where a client with ``security.protocol`` = ``protocol`` reaches this broker."""
        if not self.endpoints:  # registered before listeners existed: one plaintext listener
            if protocol != "PLAINTEXT":
                raise InvalidConfig(f"broker {self.broker_id} has no {protocol} listener (only PLAINTEXT)")
            return f"grpc+tcp://{self.host}:{self.port}"
        for name, host, port in self.endpoints:
            if name == protocol:
                scheme = "grpc+tls" if protocol in ("SSL", "SASL_SSL") else "grpc+tcp"
                return f"{scheme}://{host}:{port}"
        names = ", ".join(name for name, _, _ in self.endpoints)
        raise InvalidConfig(
            f"broker {self.broker_id} has no {protocol} listener (its listeners: {names}); "
            "set security.protocol to one of those"
        )


def broker_info(broker_id: int, raw: Mapping[str, Any]) -> BrokerInfo:
    """A broker's registration (its znode's JSON) as a :class:`BrokerInfo`."""
    principal = raw.get("principal")
    return BrokerInfo(
        broker_id,
        str(raw["host"]),
        int(raw["port"]),
        _addresses(raw.get("endpoints")),
        principal if isinstance(principal, str) else None,
        _addresses(raw.get("kafka_endpoints")),
        raw["metrics_url"] if isinstance(raw.get("metrics_url"), str) else None,
    )


def _addresses(listed: object) -> tuple[tuple[str, str, int], ...]:
    out = []
    for name, address in dict(listed or {}).items():  # type: ignore[call-overload]
        host, _, port = str(address).rpartition(":")
        out.append((str(name), host, int(port)))
    return tuple(out)


@dataclasses.dataclass(frozen=True)
class TopicMetadata:
    """A topic's partitions, the brokers holding each partition's replicas, and its configs."""

    name: str
    replicas: list[list[int]]
    configs: dict[str, str]

    @property
    def partitions(self) -> int:
        return len(self.replicas)

    @property
    def preferred_leaders(self) -> int:
        """How many brokers lead its partitions when each is led by its first replica."""
        return len({r[0] for r in self.replicas if r})

    @property
    def config(self) -> TopicConfig:
        return TopicConfig.from_stored(self.configs)


@dataclasses.dataclass(frozen=True)
class PartitionState:
    """Who leads a partition, in which epoch, and which replicas are in sync."""

    leader: int
    leader_epoch: int
    isr: list[int]

    def to_json(self) -> bytes:
        return json.dumps({"leader": self.leader, "leader_epoch": self.leader_epoch, "isr": self.isr}).encode()

    @classmethod
    def from_json(cls, data: bytes) -> PartitionState:
        raw = json.loads(data)
        return cls(int(raw["leader"]), int(raw["leader_epoch"]), [int(b) for b in raw["isr"]])


def assign_replicas(broker_ids: list[int], partitions: int, replication_factor: int, start: int = 0) -> list[list[int]]:
    """Spread partitions and their replicas evenly: partition p's leader is broker (start + p) mod n,
    its followers the next brokers in the ring (so leaders are spread and replicas are distinct)."""
    brokers = sorted(broker_ids)
    n = len(brokers)
    return [[brokers[(start + p + r) % n] for r in range(replication_factor)] for p in range(partitions)]


def check_replica_assignment(
    name: str, replicas: Sequence[Sequence[int]], live_brokers: Collection[int], replication_factor: int | None = None
) -> list[list[int]]:
    """An explicit replica assignment (each partition's brokers, the first its preferred leader)
    as lists, if every partition has the same number of replicas (``replication_factor``, when
    given), none twice, all on live brokers; else :class:`InvalidReplicaAssignment`."""
    if not replicas:
        raise InvalidReplicaAssignment(f"topic {name!r}: the replica assignment names no partitions")
    factor = len(replicas[0]) if replication_factor is None else replication_factor
    out = []
    for index, brokers in enumerate(replicas):
        listed = [int(b) for b in brokers]
        if not listed:
            raise InvalidReplicaAssignment(f"topic {name!r}: partition {index} is assigned no replicas")
        if len(set(listed)) != len(listed):
            raise InvalidReplicaAssignment(f"topic {name!r}: partition {index} names a broker twice: {listed}")
        if len(listed) != factor:
            raise InvalidReplicaAssignment(
                f"topic {name!r}: partition {index} has {len(listed)} replicas, every partition must have {factor}"
            )
        unknown = sorted(set(listed) - set(live_brokers))
        if unknown:
            raise InvalidReplicaAssignment(
                f"topic {name!r}: partition {index} is assigned to brokers {unknown}, which are not live "
                f"(live: {sorted(live_brokers)})"
            )
        out.append(listed)
    return out


def check_partition_increase(name: str, current: int, total: int) -> None:
    """:class:`InvalidPartitions` unless ``total`` partitions is more than the ``current`` ones
    (partitions are added, never removed: Kafka's rule too)."""
    if total < current:
        raise InvalidPartitions(
            f"topic {name!r} has {current} partitions: a partition count can only be increased, "
            f"and {total} would remove {current - total}"
        )
    if total == current:
        raise InvalidPartitions(f"topic {name!r} already has {current} partitions")


def check_deletable_configs(keys: Iterable[str], configs: Mapping[str, Any] | None = None) -> list[str]:
    """The topic configs an alter may remove (Kafka's ``--delete-config``): known names, none also
    set by the same alter; ``partitioner`` stays (a topic without it places keys with fnv1a, as
    topics older than the setting do: removing it would move every key)."""
    removed = [str(k).strip() for k in keys]
    known = TopicConfig.names()
    for key in removed:
        if key not in known:
            raise InvalidConfig(f"unknown topic config '{key}'; known: {', '.join(known)}")
        if key == PARTITIONER_CONFIG:
            raise InvalidConfig(
                "the partitioner config cannot be deleted: a topic without one places keys with fnv1a, as topics "
                "created before the setting do; set another with --config partitioner=NAME"
            )
        if key in (configs or {}):
            raise InvalidConfig(f"config '{key}' is both set and deleted")
    return removed


def _numeric(name: str) -> tuple[int, str]:
    return (int(name), "") if name.isdigit() else (1 << 62, name)


def _chunks(ops: list[tuple[str, str, bytes]]) -> Iterable[list[tuple[str, str, bytes]]]:
    """ZooKeeper operations in groups small enough for one transaction (at most ``ZK_TXN_MAX_OPS``
    operations and about ``ZK_TXN_MAX_BYTES`` of paths and data)."""
    chunk: list[tuple[str, str, bytes]] = []
    size = 0
    for op in ops:
        cost = len(op[1]) + len(op[2]) + 64  # path, data, and the header and ACL of a request
        if chunk and (len(chunk) >= ZK_TXN_MAX_OPS or size + cost > ZK_TXN_MAX_BYTES):
            yield chunk
            chunk, size = [], 0
        chunk.append(op)
        size += cost
    if chunk:
        yield chunk


class TopicValueSchema(Protocol):
    """A typed topic's value schema as topic creation needs it (a parsed
    :class:`~sparklog.schemas.value_schema.ValueSchema`): the JSON the registry stores, and the
    Arrow type whose fields a lake-enabled topic's table gets as columns."""

    @property
    def json(self) -> str: ...

    @property
    def arrow_type(self) -> pa.StructType: ...


class ClusterMetadata:
    """Reads and writes sparklog's ZooKeeper nodes (layout: :mod:`sparklog.coordination.zk_layout`)."""

    def __init__(
        self,
        connect: str,
        timeout: float = 10.0,
        client: KazooClient | None = None,
        digest: ZooKeeperDigest | None = None,
    ) -> None:
        """``digest``: authenticate to ZooKeeper and create znodes only it may change (default: env
        ``SPARKLOG_ZOOKEEPER_DIGEST``, if set; :mod:`sparklog.coordination.zookeeper_acls`)."""
        hosts, root = split_connect_string(connect)
        self.connect = connect
        self.layout = ZkLayout(root)
        self._own_client = client is None
        digest = digest or ZooKeeperDigest.from_env()
        self.zk = client or zookeeper_client(hosts, timeout, **client_options(digest))
        self._timeout = timeout

    # ----------------------------------------------------------------- lifecycle
    def start(self) -> ClusterMetadata:
        if self._own_client:
            try:
                self.zk.start(timeout=self._timeout)
            except (KazooTimeoutError, Exception) as exc:
                self.zk.stop()
                self.zk.close()
                raise CoordinatorNotAvailable(
                    f"cannot reach ZooKeeper at {self.connect} ({type(exc).__name__}); is it running?"
                ) from None
        layout = self.layout
        for path in (layout.broker_ids, layout.topics, layout.consumers, layout.schema_root, layout.pending_topics):
            self.zk.ensure_path(path)
        return self

    def close(self) -> None:
        if self._own_client:
            self.zk.stop()
            self.zk.close()

    def __enter__(self) -> ClusterMetadata:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ----------------------------------------------------------------- brokers
    def register_broker(
        self,
        broker_id: int,
        host: str,
        port: int,
        endpoints: Iterable[tuple[str, str, int]] = (),
        principal: str | None = None,
        kafka_endpoints: Iterable[tuple[str, str, int]] = (),
        metrics_url: str | None = None,
    ) -> BrokerInfo:
        """Announce a live broker (an ephemeral node: it disappears with the broker's session):
        its Flight listeners and its Kafka-protocol ones (``kafka_endpoints``), as advertised, and
        its Prometheus endpoint (``metrics_url``), if it serves one. Returns the registration, as
        :meth:`brokers` reads it."""
        raw: dict[str, Any] = {"host": host, "port": port}
        listed = {name: f"{h}:{p}" for name, h, p in endpoints}
        if listed:
            raw["endpoints"] = listed
        kafka = {name: f"{h}:{p}" for name, h, p in kafka_endpoints}
        if kafka:
            raw["kafka_endpoints"] = kafka
        if principal is not None:
            raw["principal"] = principal
        if metrics_url is not None:
            raw["metrics_url"] = metrics_url
        data = json.dumps(raw).encode()
        try:
            self.zk.create(self.layout.broker(broker_id), data, ephemeral=True)
        except NodeExistsError:
            raise InvalidRequest(f"broker id {broker_id} is already registered by a live broker") from None
        return broker_info(broker_id, json.loads(data))

    def cluster_id(self) -> str:
        """The cluster's id (as Kafka's, 22 characters of URL-safe base64 of a random UUID), made
        and stored by whoever asks first; every later reader gets the same."""
        path = self.layout.cluster_id
        try:
            data, _ = self.zk.get(path)
        except NoNodeError:
            made = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
            with contextlib.suppress(NodeExistsError):  # another broker made it first: read theirs
                self.zk.create(path, json.dumps({"version": "1", "id": made}).encode(), makepath=True)
            data, _ = self.zk.get(path)
        return str(json.loads(data)["id"])

    def controller_id(self) -> int:
        """The broker holding the controller znode (-1: none right now)."""
        try:
            data, _ = self.zk.get(self.layout.controller)
            return int(json.loads(data)["broker_id"])
        except NoNodeError:
            return -1

    def brokers(self) -> dict[int, BrokerInfo]:
        """The live brokers by id."""
        out: dict[int, BrokerInfo] = {}
        for child in self.zk.get_children(self.layout.broker_ids):
            try:
                data, _ = self.zk.get(self.layout.broker(int(child)))
            except NoNodeError:
                continue
            out[int(child)] = broker_info(int(child), json.loads(data))
        return out

    # ----------------------------------------------------------------- topics
    def create_topic(
        self,
        name: str,
        partitions: int,
        replication_factor: int = DEFAULT_REPLICATION_FACTOR,
        configs: Mapping[str, Any] | None = None,
        value_schema: TopicValueSchema | None = None,
        *,
        internal: bool = False,
        num_partitions_max: int = NUM_PARTITIONS_MAX,
        replicas: Sequence[Sequence[int]] | None = None,
        validate_only: bool = False,
    ) -> TopicMetadata:
        """Create a topic, assigning its partitions' replicas to the live brokers. With
        ``value_schema`` (parsed and checked by the caller: ``ValueSchema.parse``) it is a typed
        topic: the schema is version 1, created in the same ZooKeeper transaction as the topic node.
        ``replicas``: an explicit assignment instead (Kafka's ``--replica-assignment``), of
        ``partitions`` partitions with ``replication_factor`` replicas each, on live brokers
        (:func:`check_replica_assignment`). ``validate_only``: every check (a topic of that name
        existing included), nothing written; the metadata it would have.

        Names starting with ``__sparklog`` are refused (:class:`InvalidTopic`) unless ``internal``:
        only sparklog itself creates its internal topics. More than ``num_partitions_max``
        partitions are refused (:class:`InvalidPartitions`).

        All or nothing as readers see it: the topic node is written first marked ``creating`` (and
        listed under ``admin/pending_topics``, which :meth:`topics` leaves out), the partitions'
        state znodes follow in transactions within ZooKeeper's 1 MB request limit, and one last
        transaction drops the mark. A client that dies half-way leaves a pending topic without a live
        owner: the next :meth:`create_topic` or :meth:`delete_topic` of that name removes it."""
        if internal:
            check_topic_name(name)
        else:
            check_not_internal(name, "create")
        if partitions < 1:
            raise InvalidPartitions(f"--partitions must be at least 1, got {partitions}")
        if partitions > num_partitions_max:
            raise InvalidPartitions(
                f"topic {name!r}: {partitions} partitions exceed num.partitions.max={num_partitions_max}"
            )
        if replication_factor < 1:
            raise InvalidReplicationFactor(f"--replication-factor must be at least 1, got {replication_factor}")
        # every new topic names its partitioner (murmur2 unless given): a topic without the entry
        # was created before it existed and keeps fnv1a (:mod:`sparklog.client.partitioner`)
        configs = {PARTITIONER_CONFIG: NEW_TOPIC_PARTITIONER, **(configs or {})}
        config = TopicConfig.from_dict(configs)
        if config.min_insync_replicas > replication_factor:
            raise InvalidRequest(
                f"min.insync.replicas={config.min_insync_replicas} exceeds the replication factor {replication_factor}"
            )
        schema_json = None
        if value_schema is not None:
            schema_json = value_schema.json
            if config.lake_enabled:  # its fields become the Delta table's columns
                check_value_columns(name, value_schema.arrow_type.names)
        brokers = list(self.brokers())
        if replicas is not None:
            assigned = check_replica_assignment(name, replicas, brokers, replication_factor)
            if len(assigned) != partitions:
                raise InvalidReplicaAssignment(
                    f"topic {name!r}: {partitions} partitions, but the replica assignment names {len(assigned)}"
                )
        elif len(brokers) < replication_factor:
            raise InvalidReplicationFactor(
                f"replication factor {replication_factor} needs that many live brokers; {len(brokers)} registered"
            )
        else:
            start = len(self.zk.get_children(self.layout.topics)) % len(brokers)
            assigned = assign_replicas(brokers, partitions, replication_factor, start)
        overrides = {k: str(v) for k, v in configs.items()}
        overrides[PARTITIONER_CONFIG] = config.partitioner  # its canonical name
        body = {"replicas": assigned, "configs": overrides}
        size = len(json.dumps(body)) + len(schema_json or "")
        if size > ZK_MAX_DATA_BYTES:
            raise InvalidPartitions(
                f"topic {name!r}: the metadata of {partitions} partitions x {replication_factor} replicas is "
                f"{size} bytes, over ZooKeeper's 1 MB limit; use fewer partitions"
            )
        if validate_only:
            if self._topic_status(name) is not None:
                raise TopicExists(f"topic {name!r} already exists")
            return TopicMetadata(name, assigned, overrides)
        self._begin_topic_creation(name, body, schema_json)
        try:
            self._create_partition_states(name, assigned)
            self._finish_topic_creation(name, body)
        except BaseException:
            with contextlib.suppress(Exception):  # best effort; else the next create or delete cleans up
                self._remove_topic_nodes(name)
            raise
        finally:
            with contextlib.suppress(Exception):
                self._release_pending(name)
        return TopicMetadata(name, assigned, overrides)

    def _begin_topic_creation(self, name: str, body: dict[str, Any], schema_json: str | None) -> None:
        """First write of a creation: the topic node marked ``creating``, its ``partitions`` node,
        its schemas node (and version 1), the pending mark and this client's ephemeral ownership.
        A pending topic left by a client that died is removed first; one still owned is refused."""
        layout = self.layout
        for _attempt in range(3):
            tx = self.zk.transaction()
            tx.create(layout.topic(name), json.dumps({**body, "status": CREATING}).encode())
            tx.create(layout.topic_partitions(name))
            tx.create(layout.schemas(name))  # brokers watch it for schema versions, typed or not
            if schema_json is not None:
                tx.create(f"{layout.schemas(name)}/1", schema_json.encode())
            tx.create(layout.pending_topic(name))
            tx.create(layout.pending_topic_owner(name), ephemeral=True)
            results = tx.commit()
            if not any(isinstance(r, Exception) for r in results):
                return
            status = self._topic_status(name)
            if status is None:
                if any(isinstance(r, NodeExistsError) for r in results):
                    raise TopicExists(f"topic {name!r} already exists")
                failed = next(r for r in results if isinstance(r, Exception) and not isinstance(r, RolledBackError))
                raise InvalidRequest(f"could not create topic {name!r}: {failed!r}")
            if status == "":
                raise TopicExists(f"topic {name!r} already exists")
            if not self._claim_leftover(name, status):  # its creator finished (or it went) meanwhile
                if self._topic_status(name) is not None:
                    raise TopicExists(f"topic {name!r} already exists")
                continue
            try:
                self._remove_topic_nodes(name)
            finally:
                self._release_pending(name)
        raise TopicExists(f"topic {name!r} is being created by another client")

    def _create_partition_states(self, name: str, replicas: list[list[int]]) -> None:
        """Every partition's znode and its first state (leader: the first replica), in chunks."""
        ops = []
        for p, reps in enumerate(replicas):
            path = f"{self.layout.topic_partitions(name)}/{p}"
            ops.append(("create", path, b""))
            ops.append(("create", f"{path}/state", PartitionState(reps[0], 0, list(reps)).to_json()))
        for chunk in _chunks(ops):
            tx = self.zk.transaction()
            for _op, path, data in chunk:
                tx.create(path, data)
            results = tx.commit()
            failed = [r for r in results if isinstance(r, Exception) and not isinstance(r, RolledBackError)]
            if failed:
                raise InvalidRequest(f"could not create the partitions of topic {name!r}: {failed[0]!r}")

    def _finish_topic_creation(self, name: str, body: dict[str, Any]) -> None:
        """The write that makes a created topic visible, all of it at once."""
        self._require_owner(name)
        tx = self.zk.transaction()
        tx.set_data(self.layout.topic(name), json.dumps(body).encode(), version=0)
        tx.delete(self.layout.pending_topic_owner(name))
        tx.delete(self.layout.pending_topic(name))
        results = tx.commit()
        failed = [r for r in results if isinstance(r, Exception) and not isinstance(r, RolledBackError)]
        if failed:
            raise InvalidRequest(f"could not finish creating topic {name!r}: {failed[0]!r}")

    def _topic_status(self, name: str) -> str | None:
        """None: no topic node; "": a visible topic; else its pending status."""
        try:
            data, _ = self.zk.get(self.layout.topic(name))
        except NoNodeError:
            return None
        return str(json.loads(data).get("status", ""))

    def _claim_leftover(self, name: str, status: str) -> bool:
        """Take ownership of a pending topic whose owner is gone (TopicExists or UnknownTopic, by
        ``status``, if another client still owns it). False if there was nothing to claim after
        all: its owner finished meanwhile (the topic is complete, or gone), between the caller's
        look at ``status`` and this claim; the claim is then dropped again (owner and pending mark),
        so a topic another client just created is never taken for a leftover and removed."""
        self.zk.ensure_path(self.layout.pending_topic(name))
        try:
            self.zk.create(self.layout.pending_topic_owner(name), ephemeral=True)
        except NodeExistsError:
            if status == CREATING:
                raise TopicExists(f"topic {name!r} is being created by another client") from None
            raise TopicExists(f"topic {name!r} is being deleted; try again once it is gone") from None
        if self._topic_status(name):  # still pending, and now ours
            return True
        self._release_pending(name)
        with contextlib.suppress(NoNodeError, NotEmptyError):
            self.zk.delete(self.layout.pending_topic(name))
        return False

    def _require_owner(self, name: str) -> None:
        """Refuse to go on with a pending topic this client no longer owns (its session expired
        and another client took the leftover over)."""
        stat = self.zk.exists(self.layout.pending_topic_owner(name))
        if stat is None or stat.ephemeralOwner != self.zk.client_id[0]:
            raise InvalidRequest(f"lost the ownership of pending topic {name!r} (ZooKeeper session expired)")

    def _release_pending(self, name: str) -> None:
        """Drop this client's ownership of a pending topic (if it still holds it)."""
        path = self.layout.pending_topic_owner(name)
        stat = self.zk.exists(path)
        if stat is not None and stat.ephemeralOwner == self.zk.client_id[0]:
            with contextlib.suppress(NoNodeError):
                self.zk.delete(path)

    def _remove_topic_nodes(self, name: str) -> None:
        """Remove a pending topic's znodes (the caller owns it): partitions and schema versions in
        chunks, then the topic node, its schemas node and the pending mark in one transaction."""
        self._require_owner(name)
        layout = self.layout
        ops: list[tuple[str, str, bytes]] = []
        with contextlib.suppress(NoNodeError):
            paths = [
                f"{layout.topic_partitions(name)}/{p}"
                for p in sorted(self.zk.get_children(layout.topic_partitions(name)), key=_numeric)
            ]
            lakes = [self.zk.exists_async(f"{path}/lake") for path in paths]  # lake.enabled: one pipelined round
            for path, lake in zip(paths, lakes, strict=True):
                if lake.get() is not None:
                    ops.append(("delete", f"{path}/lake", b""))
                ops.append(("delete", f"{path}/state", b""))
                ops.append(("delete", path, b""))
        with contextlib.suppress(NoNodeError):
            for v in self.zk.get_children(layout.schemas(name)):
                ops.append(("delete", f"{layout.schemas(name)}/{v}", b""))
        for chunk in _chunks(ops):
            tx = self.zk.transaction()
            for _op, path, _data in chunk:
                tx.delete(path)
            if any(isinstance(r, Exception) for r in tx.commit()):
                for _op, path, _data in chunk:  # something else was there: one by one
                    with contextlib.suppress(NoNodeError):
                        self.zk.delete(path, recursive=True)
        with contextlib.suppress(NoNodeError):
            for child in self.zk.get_children(layout.topic(name)):  # anything else under the topic node
                if child != "partitions":
                    self.zk.delete(f"{layout.topic(name)}/{child}", recursive=True)
        tx = self.zk.transaction()
        for path in (layout.topic_partitions(name), layout.topic(name), layout.schemas(name)):
            if self.zk.exists(path):
                tx.delete(path)
        tx.delete(layout.pending_topic_owner(name))  # fails the whole transaction if it is not ours any more
        tx.delete(layout.pending_topic(name))
        results = tx.commit()
        if any(isinstance(r, Exception) for r in results):
            raise InvalidRequest(f"could not remove topic {name!r}: {results!r}")

    def topics(self) -> list[str]:
        """The topics, without those being created or deleted. The pending marks are read before
        and after the names (two reads are not one snapshot): a topic pending at either read is left
        out, so one whose deletion began before this call, or whose creation is still under way
        after it, is never listed."""
        before = self._pending_topics()
        names = self.zk.get_children(self.layout.topics)
        pending = before | self._pending_topics()
        return sorted(n for n in names if n not in pending)

    def _pending_topics(self) -> set[str]:
        try:
            return set(self.zk.get_children(self.layout.pending_topics))
        except NoNodeError:
            return set()

    def topic(self, name: str) -> TopicMetadata:
        meta, status = self.read_topic(name)
        if status:
            raise UnknownTopic(f"unknown topic {name!r} (it is being {status[:-3]}ed)")
        return meta

    def _topic_node(self, name: str) -> tuple[dict[str, Any], ZnodeStat]:
        """A topic's znode, parsed, and its stat (UnknownTopic without one)."""
        try:
            data, stat = self.zk.get(self.layout.topic(name))
        except NoNodeError:
            raise UnknownTopic(f"unknown topic {name!r}") from None
        return json.loads(data), stat

    def read_topic(self, name: str) -> tuple[TopicMetadata, str]:
        """A topic's metadata and its status: "" when visible, ``creating`` or ``deleting`` while
        that is under way (readers must treat those as absent); UnknownTopic without a topic node."""
        raw, _ = self._topic_node(name)
        meta = TopicMetadata(name, [list(map(int, r)) for r in raw["replicas"]], dict(raw.get("configs", {})))
        return meta, str(raw.get("status", ""))

    def delete_topic(self, name: str, *, internal: bool = False) -> None:
        """Delete a topic: first made invisible in one write (marked ``deleting``: brokers drop
        their replicas, clients stop finding it), then its znodes are removed in chunks. Internal
        (``__sparklog``) topics only with ``internal``. A pending topic whose owner died (a
        creation or deletion cut short) is removed too."""
        if not internal:
            check_not_internal(name, "delete")
        layout = self.layout
        for _attempt in range(3):
            raw, stat = self._topic_node(name)
            status = str(raw.get("status", ""))
            if status:
                try:
                    claimed = self._claim_leftover(name, status)
                except TopicExists:
                    raise UnknownTopic(f"unknown topic {name!r} (it is being {status[:-3]}ed)") from None
                if not claimed:
                    continue  # its owner finished meanwhile: look again
            else:
                tx = self.zk.transaction()
                tx.set_data(layout.topic(name), json.dumps({**raw, "status": DELETING}).encode(), version=stat.version)
                tx.create(layout.pending_topic(name))
                tx.create(layout.pending_topic_owner(name), ephemeral=True)
                if any(isinstance(r, Exception) for r in tx.commit()):
                    continue  # changed meanwhile (configs, ISR, another delete): look again
            try:
                self._remove_topic_nodes(name)
            finally:
                with contextlib.suppress(Exception):
                    self._release_pending(name)
            return
        raise InvalidRequest(f"topic {name!r} kept changing while being deleted; try again")

    def alter_topic_configs(
        self,
        name: str,
        configs: Mapping[str, Any],
        *,
        delete: Iterable[str] = (),
        internal: bool = False,
        validate_only: bool = False,
    ) -> TopicMetadata:
        """Change some configs of a topic and remove the overrides named in ``delete`` (the topic
        then has the default; a key it does not override is no error, an unknown key is), all
        validated together; the brokers pick the change up by watch. Internal (``__sparklog``)
        topics only with ``internal``. ``validate_only``: the checks, nothing written."""
        if not internal:
            check_not_internal(name, "alter")
        removed = check_deletable_configs(delete, configs)
        meta = self.topic(name)
        merged = {**meta.configs, **{k: str(v) for k, v in configs.items()}}
        for key in removed:
            merged.pop(key, None)
        if TopicConfig.from_dict(merged).lake_enabled:
            check_value_columns(name, self._latest_value_fields(name))
        data, stat = self.zk.get(self.layout.topic(name))
        raw = json.loads(data)
        if raw.get("status"):
            raise UnknownTopic(f"unknown topic {name!r} (it is being {raw['status'][:-3]}ed)")
        if validate_only:
            return TopicMetadata(name, meta.replicas, merged)
        raw["configs"] = merged
        self.zk.set(self.layout.topic(name), json.dumps(raw).encode(), version=stat.version)
        return TopicMetadata(name, meta.replicas, merged)

    def create_partitions(
        self,
        name: str,
        total: int,
        *,
        internal: bool = False,
        num_partitions_max: int = NUM_PARTITIONS_MAX,
        replicas: Sequence[Sequence[int]] | None = None,
        validate_only: bool = False,
    ) -> TopicMetadata:
        """Grow a topic to ``total`` partitions (Kafka's CreatePartitions). The new partitions get
        the topic's replication factor on the live brokers, placed by :func:`assign_replicas` as a
        new topic's are, the ring continuing from where the topic's first partition starts; their
        state znodes are written first (leader: their first replica, as a creation writes them),
        each chunk checked against the topic znode's version, then the topic's assignment in one
        compare-and-set, which is what brokers watch: they take the new replicas as they take a
        reassignment's. As many partitions as now or fewer is :class:`InvalidPartitions` (a
        partition is never removed), so is more than ``num_partitions_max``; refused while a
        reassignment of the topic is under way. Keyed records map to other partitions from then on.
        ``replicas``: the new partitions' replicas instead (an explicit assignment, one entry per
        new partition, each with the topic's replication factor: :func:`check_replica_assignment`).
        ``validate_only``: the checks, nothing written; the metadata it would have."""
        if not internal:
            check_not_internal(name, "alter")
        if total > num_partitions_max:
            raise InvalidPartitions(
                f"topic {name!r}: {total} partitions exceed num.partitions.max={num_partitions_max}"
            )
        layout = self.layout
        for _attempt in range(3):
            raw, stat = self._topic_node(name)
            if raw.get("status"):
                raise UnknownTopic(f"unknown topic {name!r} (it is being {raw['status'][:-3]}ed)")
            current_replicas = [list(map(int, r)) for r in raw["replicas"]]
            current = len(current_replicas)
            check_partition_increase(name, current, total)
            if self.zk.exists(layout.reassignment(name)):
                raise InvalidRequest(f"a reassignment of topic {name!r} is in progress; add partitions once it is done")
            factor = len(current_replicas[0])
            brokers = sorted(self.brokers())
            if replicas is not None:
                added = check_replica_assignment(name, replicas, brokers, factor)
                if len(added) != total - current:
                    raise InvalidReplicaAssignment(
                        f"topic {name!r} grows by {total - current} partitions, but the replica assignment "
                        f"names {len(added)}"
                    )
            elif len(brokers) < factor:
                raise InvalidReplicationFactor(
                    f"the new partitions of {name!r} need {factor} live brokers (its replication factor); "
                    f"{len(brokers)} registered"
                )
            else:
                start = brokers.index(current_replicas[0][0]) if current_replicas[0][0] in brokers else 0
                added = assign_replicas(brokers, total, factor, start)[current:]
            grown = current_replicas + added
            body = {**raw, "replicas": grown}
            if len(json.dumps(body)) > ZK_MAX_DATA_BYTES:
                raise InvalidPartitions(
                    f"topic {name!r}: the metadata of {total} partitions x {factor} replicas is over ZooKeeper's "
                    "1 MB limit; add fewer partitions"
                )
            if validate_only:
                return TopicMetadata(name, grown, dict(raw.get("configs", {})))
            if not self._write_new_partition_states(name, grown, current, stat.version):
                continue  # the topic changed meanwhile: look again
            tx = self.zk.transaction()
            tx.set_data(layout.topic(name), json.dumps(body).encode(), version=stat.version)
            if not any(isinstance(r, Exception) for r in tx.commit()):
                return TopicMetadata(name, grown, dict(raw.get("configs", {})))
        raise InvalidRequest(f"topic {name!r} kept changing while partitions were being added; try again")

    def _write_new_partition_states(self, name: str, replicas: list[list[int]], first: int, topic_version: int) -> bool:
        """The znodes and first states of partitions ``first``.. of ``replicas``, in chunks that each
        check the topic znode is still at ``topic_version`` (False, and the rest not written, if it
        is not). Nodes an earlier attempt left (it stopped before its last write) are overwritten."""
        layout = self.layout
        paths = [f"{layout.topic_partitions(name)}/{p}" for p in range(first, len(replicas))]
        existing = [self.zk.exists_async(f"{path}/state") for path in paths]  # one pipelined round
        ops: list[tuple[str, str, bytes]] = []
        for p, path, found in zip(range(first, len(replicas)), paths, existing, strict=True):
            state = PartitionState(replicas[p][0], 0, list(replicas[p])).to_json()
            if found.get() is None:
                if self.zk.exists(path) is None:
                    ops.append(("create", path, b""))
                ops.append(("create", f"{path}/state", state))
            else:
                ops.append(("set", f"{path}/state", state))
        for chunk in _chunks(ops):
            tx = self.zk.transaction()
            tx.check(layout.topic(name), topic_version)
            for op, path, data in chunk:
                if op == "create":
                    tx.create(path, data)
                else:
                    tx.set_data(path, data)
            results = tx.commit()
            if isinstance(results[0], Exception):
                return False
            failed = [r for r in results if isinstance(r, Exception) and not isinstance(r, RolledBackError)]
            if failed:
                raise InvalidRequest(f"could not create the new partitions of topic {name!r}: {failed[0]!r}")
        return True

    def _latest_value_fields(self, name: str) -> list[str]:
        """The top-level field names of a typed topic's latest value schema ([] if untyped)."""
        try:
            versions = [int(v) for v in self.zk.get_children(self.layout.schemas(name)) if v.isdigit()]
            data, _ = self.zk.get(f"{self.layout.schemas(name)}/{max(versions)}") if versions else (b"{}", None)
        except NoNodeError:
            return []
        schema = json.loads(data)
        fields = schema.get("fields", []) if isinstance(schema, dict) else []
        return [f["name"] for f in fields if isinstance(f, dict) and isinstance(f.get("name"), str)]

    def move_replicas(
        self,
        name: str,
        replicas: list[list[int]],
        topic_version: int,
        states: Mapping[int, tuple[PartitionState, int]],
    ) -> bool:
        """Replace a topic's replica assignment together with the states of the partitions it
        shrinks, in one ZooKeeper transaction: compare-and-set on the topic znode (``topic_version``)
        and on each state znode (the version paired with its new state). A replica dropped from the
        assignment leaves the ISR in the same write, so no reader ever sees an ISR member that is no
        longer a replica. False (nothing written) if any of them changed meanwhile."""
        data, _ = self.zk.get(self.layout.topic(name))
        raw = json.loads(data)
        raw["replicas"] = replicas
        tx = self.zk.transaction()
        for p, (state, version) in states.items():
            tx.set_data(self.layout.partition_state(name, p), state.to_json(), version=version)
        tx.set_data(self.layout.topic(name), json.dumps(raw).encode(), version=topic_version)
        return not any(isinstance(r, Exception) for r in tx.commit())

    def set_isr(self, topic: str, partition: int, state: PartitionState, version: int) -> int | None:
        """A leader's compare-and-set of its partition's state (a new ISR), fenced by the replica
        assignment: refused (None) if an ISR member is not a replica of the partition, or if the
        assignment or the state changed meanwhile (both are checked in one ZooKeeper transaction).
        Returns the state znode's new version."""
        topic_path = self.layout.topic(topic)
        try:
            data, topic_stat = self.zk.get(topic_path)
        except NoNodeError:
            return None
        replicas = json.loads(data)["replicas"][partition]
        if any(b not in replicas for b in state.isr):
            return None
        tx = self.zk.transaction()
        tx.check(topic_path, topic_stat.version)
        tx.set_data(self.layout.partition_state(topic, partition), state.to_json(), version=version)
        results = tx.commit()
        if any(isinstance(r, Exception) for r in results):
            return None
        return int(results[1].version)

    def request_reassignment(self, name: str, targets: Mapping[int, list[int]]) -> None:
        """Ask the controller to move partitions of ``name`` onto the given replicas (it adds the new
        replicas, waits until they are in sync, then drops the old ones and moves leadership)."""
        meta = self.topic(name)
        live = self.brokers()
        for p, replicas in targets.items():
            if not 0 <= p < meta.partitions:
                raise InvalidRequest(f"topic {name!r} has no partition {p}")
            if not replicas or len(set(replicas)) != len(replicas):
                raise InvalidRequest(f"partition {p}: replicas must be distinct broker ids, got {replicas}")
            missing = [b for b in replicas if b not in live]
            if missing:
                raise InvalidRequest(f"partition {p}: brokers {missing} are not live")
            if len(replicas) < meta.config.min_insync_replicas:
                raise InvalidRequest(
                    f"partition {p}: {len(replicas)} replicas are fewer than min.insync.replicas="
                    f"{meta.config.min_insync_replicas}"
                )
        body = json.dumps({"partitions": {str(p): list(r) for p, r in targets.items()}}).encode()
        try:
            self.zk.create(self.layout.reassignment(name), body, makepath=True)
        except NodeExistsError:
            raise InvalidRequest(f"a reassignment of topic {name!r} is already in progress") from None

    def pending_reassignment(self, name: str) -> dict[int, list[int]] | None:
        try:
            data, _ = self.zk.get(self.layout.reassignment(name))
        except NoNodeError:
            return None
        return {int(p): list(r) for p, r in json.loads(data)["partitions"].items()}

    def partition_state(self, topic: str, partition: int) -> PartitionState:
        try:
            data, _ = self.zk.get(self.layout.partition_state(topic, partition))
        except NoNodeError:
            raise UnknownTopic(f"unknown partition {topic}-{partition}") from None
        return PartitionState.from_json(data)

    def partition_states(
        self, topic: str, partitions: Iterable[int], watch: Callable[[WatchedEvent], None] | None = None
    ) -> dict[int, tuple[PartitionState, int]]:
        """The states of many partitions of a topic with their znode versions, read in one
        pipelined round (every request sent before the first answer is awaited: one round trip,
        not one per partition); a partition without a state node is left out. ``watch`` is set on
        each node read (a ZooKeeper data watch)."""
        pending = [(p, self.zk.get_async(self.layout.partition_state(topic, p), watch=watch)) for p in partitions]
        states: dict[int, tuple[PartitionState, int]] = {}
        for p, result in pending:
            try:
                data, stat = result.get()
            except NoNodeError:
                continue
            states[p] = (PartitionState.from_json(data), stat.version)
        return states

    def set_partition_state(self, topic: str, partition: int, state: PartitionState) -> None:
        self.zk.set(self.layout.partition_state(topic, partition), state.to_json())

    # ----------------------------------------------------------------- consumer groups
    def commit_offsets(self, group: str, offsets: Mapping[tuple[str, int], int]) -> None:
        """Store each (topic, partition)'s committed offset: the next offset the group will read."""
        check_group_id(group)
        for (topic, partition), offset in offsets.items():
            if offset < 0:
                raise InvalidRequest(f"cannot commit negative offset {offset} for {topic}-{partition}")
            path = self.layout.committed_offset(group, topic, partition)
            value = str(int(offset)).encode()
            if self.zk.exists(path):
                self.zk.set(path, value)
            else:
                self.zk.create(path, value, makepath=True)

    def committed_offsets(self, group: str, topic: str | None = None) -> dict[tuple[str, int], int]:
        """The group's committed offsets, for one topic or all."""
        base = self.layout.group_offsets(group)
        if not self.zk.exists(base):
            return {}
        out: dict[tuple[str, int], int] = {}
        topics: Iterable[str] = [topic] if topic else self.zk.get_children(base)
        for t in topics:
            try:
                partitions = self.zk.get_children(f"{base}/{t}")
            except NoNodeError:
                continue
            reads = [(int(p), self.zk.get_async(f"{base}/{t}/{p}")) for p in partitions]  # one round of round trips
            for p, read in reads:
                try:
                    data, _ = read.get()
                except NoNodeError:  # removed meanwhile
                    continue
                out[(t, p)] = int(data.decode())
        return out

    def groups(self) -> list[str]:
        return sorted(self.zk.get_children(self.layout.consumers))

    def delete_committed_offsets(self, group: str, partitions: Iterable[tuple[str, int]] | None = None) -> int:
        """Remove the group's committed offsets of ``partitions`` (None: every one, then the
        group's znode unless members still hold something under it); how many there were."""
        base = self.layout.group_offsets(group)
        removed = 0
        if partitions is None:
            try:
                topics = self.zk.get_children(base)
            except NoNodeError:
                topics = []
            for topic in topics:
                with contextlib.suppress(NoNodeError):
                    removed += len(self.zk.get_children(f"{base}/{topic}"))
            with contextlib.suppress(NoNodeError):
                self.zk.delete(base, recursive=True)
            with contextlib.suppress(NoNodeError, NotEmptyError):
                self.zk.delete(self.layout.group(group))
            return removed
        topics_touched = set()
        for topic, partition in partitions:
            with contextlib.suppress(NoNodeError):
                self.zk.delete(self.layout.committed_offset(group, topic, partition))
                removed += 1
            topics_touched.add(topic)
        for topic in topics_touched:  # a topic left without offsets goes too
            with contextlib.suppress(NoNodeError, NotEmptyError):
                self.zk.delete(f"{base}/{check_topic_name(topic)}")
        return removed

    def group_members(self, group: str) -> dict[tuple[str, ...], list[str]]:
        """The group's live members by the topics they read: the identifiers in each set of
        topics' ``SetPartitioner`` party (kazoo's ``ShallowParty``)."""
        base = self.layout.group_partitioners(group)
        try:
            names = self.zk.get_children(base)
        except NoNodeError:
            return {}
        out: dict[tuple[str, ...], list[str]] = {}
        for name in names:
            members = sorted(self.zk.ShallowParty(f"{base}/{name}/party"))
            if members:
                out[self.layout.partitioner_topics(name)] = members
        return out

    def require_group(self, group: str) -> None:
        if not self.zk.exists(self.layout.group(group)):
            raise UnknownGroup(f"unknown consumer group {group!r}")
