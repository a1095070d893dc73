"""The cluster as read from ZooKeeper (the client's own session): broker membership and each used
partition's state are followed by watches, a typed topic's schema versions too; offsets, topics and
the Spark sink's state are read and written in ZooKeeper directly. For admin tools run next to
ZooKeeper, and clients not given ``bootstrap.servers``.

ZooKeeper may be away for a while (restarted) while the session lives on: a consumer's offset
commits and reads wait for it (up to ``retry_timeout_s``, as a commit through brokers retries) and
a leader lookup fails with a retriable :class:`~sparklog.errors.CoordinatorNotAvailable` at once,
rather than a kazoo error ending the caller."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from kazoo.exceptions import ConnectionClosedError, ConnectionLoss, OperationTimeoutError, SessionExpiredError
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import EventType, KazooState, WatchedEvent
from kazoo.recipe.watchers import ChildrenWatch

from sparklog.client.cluster_view import TopicPartition
from sparklog.coordination.cluster import BrokerInfo, ClusterMetadata, PartitionState, TopicMetadata
from sparklog.coordination.sink_state import SinkStates
from sparklog.errors import CoordinatorNotAvailable
from sparklog.schemas.registry import SchemaRegistry
from sparklog.schemas.value_schema import ValueSchema

T = TypeVar("T")
RECONNECT_CHECK_S = 0.1  # how often a request waiting for ZooKeeper to be back looks


class ZooKeeperView:
    """A :class:`~sparklog.client.cluster_view.ClusterView` over a ZooKeeper session."""

    def __init__(self, zookeeper: str, session_timeout_s: float = 10.0, retry_timeout_s: float = 30.0) -> None:
        self.cluster = ClusterMetadata(zookeeper, timeout=session_timeout_s).start()
        self.retry_timeout_s = retry_timeout_s
        self._topics: dict[str, TopicMetadata] = {}
        self._leaders: dict[TopicPartition, int] = {}
        self._brokers: dict[int, BrokerInfo] = {}
        self._watched: set[TopicPartition] = set()
        self._state_paths: dict[str, TopicPartition] = {}  # a followed state's znode -> its partition
        self._registry: SchemaRegistry | None = None
        self._value_schemas: dict[str, ValueSchema | None] = {}
        self._lock = threading.Lock()
        self.sinks = SinkStates(self.cluster.zk, self.cluster.layout)
        ChildrenWatch(self.cluster.zk, self.cluster.layout.broker_ids, self._on_brokers)
        self.cluster.zk.add_listener(self._on_connection)

    # ------------------------------------------------------------------ ZooKeeper away
    def _now(self, call: Callable[[], T]) -> T:
        """``call`` (ZooKeeper requests) if the connection is up; CoordinatorNotAvailable (retriable)
        if it is not, or drops meanwhile (kazoo would hold a request until it is back)."""
        if not self.cluster.zk.connected:
            raise CoordinatorNotAvailable(f"ZooKeeper at {self.cluster.connect} cannot be reached now")
        try:
            return call()
        except ConnectionClosedError:
            raise  # this client was closed: not a reason to wait
        except (ConnectionLoss, OperationTimeoutError, SessionExpiredError, KazooTimeoutError) as exc:
            raise CoordinatorNotAvailable(
                f"ZooKeeper at {self.cluster.connect} cannot be reached now ({type(exc).__name__})"
            ) from None

    def _waiting(self, call: Callable[[], T]) -> T:
        """``call`` once ZooKeeper is reachable, tried again while it is not, for up to
        ``retry_timeout_s``; then its CoordinatorNotAvailable."""
        deadline = time.monotonic() + self.retry_timeout_s
        while True:
            try:
                return self._now(call)
            except CoordinatorNotAvailable:
                if time.monotonic() + RECONNECT_CHECK_S > deadline:
                    raise
            time.sleep(RECONNECT_CHECK_S)

    # ------------------------------------------------------------------ watches
    def _on_brokers(self, _children: list[str]) -> None:
        try:
            self._brokers = self.cluster.brokers()
        except Exception:  # the session is closing; the next lookup reads again
            self._brokers = {}

    def _follow_states(self, topic: str) -> None:
        """Read the state of every partition of a topic not followed yet, all at once (asynchronous
        reads: one round of ZooKeeper round trips, not one per partition), each followed from then
        on by a watch that is set again whenever it fires."""
        zk = self.cluster.zk
        reads = []
        for p in range(self.topic(topic).partitions):
            key = (topic, p)
            if key in self._watched:
                continue
            path = self.cluster.layout.partition_state(topic, p)
            self._watched.add(key)
            self._state_paths[path] = key
            reads.append((key, zk.get_async(path, watch=self._on_state_event)))
        for key, result in reads:
            self._got_state(key, result)

    def _got_state(self, key: TopicPartition, result: Any) -> None:
        try:
            data, _stat = result.get()
        except Exception:  # gone (a deleted topic) or the session is closing: looked up again when used
            self._leaders.pop(key, None)
            self._watched.discard(key)
            return
        self._leaders[key] = PartitionState.from_json(data).leader

    def _on_connection(self, state: str) -> None:
        """kazoo drops every watch when its connection drops (firing them without a path): once
        connected again, each followed partition state is read anew with a new watch, so a leader
        that changed meanwhile, or changes later, is seen (not only after refused fetches)."""
        if state != KazooState.CONNECTED:
            return
        for path, key in list(self._state_paths.items()):
            if key in self._watched:
                result = self.cluster.zk.get_async(path, watch=self._on_state_event)
                result.rawlink(lambda done, key=key: self._got_state(key, done))

    def _on_state_event(self, event: WatchedEvent) -> None:
        key = self._state_paths.get(event.path) if event.path else None
        if key is None:
            return
        if event.type == EventType.DELETED:
            self._leaders.pop(key, None)
            self._watched.discard(key)
            return
        result = self.cluster.zk.get_async(event.path, watch=self._on_state_event)
        result.rawlink(lambda done: self._got_state(key, done))

    # ------------------------------------------------------------------ metadata
    def brokers(self) -> dict[int, BrokerInfo]:
        self._brokers = self.cluster.brokers()
        return dict(self._brokers)

    def controller_id(self) -> int:
        """The active controller's broker id (-1: none right now)."""
        return self.cluster.controller_id()

    def topics(self) -> list[str]:
        return self.cluster.topics()

    def topic(self, name: str, refresh: bool = False) -> TopicMetadata:
        meta = None if refresh else self._topics.get(name)
        if meta is None:
            meta = self._topics[name] = self.cluster.topic(name)
        return meta

    def leader(self, topic: str, partition: int, refresh: bool = False) -> tuple[int, BrokerInfo | None]:
        known = None if refresh else self._leaders.get((topic, partition))
        info = None if known is None else self._brokers.get(known)
        if known is not None and info is not None:
            return known, info  # no ZooKeeper request: answered while ZooKeeper is away too
        return self._now(lambda: self._leader(topic, partition, refresh))

    def _leader(self, topic: str, partition: int, refresh: bool) -> tuple[int, BrokerInfo | None]:
        key = (topic, partition)
        broker_id = None if refresh else self._leaders.get(key)
        if broker_id is None and not refresh and key not in self._watched:
            self._follow_states(topic)
            broker_id = self._leaders.get(key)
        if broker_id is None:
            self.topic(topic)
            broker_id = self._leaders[key] = self.cluster.partition_state(topic, partition).leader
        info = None if refresh else self._brokers.get(broker_id)
        if info is None:
            self._brokers = self.cluster.brokers()
            info = self._brokers.get(broker_id)
        return broker_id, info

    def partition_states(self, topic: str) -> dict[int, PartitionState]:
        meta = self.cluster.topic(topic)
        return {p: state for p, (state, _v) in self.cluster.partition_states(topic, range(meta.partitions)).items()}

    @property
    def registry(self) -> SchemaRegistry:
        if self._registry is None:
            self._registry = SchemaRegistry.from_cluster(self.cluster)
        return self._registry

    def value_schema(self, topic: str) -> ValueSchema | None:
        """The latest value schema of a typed topic (None for a plain one), followed by a watch."""
        if topic in self._value_schemas:
            return self._value_schemas[topic]
        self.topic(topic)  # UnknownTopic for a topic that does not exist
        path = self.cluster.layout.schemas(topic)

        def on_versions(_children: list[str]) -> bool | None:
            try:
                self.registry.refresh(topic)
                self._value_schemas[topic] = self.registry.latest_or_none(topic)
            except Exception:  # the topic went away
                self._value_schemas.pop(topic, None)
                return False
            return None

        if self.cluster.zk.exists(path):
            ChildrenWatch(self.cluster.zk, path, on_versions)
        if topic not in self._value_schemas:
            self._value_schemas[topic] = self.registry.latest_or_none(topic)
        return self._value_schemas[topic]

    def schema_lookup(self, topic: str) -> Callable[[bytes], ValueSchema]:
        return self.registry.lookup(topic)

    def schemas(self, topic: str) -> list[ValueSchema]:
        self.cluster.topic(topic)
        return self.registry.all(topic)

    # ------------------------------------------------------------------ consumer groups
    def commit_offsets(self, group: str, offsets: Mapping[TopicPartition, int]) -> None:
        self._waiting(lambda: self.cluster.commit_offsets(group, offsets))

    def committed_offsets(self, group: str, topic: str | None = None) -> dict[TopicPartition, int]:
        return self._waiting(lambda: self.cluster.committed_offsets(group, topic))

    def groups(self) -> list[str]:
        return self.cluster.groups()

    def group_members(self, group: str) -> dict[tuple[str, ...], list[str]]:
        return self.cluster.group_members(group)

    # ------------------------------------------------------------------ administration
    def create_topic(
        self,
        name: str,
        partitions: int,
        replication_factor: int = 1,
        configs: Mapping[str, Any] | None = None,
        value_schema: Any = None,
        *,
        internal: bool = False,
    ) -> TopicMetadata:
        parsed = None if value_schema is None else ValueSchema.parse(value_schema, topic=name)  # refused now if bad
        return self.cluster.create_topic(name, partitions, replication_factor, configs, parsed, internal=internal)

    def delete_topic(self, name: str, *, internal: bool = False) -> None:
        self.cluster.delete_topic(name, internal=internal)

    def alter_topic_configs(
        self, name: str, configs: Mapping[str, Any], *, delete: Sequence[str] = (), internal: bool = False
    ) -> TopicMetadata:
        return self.cluster.alter_topic_configs(name, configs, delete=delete, internal=internal)

    def create_partitions(self, name: str, total: int, *, internal: bool = False) -> TopicMetadata:
        meta = self.cluster.create_partitions(name, total, internal=internal)
        self._topics.pop(name, None)
        return meta

    def register_schema(self, topic: str, schema: Any) -> ValueSchema:
        self.cluster.topic(topic)
        return self.registry.register(topic, schema)

    # ------------------------------------------------------------------ the Spark sink's state
    def read_sink_state(self, sink_id: str) -> tuple[dict[str, Any] | None, int | None]:
        return self.sinks.read(sink_id)

    def write_sink_state(self, sink_id: str, state: dict[str, Any], version: int | None) -> int:
        return self.sinks.write(sink_id, state, version)

    def delete_sink_state(self, sink_id: str, version: int | None) -> None:
        self.sinks.delete(sink_id, version)

    def suspect(self, location: str) -> None:
        """Nothing to do: ZooKeeper's watches, not brokers, keep this view current."""

    def close(self) -> None:
        self.cluster.close()
