"""What every client shares: a view of the cluster (brokers, leaders, schemas, offsets, admin) and
Flight connections to brokers, with retries."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

import pyarrow.flight as flight

from sparklog.client.broker_view import BrokerView
from sparklog.client.cluster_address import DEFAULT_ZOOKEEPER, ClusterAddress
from sparklog.client.cluster_view import ClusterView
from sparklog.client.flight_clients import FlightClients
from sparklog.client.zookeeper_view import ZooKeeperView
from sparklog.coordination.cluster import BrokerInfo, ClusterMetadata, TopicMetadata
from sparklog.errors import BrokerNotAvailable, InvalidRequest, RequestTimedOut, SparklogError, error_from_code
from sparklog.protocol import wire
from sparklog.schemas.value_schema import ValueSchema
from sparklog.security.client_config import PLAINTEXT, ClientSecurity

__all__ = ["DEFAULT_ZOOKEEPER", "FETCH_CONNECTIONS", "ClusterClient", "fetch_connection"]

FETCH_CONNECTIONS = 4  # per broker: fetches of different partitions spread over this many connections


def fetch_connection(partition: int, leaders: int = 1) -> int:
    """The connection (:meth:`ClusterClient.flight`) that fetches of ``partition`` use, for a topic
    led by ``leaders`` brokers: ``FETCH_CONNECTIONS`` in all, and at least one per broker. One
    broker's partitions (every ``leaders``-th, as topics are created) spread over
    ``FETCH_CONNECTIONS // leaders`` of its connections, connection 0 (the client's requests) among
    them. Parallel fetch streams go faster up to about one per core, and every connection costs the
    client two threads (the fetch session's and gRPC's)."""
    per_broker = max(1, FETCH_CONNECTIONS // max(1, leaders))
    return (partition // max(1, leaders)) % per_broker


T = TypeVar("T")


def no_leader_message(topic: str, partition: int, replicas: Sequence[int] | None) -> str:
    """What a partition without a leader (leader -1: none of its in-sync replicas is on a live
    broker, so the controller could elect none) is reported as."""
    where = f"; its replicas are on broker(s) {','.join(map(str, replicas))}" if replicas else ""
    return f"{topic}-{partition} has no leader (the brokers of its in-sync replicas are down{where})"


class ClusterClient:
    """Finds partition leaders and keeps one Flight client per broker.

    With ``bootstrap_servers`` (``host:port,...``) everything comes from brokers
    (:class:`~sparklog.client.broker_view.BrokerView`: no ZooKeeper session at all); else from
    ZooKeeper (:class:`~sparklog.client.zookeeper_view.ZooKeeperView`, watches). Either way a
    broker that goes away or comes back, or a new leader, is picked up without restarting the
    client; ``call_leader`` refreshes and retries on ``NotLeader`` or an unreachable broker.
    """

    def __init__(
        self,
        zookeeper: str = DEFAULT_ZOOKEEPER,
        retries: int | None = None,
        retry_backoff_s: float = 0.05,
        session_timeout_s: float = 10.0,
        retry_timeout_s: float = 30.0,
        *,
        bootstrap_servers: str | None = None,
        security: ClientSecurity = PLAINTEXT,
    ) -> None:
        self.security = security
        self._clients = FlightClients(security)
        self.view: ClusterView
        if bootstrap_servers:
            self.view = BrokerView(
                bootstrap_servers, retry_timeout_s=retry_timeout_s, security=security, clients=self._clients
            )
        else:
            self.view = ZooKeeperView(zookeeper, session_timeout_s=session_timeout_s, retry_timeout_s=retry_timeout_s)
        self.address = ClusterAddress(zookeeper, bootstrap_servers or None, security)
        self.retries = retries
        self.retry_timeout_s = retry_timeout_s
        self.retry_backoff_s = retry_backoff_s

    @classmethod
    def connect(cls, address: ClusterAddress, **settings: Any) -> ClusterClient:
        """A client for ``address`` (:func:`sparklog.client.cluster_address.resolve`)."""
        return cls(
            address.zookeeper, bootstrap_servers=address.bootstrap_servers, security=address.security, **settings
        )

    @property
    def cluster(self) -> ClusterMetadata:
        """The ZooKeeper metadata of a client that uses ZooKeeper (an Admin's users, ACLs, quotas and
        reassignments: :class:`~sparklog.client.cluster_admin.ZooKeeperAdmin`)."""
        if not isinstance(self.view, ZooKeeperView):
            raise InvalidRequest(
                "this needs ZooKeeper (--zookeeper): a client given bootstrap.servers talks to brokers only"
            )
        return self.view.cluster

    def value_schema(self, topic: str) -> ValueSchema | None:
        """The latest value schema of a typed topic (None for a plain one)."""
        return self.view.value_schema(topic)

    def schema_lookup(self, topic: str) -> Callable[[bytes], ValueSchema]:
        """Fingerprint -> version, for Avro single-object encoded values of a typed topic."""
        return self.view.schema_lookup(topic)

    def topic(self, name: str, refresh: bool = False) -> TopicMetadata:
        return self.view.topic(name, refresh)

    def leader(self, topic: str, partition: int, refresh: bool = False) -> BrokerInfo:
        """The broker leading a partition (BrokerNotAvailable if it is not live; UnknownTopic for a
        topic that does not exist, or is still being created: its first partitions' states exist
        before the topic is complete)."""
        broker_id, info = self.view.leader(topic, partition, refresh)
        if info is None:
            if broker_id < 0:  # the controller found no live in-sync replica to elect
                try:
                    replicas = self.view.topic(topic).replicas[partition]
                except Exception:  # the message only
                    replicas = None
                raise BrokerNotAvailable(no_leader_message(topic, partition, replicas))
            raise BrokerNotAvailable(f"the leader of {topic}-{partition} (broker {broker_id}) is not live")
        return info

    def flight(self, broker: BrokerInfo, connection: int = 0) -> flight.FlightClient:
        """The Flight client of a broker's connection (:mod:`sparklog.client.flight_clients`):
        connection 0 carries requests, fetches spread over ``FETCH_CONNECTIONS``."""
        return self._clients.get(broker.location_for(self.security.protocol), connection)

    def suspect(self, broker: BrokerInfo) -> None:
        """A request to ``broker`` is overdue: metadata is asked of the other brokers first."""
        self.view.suspect(broker.location_for(self.security.protocol))

    def forget(self, broker: BrokerInfo) -> None:
        """Drop the Flight clients of an unreachable broker (the next call connects anew)."""
        self._clients.forget(broker.location_for(self.security.protocol))

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
        try:
            _broker_id, info = self.view.leader(topic, partition)
        except SparklogError:
            return
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
        out, failed = self.list_offsets_once(partitions, timestamp)
        for tp in failed:
            out[tp] = self.list_offsets(*tp, timestamp=timestamp)  # retried, or raises
        return out

    def list_offsets_once(
        self, partitions: Iterable[tuple[str, int]], timestamp: int | None = None
    ) -> tuple[dict[tuple[str, int], dict[str, Any]], dict[tuple[str, int], SparklogError]]:
        """:meth:`list_offsets` of many partitions, one action per leader broker and no retry:
        (the answers, the error of each partition that got none)."""
        by_leader: dict[BrokerInfo, list[tuple[str, int]]] = {}
        out: dict[tuple[str, int], dict[str, Any]] = {}
        failed: dict[tuple[str, int], SparklogError] = {}
        for tp in partitions:
            try:
                by_leader.setdefault(self.leader(*tp), []).append(tp)
            except SparklogError as exc:
                failed[tp] = exc
        for broker, tps in by_leader.items():
            body: dict[str, Any] = {"partitions": [{"topic": t, "partition": p} for t, p in tps]}
            if timestamp is not None:
                for item in body["partitions"]:
                    item["timestamp"] = timestamp
            try:
                results = list(self.flight(broker).do_action(flight.Action(wire.LIST_OFFSETS, wire.encode(body))))
                answers = wire.decode(results[0].body)["results"]
            except flight.FlightError as exc:
                error = wire.from_flight_error(exc, f"broker {broker.broker_id}")
                failed.update((tp, error) for tp in tps)
                continue
            for tp, answer in zip(tps, answers, strict=True):
                if "error" in answer:
                    failed[tp] = error_from_code(str(answer["error"]), str(answer.get("message", "")))
                else:
                    out[tp] = answer
        return out, failed

    def close(self) -> None:
        self.view.close()
        self._clients.close()
