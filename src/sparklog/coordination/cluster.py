"""Cluster metadata in ZooKeeper: brokers, topics and their partition assignment, partition state,
and consumer groups' committed offsets. Used by brokers, clients and the CLI alike (through kazoo)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError

from sparklog.config import TopicConfig
from sparklog.coordination.zk_layout import GROUP_NAME, TOPIC_NAME, ZkLayout, split_connect_string
from sparklog.errors import (
    CoordinatorNotAvailable,
    InvalidRequest,
    TopicExists,
    UnknownGroup,
    UnknownTopic,
)


@dataclasses.dataclass(frozen=True)
class BrokerInfo:
    """A live broker and where its Flight server listens."""

    broker_id: int
    host: str
    port: int

    @property
    def location(self) -> str:
        return f"grpc+tcp://{self.host}:{self.port}"


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
    def config(self) -> TopicConfig:
        return TopicConfig.from_dict(self.configs)


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


class ClusterMetadata:
    """Reads and writes sparklog's ZooKeeper nodes (layout: :mod:`sparklog.coordination.zk_layout`)."""

    def __init__(self, connect: str, timeout: float = 10.0, client: KazooClient | None = None) -> None:
        hosts, root = split_connect_string(connect)
        self.connect = connect
        self.layout = ZkLayout(root)
        self._own_client = client is None
        self.zk = client or KazooClient(hosts=hosts, timeout=timeout)
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
        for path in (self.layout.broker_ids, self.layout.topics, self.layout.consumers, self.layout.schema_root):
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
    def register_broker(self, broker_id: int, host: str, port: int) -> None:
        """Announce a live broker (an ephemeral node: it disappears with the broker's session)."""
        data = json.dumps({"host": host, "port": port}).encode()
        try:
            self.zk.create(self.layout.broker(broker_id), data, ephemeral=True)
        except NodeExistsError:
            raise InvalidRequest(f"broker id {broker_id} is already registered by a live broker") from None

    def brokers(self) -> dict[int, BrokerInfo]:
        """The live brokers by id."""
        out: dict[int, BrokerInfo] = {}
        for child in self.zk.get_children(self.layout.broker_ids):
            try:
                data, _ = self.zk.get(self.layout.broker(int(child)))
            except NoNodeError:
                continue
            raw = json.loads(data)
            out[int(child)] = BrokerInfo(int(child), raw["host"], int(raw["port"]))
        return out

    # ----------------------------------------------------------------- topics
    def create_topic(
        self,
        name: str,
        partitions: int,
        replication_factor: int = 1,
        configs: Mapping[str, Any] | None = None,
        value_schema: Any = None,
    ) -> TopicMetadata:
        """Create a topic, assigning its partitions' replicas to the live brokers. With
        ``value_schema`` (Avro JSON) it is a typed topic: the schema is version 1, created in the
        same ZooKeeper transaction as the topic."""
        if not TOPIC_NAME.match(name):
            raise InvalidRequest(f"invalid topic name {name!r}: use 1-200 of [A-Za-z0-9._-]")
        if partitions < 1:
            raise InvalidRequest(f"--partitions must be at least 1, got {partitions}")
        if replication_factor < 1:
            raise InvalidRequest(f"--replication-factor must be at least 1, got {replication_factor}")
        config = TopicConfig.from_dict(configs or {})
        if config.min_insync_replicas > replication_factor:
            raise InvalidRequest(
                f"min.insync.replicas={config.min_insync_replicas} exceeds the replication factor {replication_factor}"
            )
        brokers = list(self.brokers())
        if len(brokers) < replication_factor:
            raise InvalidRequest(
                f"replication factor {replication_factor} needs that many live brokers; {len(brokers)} registered"
            )
        start = len(self.zk.get_children(self.layout.topics)) % len(brokers)
        replicas = assign_replicas(brokers, partitions, replication_factor, start)
        overrides = {k: str(v) for k, v in (configs or {}).items()}
        meta = TopicMetadata(name, replicas, overrides)
        tx = self.zk.transaction()
        tx.create(self.layout.topic(name), json.dumps({"replicas": replicas, "configs": overrides}).encode())
        tx.create(f"{self.layout.topic(name)}/partitions")
        tx.create(self.layout.schemas(name))  # brokers watch it for schema versions, typed or not
        if value_schema is not None:
            from sparklog.schemas.value_schema import ValueSchema

            parsed = ValueSchema.parse(value_schema, topic=name)  # refuses bad or unmappable schemas now
            tx.create(f"{self.layout.schemas(name)}/1", parsed.json.encode())
        for p, reps in enumerate(replicas):
            tx.create(f"{self.layout.topic(name)}/partitions/{p}")
            tx.create(self.layout.partition_state(name, p), PartitionState(reps[0], 0, list(reps)).to_json())
        results = tx.commit()
        if any(isinstance(r, NodeExistsError) for r in results):
            raise TopicExists(f"topic {name!r} already exists")
        failed = [r for r in results if isinstance(r, Exception)]
        if failed:
            raise InvalidRequest(f"could not create topic {name!r}: {failed[0]!r}")
        return meta

    def topics(self) -> list[str]:
        return sorted(self.zk.get_children(self.layout.topics))

    def topic(self, name: str) -> TopicMetadata:
        try:
            data, _ = self.zk.get(self.layout.topic(name))
        except NoNodeError:
            raise UnknownTopic(f"unknown topic {name!r}") from None
        raw = json.loads(data)
        return TopicMetadata(name, [list(map(int, r)) for r in raw["replicas"]], dict(raw.get("configs", {})))

    def delete_topic(self, name: str) -> None:
        self.topic(name)
        self.zk.delete(self.layout.topic(name), recursive=True)
        for path in (self.layout.schemas(name),):
            if self.zk.exists(path):
                self.zk.delete(path, recursive=True)

    def alter_topic_configs(self, name: str, configs: Mapping[str, Any]) -> TopicMetadata:
        """Change some configs of a topic (validated; the brokers pick the change up by watch)."""
        meta = self.topic(name)
        merged = {**meta.configs, **{k: str(v) for k, v in configs.items()}}
        TopicConfig.from_dict(merged)
        data, stat = self.zk.get(self.layout.topic(name))
        raw = json.loads(data)
        raw["configs"] = merged
        self.zk.set(self.layout.topic(name), json.dumps(raw).encode(), version=stat.version)
        return TopicMetadata(name, meta.replicas, merged)

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

    def set_partition_state(self, topic: str, partition: int, state: PartitionState) -> None:
        self.zk.set(self.layout.partition_state(topic, partition), state.to_json())

    # ----------------------------------------------------------------- consumer groups
    def commit_offsets(self, group: str, offsets: Mapping[tuple[str, int], int]) -> None:
        """Store each (topic, partition)'s committed offset: the next offset the group will read."""
        if not GROUP_NAME.match(group):
            raise InvalidRequest(f"invalid group name {group!r}: use 1-200 of [A-Za-z0-9._-]")
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
            for p in partitions:
                data, _ = self.zk.get(f"{base}/{t}/{p}")
                out[(t, int(p))] = int(data.decode())
        return out

    def groups(self) -> list[str]:
        return sorted(self.zk.get_children(self.layout.consumers))

    def require_group(self, group: str) -> None:
        if not self.zk.exists(f"{self.layout.consumers}/{group}"):
            raise UnknownGroup(f"unknown consumer group {group!r}")
