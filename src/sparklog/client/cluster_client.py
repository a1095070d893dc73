"""What every client shares: ZooKeeper metadata with caches, and Flight connections to brokers."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

import pyarrow.flight as flight
from kazoo.protocol.states import EventType, WatchedEvent
from kazoo.recipe.watchers import ChildrenWatch

from sparklog import wire
from sparklog.coordination.cluster import BrokerInfo, ClusterMetadata, PartitionState, TopicMetadata
from sparklog.errors import BrokerNotAvailable, RequestTimedOut, SparklogError
from sparklog.schemas.registry import SchemaRegistry
from sparklog.schemas.value_schema import ValueSchema
from sparklog.security.client_config import PLAINTEXT, ClientSecurity

DEFAULT_ZOOKEEPER = "127.0.0.1:2181"
FETCH_CONNECTIONS = 8  # per broker: fetches of different partitions spread over this many connections


def fetch_connection(partition: int) -> int:
    """The connection (:meth:`ClusterClient.flight`) fetches of ``partition`` use."""
    return 1 + partition % FETCH_CONNECTIONS


T = TypeVar("T")


class ClusterClient:
    """Finds partition leaders through ZooKeeper and keeps one Flight client per broker.

    Broker membership and each used partition's state are followed by ZooKeeper watches, so a
    broker that goes away or comes back, or a new leader, is picked up without restarting the
    client; ``call_leader`` also refreshes and retries on ``NotLeader`` or an unreachable broker.
    """

    def __init__(
        self,
        zookeeper: str = DEFAULT_ZOOKEEPER,
        retries: int | None = None,
        retry_backoff_s: float = 0.05,
        session_timeout_s: float = 10.0,
        retry_timeout_s: float = 30.0,
        security: ClientSecurity = PLAINTEXT,
    ) -> None:
        self.security = security
        self.cluster = ClusterMetadata(zookeeper, timeout=session_timeout_s).start()
        self.retries = retries
        self.retry_timeout_s = retry_timeout_s
        self.retry_backoff_s = retry_backoff_s
        self._topics: dict[str, TopicMetadata] = {}
        self._leaders: dict[tuple[str, int], int] = {}
        self._brokers: dict[int, BrokerInfo] = {}
        self._clients: dict[tuple[str, int], flight.FlightClient] = {}  # (location, connection)
        self._lock = threading.Lock()
        self._watched: set[tuple[str, int]] = set()
        self._state_paths: dict[str, tuple[str, int]] = {}  # a followed state's znode -> its partition
        self._registry: SchemaRegistry | None = None
        self._value_schemas: dict[str, ValueSchema | None] = {}
        ChildrenWatch(self.cluster.zk, self.cluster.layout.broker_ids, self._on_brokers)

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

    def _got_state(self, key: tuple[str, int], result: Any) -> None:
        try:
            data, _stat = result.get()
        except Exception:  # gone (a deleted topic) or the session is closing: looked up again when used
            self._leaders.pop(key, None)
            self._watched.discard(key)
            return
        self._leaders[key] = PartitionState.from_json(data).leader

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
        """Fingerprint -> version, for Avro single-object encoded values of a typed topic."""
        return self.registry.lookup(topic)

    def topic(self, name: str, refresh: bool = False) -> TopicMetadata:
        meta = None if refresh else self._topics.get(name)
        if meta is None:
            meta = self._topics[name] = self.cluster.topic(name)
        return meta

    def leader(self, topic: str, partition: int, refresh: bool = False) -> BrokerInfo:
        """The broker leading a partition (BrokerNotAvailable if it is not live; UnknownTopic for a
        topic that does not exist, or is still being created: its first partitions' states exist
        before the topic is complete)."""
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
        if info is None:
            raise BrokerNotAvailable(f"the leader of {topic}-{partition} (broker {broker_id}) is not live")
        return info

    def flight(self, broker: BrokerInfo, connection: int = 0) -> flight.FlightClient:
        """The Flight client of a broker: connection 0 is the shared one; others (fetches of
        different partitions) each have their own TCP connection (``wire.flight_client``)."""
        location = broker.location_for(self.security.protocol)
        key = (location, connection)
        client = self._clients.get(key)
        if client is None:
            with self._lock:
                client = self._clients.get(key)
                if client is None:
                    client = wire.flight_client(location, own_connection=connection > 0, security=self.security)
                    self._clients[key] = client
        return client

    def forget(self, broker: BrokerInfo) -> None:
        """Drop the cached Flight clients of an unreachable broker (the next call connects anew).
        They are not closed here: another thread may be in a call on one; they close when collected."""
        with self._lock:
            location = broker.location_for(self.security.protocol)
            for key in [k for k in self._clients if k[0] == location]:
                del self._clients[key]

    def call_leader(
        self,
        topic: str,
        partition: int,
        request: Callable[[flight.FlightClient, BrokerInfo], T],
        deadline: float | None = None,
        connection: int = 0,
    ) -> T:
        """Run ``request`` against the partition's leader; on a retriable error (not the leader, an
        unreachable broker, too few in-sync replicas) refresh metadata and retry with backoff until
        ``deadline`` (a ``time.monotonic()`` value; default ``retry_timeout_s`` from now) would pass
        (or ``retries`` attempts, if set). ``connection``: which of the broker's connections
        (:meth:`flight`)."""
        if deadline is None:
            deadline = time.monotonic() + self.retry_timeout_s
        backoff = self.retry_backoff_s
        refresh = False
        attempt = 0
        reason: SparklogError | None = None  # the last answer a broker gave, if any
        while True:
            error: SparklogError
            try:
                broker = self.leader(topic, partition, refresh=refresh)
                return request(self.flight(broker, connection), broker)
            except SparklogError as exc:
                error = exc
            except flight.FlightError as exc:
                error = wire.from_flight_error(exc, f"the leader of {topic}-{partition}")
            if isinstance(error, RequestTimedOut) and reason is not None and time.monotonic() >= deadline:
                error = reason  # the last attempt only ran out of time: report why the others failed
            elif not isinstance(error, RequestTimedOut):
                reason = error
            attempt += 1
            out_of_time = time.monotonic() + backoff > deadline
            if not error.retriable or out_of_time or (self.retries is not None and attempt > self.retries):
                raise error
            if isinstance(error, BrokerNotAvailable):
                self._forget_leader(topic, partition)
            refresh = True
            time.sleep(backoff)
            if time.monotonic() >= deadline:  # overslept: the last error is the answer
                raise error
            backoff = min(backoff * 2, 0.25)

    def _forget_leader(self, topic: str, partition: int) -> None:
        broker_id = self._leaders.get((topic, partition))
        info = self._brokers.get(broker_id) if broker_id is not None else None
        if info is not None:
            self.forget(info)

    def action(self, topic: str, partition: int, name: str, body: dict[str, Any]) -> dict[str, Any]:
        """A JSON action on the partition's leader."""

        def run(client: flight.FlightClient, _broker: BrokerInfo) -> dict[str, Any]:
            results = list(client.do_action(flight.Action(name, wire.encode(body))))
            return wire.decode(results[0].body)

        return self.call_leader(topic, partition, run)

    def list_offsets(self, topic: str, partition: int, timestamp: int | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {"topic": topic, "partition": partition}
        if timestamp is not None:
            body["timestamp"] = timestamp
        return self.action(topic, partition, wire.LIST_OFFSETS, body)

    def list_offsets_many(
        self, partitions: Iterable[tuple[str, int]], timestamp: int | None = None
    ) -> dict[tuple[str, int], dict[str, Any]]:
        """:meth:`list_offsets` of many partitions: one action per leader broker; a partition its
        leader could not answer (it moved, ...) is asked again on its own, with retries."""
        by_leader: dict[BrokerInfo, list[tuple[str, int]]] = {}
        out: dict[tuple[str, int], dict[str, Any]] = {}
        for tp in partitions:
            try:
                by_leader.setdefault(self.leader(*tp), []).append(tp)
            except SparklogError:
                out[tp] = self.list_offsets(*tp, timestamp=timestamp)  # retried, or raises
        for broker, tps in by_leader.items():
            body: dict[str, Any] = {"partitions": [{"topic": t, "partition": p} for t, p in tps]}
            if timestamp is not None:
                for item in body["partitions"]:
                    item["timestamp"] = timestamp
            try:
                results = list(self.flight(broker).do_action(flight.Action(wire.LIST_OFFSETS, wire.encode(body))))
                answers = wire.decode(results[0].body)["results"]
            except flight.FlightError:
                answers = [None] * len(tps)
            for tp, answer in zip(tps, answers, strict=True):
                if answer is None or "error" in answer:
                    answer = self.list_offsets(*tp, timestamp=timestamp)
                out[tp] = answer
        return out

    def close(self) -> None:
        for client in self._clients.values():
            client.close()
        self._clients.clear()
        self.cluster.close()
