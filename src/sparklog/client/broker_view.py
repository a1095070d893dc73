"""The cluster as brokers describe it: a client given ``bootstrap.servers`` asks any reachable broker
(the one that answered last, then the bootstrap servers, then every broker it learned of) for
metadata, group offsets and topic administration (the cluster actions of :mod:`sparklog.protocol.wire`),
and opens no ZooKeeper session.

Metadata is cached per topic (brokers, partition leaders and in-sync replicas, configs, value
schemas) and asked again when a caller wants it fresh (``refresh``: after ``NOT_LEADER``, an
unreachable or unknown broker, an unknown topic, as ``ClusterClient.call_leader`` does) or when it
is older than ``max_age_s`` (Kafka's ``metadata.max.age.ms``, here 5 s: a few small requests a
minute per topic in use). A refresh within ``MIN_REFRESH_S`` of the last one reuses it, so many
partitions refused at once cost one request.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pyarrow.flight as flight

from sparklog.client.cluster_address import parse_bootstrap_servers
from sparklog.client.cluster_view import TopicPartition
from sparklog.client.flight_clients import FlightClients
from sparklog.coordination.cluster import BrokerInfo, PartitionState, TopicMetadata, broker_info
from sparklog.errors import (
    BrokerNotAvailable,
    InvalidRequest,
    SparklogError,
    UnknownSchema,
    UnknownTopic,
    error_from_code,
)
from sparklog.protocol import wire
from sparklog.schemas.value_schema import ValueSchema
from sparklog.security.client_config import PLAINTEXT, ClientSecurity

METADATA_MAX_AGE_S = 5.0
MIN_REFRESH_S = 0.02
CALL_TIMEOUT_S = 15.0  # metadata, offsets, sink state: a frozen broker must not hang the client
ADMIN_TIMEOUT_S = 120.0  # creating or deleting a topic of thousands of partitions takes a while


@dataclasses.dataclass(frozen=True)
class _TopicEntry:
    fetched_at: float
    meta: TopicMetadata
    states: dict[int, PartitionState]
    schemas: list[ValueSchema]  # oldest first


def _topic_metadata(raw: Mapping[str, Any]) -> TopicMetadata:
    return TopicMetadata(
        str(raw["name"]),
        [[int(b) for b in r] for r in raw["replicas"]],
        {str(k): str(v) for k, v in raw["configs"].items()},
    )


class BrokerView:
    """A :class:`~sparklog.client.cluster_view.ClusterView` answered by brokers."""

    def __init__(
        self,
        bootstrap_servers: str,
        retry_timeout_s: float = 30.0,
        max_age_s: float = METADATA_MAX_AGE_S,
        security: ClientSecurity = PLAINTEXT,
        clients: FlightClients | None = None,
    ) -> None:
        """``security``: the client's TLS and SASL settings (bootstrap servers are its listeners).
        ``clients``: the Flight clients to ask brokers with (its cluster client's, so that the
        two share connections); by default its own."""
        self.bootstrap_servers = bootstrap_servers
        self.security = security
        self._bootstrap = [security.location(host, port) for host, port in parse_bootstrap_servers(bootstrap_servers)]
        self.retry_timeout_s = retry_timeout_s
        self.max_age_s = max_age_s
        self._owns_clients = clients is None
        self._clients = clients if clients is not None else FlightClients(security)
        self._last_good: str | None = None
        self._suspects: set[str] = set()  # asked last until they answer again
        self._brokers: dict[int, BrokerInfo] = {}
        self._topics: dict[str, _TopicEntry] = {}
        self._parsed: dict[tuple[str, int], ValueSchema] = {}
        self._lock = threading.RLock()

    # ------------------------------------------------------------------ calls
    def _drop(self, location: str) -> None:
        self._clients.forget(location)
        with self._lock:
            if self._last_good == location:
                self._last_good = None

    def _candidates(self) -> list[str]:
        with self._lock:
            known = [
                b.location_for(self.security.protocol)
                for b in self._brokers.values()
                if b.listens(self.security.protocol)
            ]
            first = [self._last_good] if self._last_good else []
            ordered = list(dict.fromkeys(first + self._bootstrap + known))
            return [c for c in ordered if c not in self._suspects] + [c for c in ordered if c in self._suspects]

    def suspect(self, location: str) -> None:
        with self._lock:
            self._suspects.add(location)
            if self._last_good == location:
                self._last_good = None

    def _ask(self, location: str, action: str, body: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        options = flight.FlightCallOptions(timeout=timeout_s)
        try:
            results = list(self._clients.get(location).do_action(flight.Action(action, wire.encode(body)), options))
        except flight.FlightError as exc:
            raise wire.from_flight_error(exc, location) from None
        if not results:
            raise BrokerNotAvailable(f"broker {location} answered {action} with nothing")
        return wire.decode(results[0].body)

    def call(self, action: str, body: dict[str, Any], timeout_s: float = CALL_TIMEOUT_S) -> dict[str, Any]:
        """Ask one broker: each candidate in turn; an unreachable one, or a retriable refusal
        (ZooKeeper out of the broker's reach, too many calls), moves on to the next; after a round
        with no answer, wait (with backoff) and go round again until ``retry_timeout_s``."""
        return self._call(action, body, timeout_s)[0]

    def call_at(self, location: str, action: str, body: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        """Ask that broker once (a group member's heartbeats go to the broker hosting it)."""
        try:
            return self._ask(location, action, body, timeout_s)
        except BrokerNotAvailable:
            self._drop(location)
            raise

    def _call(self, action: str, body: dict[str, Any], timeout_s: float) -> tuple[dict[str, Any], str]:
        """:meth:`call`'s answer, and the broker that gave it."""
        deadline = time.monotonic() + self.retry_timeout_s
        backoff = 0.05
        while True:
            error: SparklogError | None = None
            for location in self._candidates():
                try:
                    answer = self._ask(location, action, body, timeout_s)
                except SparklogError as exc:
                    if not exc.retriable:
                        raise
                    error = exc
                    if isinstance(exc, BrokerNotAvailable):
                        self._drop(location)
                    continue
                with self._lock:
                    self._last_good = location
                    self._suspects.discard(location)
                return answer, location
            if time.monotonic() + backoff > deadline:
                assert error is not None
                if isinstance(error, BrokerNotAvailable):
                    hint = ""
                    if not self.security.tls and "Socket closed" in str(error):
                        hint = " (if its listener uses TLS, set security.protocol to SSL or SASL_SSL)"
                    raise BrokerNotAvailable(
                        f"no broker of bootstrap.servers={self.bootstrap_servers} (or of the cluster) answered: "
                        f"{error}{hint}"
                    )
                raise error
            time.sleep(backoff)
            backoff = min(backoff * 2, 1.0)

    # ------------------------------------------------------------------ metadata
    def _schema(self, topic: str, raw: Mapping[str, Any]) -> ValueSchema:
        version, text = int(raw["version"]), str(raw["schema"])
        known = self._parsed.get((topic, version))
        if known is None or known.json != text:
            known = self._parsed[(topic, version)] = ValueSchema.parse(text, version=version, topic=topic)
        return known

    def _fetch(self, topics: list[str] | None, describe: bool = True) -> list[dict[str, Any]]:
        """Ask for metadata (of ``topics``, all if None); the brokers and every described topic
        are cached; returns the topics' entries as answered."""
        answer = self.call(wire.METADATA, {"topics": topics, "describe": describe})
        now = time.monotonic()
        with self._lock:
            self._brokers = {int(b["id"]): broker_info(int(b["id"]), b) for b in answer["brokers"]}
            for raw in answer["topics"] if describe else ():
                name = raw["name"]
                if "error" in raw:
                    self._topics.pop(name, None)
                    continue
                states = {
                    p: PartitionState(int(s["leader"]), int(s["leader_epoch"]), [int(b) for b in s["isr"]])
                    for p, s in enumerate(raw["partitions"])
                    if s is not None
                }
                schemas = [self._schema(name, s) for s in raw.get("schemas", [])]
                self._topics[name] = _TopicEntry(now, _topic_metadata(raw), states, schemas)
        return answer["topics"]

    def _entry(self, name: str, refresh: bool = False) -> _TopicEntry:
        with self._lock:
            entry = self._topics.get(name)
            age = time.monotonic() - entry.fetched_at if entry is not None else None
            if age is not None and (age < MIN_REFRESH_S or (not refresh and age < self.max_age_s)):
                return entry  # type: ignore[return-value]
            try:
                raw = self._fetch([name])[0]
            except BrokerNotAvailable:
                if entry is not None and not refresh:
                    return entry  # too old, but the brokers are out of reach: better than nothing
                raise
            if "error" in raw:
                raise error_from_code(raw["error"], raw["message"])
            return self._topics[name]

    def brokers(self) -> dict[int, BrokerInfo]:
        self._fetch([])
        return dict(self._brokers)

    def controller_id(self) -> int:
        """The active controller's broker id (-1: none right now), as a broker reads it."""
        return int(self.call(wire.METADATA, {"topics": [], "describe": False, "controller": True})["controller_id"])

    def topics(self) -> list[str]:
        return sorted(str(t["name"]) for t in self._fetch(None, describe=False))

    def topic(self, name: str, refresh: bool = False) -> TopicMetadata:
        return self._entry(name, refresh).meta

    def leader(self, topic: str, partition: int, refresh: bool = False) -> tuple[int, BrokerInfo | None]:
        entry = self._entry(topic, refresh)
        state = entry.states.get(partition)
        if state is None:
            if not 0 <= partition < entry.meta.partitions:
                raise UnknownTopic(f"topic {topic!r} has no partition {partition} (it has {entry.meta.partitions})")
            raise UnknownTopic(f"unknown partition {topic}-{partition}")
        return state.leader, self._brokers.get(state.leader)

    def partition_states(self, topic: str) -> dict[int, PartitionState]:
        return dict(self._entry(topic, refresh=True).states)

    def value_schema(self, topic: str) -> ValueSchema | None:
        schemas = self._entry(topic).schemas
        return schemas[-1] if schemas else None

    def schema_lookup(self, topic: str) -> Callable[[bytes], ValueSchema]:
        def lookup(fingerprint: bytes) -> ValueSchema:
            for refresh in (False, True):  # a version registered since the last metadata: ask again
                hits = [s for s in self._entry(topic, refresh).schemas if s.fingerprint == fingerprint]
                if hits:
                    return max(hits, key=lambda s: s.version)
            raise UnknownSchema(f"topic {topic!r} has no schema version with fingerprint {fingerprint.hex()}")

        return lookup

    def schemas(self, topic: str) -> list[ValueSchema]:
        return list(self._entry(topic, refresh=True).schemas)

    # ------------------------------------------------------------------ consumer groups
    def commit_offsets(self, group: str, offsets: Mapping[TopicPartition, int]) -> None:
        by_topic: dict[str, dict[str, int]] = {}
        for (topic, partition), offset in offsets.items():
            by_topic.setdefault(topic, {})[str(partition)] = int(offset)
        self.call(wire.OFFSET_COMMIT, {"group": group, "offsets": by_topic})

    def committed_offsets(self, group: str, topic: str | None = None) -> dict[TopicPartition, int]:
        body: dict[str, Any] = {"group": group}
        if topic is not None:
            body["topic"] = topic
        answer = self.call(wire.OFFSET_FETCH, body)
        return {(t, int(p)): int(o) for t, parts in answer["offsets"].items() for p, o in parts.items()}

    def groups(self) -> list[str]:
        return [str(g) for g in self.call(wire.LIST_GROUPS, {})["groups"]]

    def group_members(self, group: str) -> dict[tuple[str, ...], list[str]]:
        answer = self.call(wire.DESCRIBE_GROUP, {"group": group})
        return {tuple(str(t) for t in e["topics"]): [str(m) for m in e["members"]] for e in answer["members"]}

    def join_group(
        self, group: str, topics: list[str], partitions: list[str], session_timeout_ms: int
    ) -> tuple[dict[str, Any], str]:
        """A new member of ``group`` hosted by some broker (:mod:`sparklog.broker.group_members`):
        the answer (``member_id``, ``zookeeper_session_timeout_ms``) and that broker's location."""
        body = {"group": group, "topics": topics, "partitions": partitions, "session_timeout_ms": session_timeout_ms}
        return self._call(wire.JOIN_GROUP, body, CALL_TIMEOUT_S)

    def group_heartbeat(
        self, location: str, group: str, member_id: str, released: bool, timeout_s: float
    ) -> dict[str, Any]:
        """The member's state, from the broker hosting it (UnknownMemberId if it does not)."""
        body = {"group": group, "member_id": member_id, "released": released}
        return self.call_at(location, wire.GROUP_HEARTBEAT, body, timeout_s)

    def leave_group(self, location: str, group: str, member_id: str, timeout_s: float) -> None:
        self.call_at(location, wire.LEAVE_GROUP, {"group": group, "member_id": member_id}, timeout_s)

    # ------------------------------------------------------------------ administration
    def _forget(self, name: str) -> None:
        with self._lock:
            self._topics.pop(name, None)

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
        if isinstance(value_schema, ValueSchema):
            value_schema = value_schema.json
        body = {
            "name": name,
            "partitions": partitions,
            "replication_factor": replication_factor,
            "configs": {str(k): str(v) for k, v in (configs or {}).items()},
            "value_schema": value_schema,
            "internal": internal,
        }
        self._forget(name)
        return _topic_metadata(self.call(wire.CREATE_TOPIC, body, ADMIN_TIMEOUT_S))

    def delete_topic(self, name: str, *, internal: bool = False) -> None:
        self._forget(name)
        self.call(wire.DELETE_TOPIC, {"name": name, "internal": internal}, ADMIN_TIMEOUT_S)

    def alter_topic_configs(
        self, name: str, configs: Mapping[str, Any], *, delete: Sequence[str] = (), internal: bool = False
    ) -> TopicMetadata:
        body: dict[str, Any] = {
            "name": name,
            "configs": {str(k): str(v) for k, v in configs.items()},
            "internal": internal,
        }
        if delete:
            body["delete"] = [str(k) for k in delete]
        self._forget(name)
        meta = _topic_metadata(self.call(wire.ALTER_CONFIGS, body, ADMIN_TIMEOUT_S))
        kept = sorted(k for k in delete if k in meta.configs)
        if kept:  # a broker that predates deleting ignores the list
            raise InvalidRequest(f"the broker did not remove {', '.join(kept)} (is it older than this client?)")
        return meta

    def create_partitions(self, name: str, total: int, *, internal: bool = False) -> TopicMetadata:
        self._forget(name)
        body = {"name": name, "partitions": total, "internal": internal}
        return _topic_metadata(self.call(wire.CREATE_PARTITIONS, body, ADMIN_TIMEOUT_S))

    def register_schema(self, topic: str, schema: Any) -> ValueSchema:
        if isinstance(schema, ValueSchema):
            schema = schema.json
        if not isinstance(schema, str | dict):
            raise InvalidRequest(f"a value schema is Avro schema JSON (text or object), got {type(schema).__name__}")
        answer = self.call(wire.REGISTER_SCHEMA, {"topic": topic, "schema": schema})
        self._forget(topic)
        return ValueSchema.parse(answer["schema"], version=int(answer["version"]), topic=topic)

    # ------------------------------------------------------------------ the Spark sink's state
    def read_sink_state(self, sink_id: str) -> tuple[dict[str, Any] | None, int | None]:
        answer = self.call(wire.SINK_STATE, {"op": "read", "sink": sink_id})
        version = answer.get("version")
        return answer.get("state"), None if version is None else int(version)

    def write_sink_state(self, sink_id: str, state: dict[str, Any], version: int | None) -> int:
        answer = self.call(wire.SINK_STATE, {"op": "write", "sink": sink_id, "state": state, "version": version})
        return int(answer["version"])

    def delete_sink_state(self, sink_id: str, version: int | None) -> None:
        self.call(wire.SINK_STATE, {"op": "delete", "sink": sink_id, "version": version})

    def close(self) -> None:
        if self._owns_clients:
            self._clients.close()
