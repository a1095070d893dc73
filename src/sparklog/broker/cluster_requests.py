"""A broker's answers to the cluster actions of clients that bootstrap from brokers (Kafka's
Metadata, OffsetCommit/OffsetFetch, CreateTopics/DeleteTopics/AlterConfigs/CreatePartitions; the wire is in
:mod:`sparklog.protocol.wire`): metadata from the broker's ZooKeeper view (live brokers and each topic's
configs and schemas as its watches keep them; partition states read in one pipelined round per
topic), group offsets written to and read from the same znodes as the ZooKeeper path
(``consumers/<g>/offsets/<t>/<p>``), and topic administration through the same
:class:`~sparklog.coordination.cluster.ClusterMetadata` code (checks, chunked all-or-nothing
creation) on the broker's own session. The administration actions (users, ACLs, client quotas,
partition reassignment) are :mod:`sparklog.broker.admin_requests`'s, answered here too.

Everything in a request is untrusted: names are checked against the naming rule before they become
a znode path, numbers must be 64-bit integers, lists and maps are bounded; a bad request gets a
typed error naming what is wrong, and ZooKeeper trouble leaves as the retriable
``COORDINATOR_NOT_AVAILABLE``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException
from kazoo.handlers.threading import KazooTimeoutError

from sparklog.broker.admin_requests import AdminRequests
from sparklog.broker.call_permissions import GROUP, TOPIC, UNRESTRICTED, CallPermissions
from sparklog.broker.group_members import GroupMembers
from sparklog.coordination.cluster import (
    NUM_PARTITIONS_MAX,
    BrokerInfo,
    ClusterMetadata,
    PartitionState,
    TopicMetadata,
)
from sparklog.coordination.sink_state import SinkStates
from sparklog.errors import AuthorizationFailed, CoordinatorNotAvailable, InvalidRequest, SparklogError
from sparklog.names import check_group_id, check_topic_name, check_transactional_id
from sparklog.protocol import wire
from sparklog.schemas.registry import SchemaRegistry
from sparklog.schemas.value_schema import ValueSchema
from sparklog.security.acls import Operation

MAX_TOPICS = NUM_PARTITIONS_MAX  # names in one metadata request
MAX_OFFSETS = 100_000  # partitions in one offset commit
MAX_CONFIGS = 100  # settings in one create or alter
MAX_SCHEMA_CHARS = 1 << 20
MAX_MEMBER_PARTITIONS = 100_000  # partitions a group member shares with the others

Answer = Callable[[dict[str, Any], CallPermissions], dict[str, Any]]


def _int(request: Mapping[str, Any], name: str, default: int | None = None) -> int:
    value = request.get(name, default)
    if value is None:
        raise InvalidRequest(f"request is missing '{name}'")
    if not wire.is_int64(value):
        raise InvalidRequest(f"'{name}' must be a 64-bit integer, got {value!r:.100}")
    return value


def _bool(request: Mapping[str, Any], name: str) -> bool:
    value = request.get(name, False)
    if not isinstance(value, bool):
        raise InvalidRequest(f"'{name}' must be true or false, got {value!r:.100}")
    return value


def _map(request: Mapping[str, Any], name: str, limit: int) -> dict[str, Any]:
    value = request.get(name)
    if not isinstance(value, dict):
        raise InvalidRequest(f"'{name}' must be a JSON object, got {type(value).__name__}")
    if len(value) > limit:
        raise InvalidRequest(f"'{name}' has {len(value)} entries; at most {limit} are allowed")
    return value


def _configs(request: Mapping[str, Any]) -> dict[str, str]:
    """Topic settings: names to strings (numbers are taken as their decimal text)."""
    if request.get("configs") is None:
        return {}
    out: dict[str, str] = {}
    for key, value in _map(request, "configs", MAX_CONFIGS).items():
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            raise InvalidRequest(f"config {key!r:.100} must be a string or a number, got {value!r:.100}")
        out[key] = str(value)
    return out


def _partition(text: object) -> int:
    if not isinstance(text, str) or not text.isdigit() or len(text) > 9:
        raise InvalidRequest(f"partition keys must be decimal partition numbers, got {text!r:.100}")
    return int(text)


def topic_json(meta: TopicMetadata) -> dict[str, Any]:
    return {"name": meta.name, "replicas": meta.replicas, "configs": meta.configs}


@contextlib.contextmanager
def zookeeper_errors(zk: KazooClient) -> Iterator[None]:
    """A client's request answered from ZooKeeper: refused at once while the broker is cut off
    from it (kazoo would hold the call until it reconnects), and a kazoo error or timeout during
    it raised as the retriable :class:`CoordinatorNotAvailable` (the Kafka listener's admin
    requests go through this too)."""
    if not zk.connected:
        raise CoordinatorNotAvailable(f"the broker is cut off from ZooKeeper (its connection is {zk.state}); retry")
    try:
        yield
    except (KazooException, KazooTimeoutError) as exc:
        raise CoordinatorNotAvailable(f"the broker could not reach ZooKeeper ({type(exc).__name__}); retry") from None


def _denied(name: str, may: CallPermissions, operation: Operation) -> dict[str, Any]:
    """The metadata entry of a topic the caller may not see (Kafka: TOPIC_AUTHORIZATION_FAILED)."""
    try:
        may.check(operation, TOPIC, name)
    except AuthorizationFailed as exc:
        return {"name": name, "error": exc.code, "message": str(exc)[: wire.MAX_ERROR_MESSAGE]}
    return {"name": name}


def _broker_entry(info: BrokerInfo) -> dict[str, Any]:
    """A live broker as the ``metadata`` answer lists it (its registration's shape: one address
    per listener, so a client picks the one of its ``security.protocol``)."""
    entry: dict[str, Any] = {"id": info.broker_id, "host": info.host, "port": info.port}
    if info.endpoints:
        entry["endpoints"] = {name: f"{host}:{port}" for name, host, port in info.endpoints}
    if info.metrics_url is not None:
        entry["metrics_url"] = info.metrics_url
    return entry


class ClusterRequests:
    """Answers the cluster actions; what it needs of the broker is given, nothing more: its
    ZooKeeper access (``cluster``, ``registry``), its watched view of the live brokers, of topics
    and of their partitions' states, each topic's value schema versions, and the group members it
    hosts for clients."""

    def __init__(
        self,
        cluster: ClusterMetadata,
        registry: SchemaRegistry,
        live_brokers: Callable[[], Mapping[int, BrokerInfo]],
        topic_metadata: Callable[[str], TopicMetadata],
        partition_states: Callable[[str, Iterable[int]], Mapping[int, tuple[PartitionState, int]]],
        value_schemas: Callable[[str], Sequence[ValueSchema]],
        members: GroupMembers,
    ) -> None:
        self.cluster = cluster
        self.registry = registry
        self.live_brokers = live_brokers
        self.topic_metadata = topic_metadata
        self.partition_states = partition_states
        self.value_schemas = value_schemas
        self.members = members
        self.sinks = SinkStates(cluster.zk, cluster.layout)
        self.actions: dict[str, Answer] = {
            wire.METADATA: self.metadata,
            wire.OFFSET_COMMIT: self.offset_commit,
            wire.OFFSET_FETCH: self.offset_fetch,
            wire.LIST_GROUPS: self.list_groups,
            wire.DESCRIBE_GROUP: self.describe_group,
            wire.CREATE_TOPIC: self.create_topic,
            wire.DELETE_TOPIC: self.delete_topic,
            wire.ALTER_CONFIGS: self.alter_configs,
            wire.CREATE_PARTITIONS: self.create_partitions,
            wire.REGISTER_SCHEMA: self.register_schema,
            wire.SINK_STATE: self.sink_state,
            wire.JOIN_GROUP: self.join_group,
            wire.GROUP_HEARTBEAT: self.group_heartbeat,
            wire.LEAVE_GROUP: self.leave_group,
            # users, ACLs, quotas and reassignments, through the ZooKeeper path's stores
            **AdminRequests(cluster).actions,
        }

    def answer(self, action: str, request: dict[str, Any], may: CallPermissions = UNRESTRICTED) -> dict[str, Any]:
        """The answer to one of :attr:`actions`. What an action needs is checked before it comes
        here (:mod:`sparklog.broker.call_authorization`); ``may`` is the caller's permissions for
        what Kafka also decides item by item: a listing leaves out the topics and groups the caller
        may not Describe, and a named topic it may not Describe is answered with its own error."""
        with zookeeper_errors(self.cluster.zk):
            return self.actions[action](request, may)

    # ----------------------------------------------------------------- metadata
    def metadata(self, request: dict[str, Any], may: CallPermissions) -> dict[str, Any]:
        names = request.get("topics")
        if names is None:  # every topic the caller may see
            names = [n for n in self.cluster.topics() if may.allowed(Operation.DESCRIBE, TOPIC, n)]
        elif not isinstance(names, list) or len(names) > MAX_TOPICS:
            raise InvalidRequest(f"'topics' must be null (all) or a list of at most {MAX_TOPICS} topic names")
        else:
            names = [check_topic_name(n) for n in names]
        describe = request.get("describe", True)
        if not isinstance(describe, bool):
            raise InvalidRequest(f"'describe' must be true or false, got {describe!r:.100}")
        brokers = [_broker_entry(b) for b in self.live_brokers().values()]
        topics = [
            (self._describe(name) if describe else {"name": name})
            if may.allowed(Operation.DESCRIBE, TOPIC, name)
            else _denied(name, may, Operation.DESCRIBE)
            for name in names
        ]
        answer: dict[str, Any] = {"brokers": brokers, "topics": topics}
        if request.get("controller") is True:  # asked for (a ZooKeeper read): `sparklog cluster health`
            answer["controller_id"] = self.cluster.controller_id()
        return answer

    def _describe(self, name: str) -> dict[str, Any]:
        try:
            meta = self.topic_metadata(name)
            states = self.partition_states(name, range(meta.partitions))
        except SparklogError as exc:
            return {"name": name, "error": exc.code, "message": str(exc)[: wire.MAX_ERROR_MESSAGE]}
        partitions: list[dict[str, Any] | None] = []
        for p in range(meta.partitions):
            found = states.get(p)
            state = found[0] if found else None
            partitions.append(
                None
                if state is None
                else {"leader": state.leader, "leader_epoch": state.leader_epoch, "isr": state.isr}
            )
        schemas = [{"version": s.version, "schema": s.json} for s in self.value_schemas(name)]
        return {**topic_json(meta), "partitions": partitions, "schemas": schemas}

    # ----------------------------------------------------------------- group offsets
    def offset_commit(self, request: dict[str, Any], may: CallPermissions) -> dict[str, Any]:
        group = check_group_id(request.get("group"))
        by_topic = _map(request, "offsets", MAX_OFFSETS)
        offsets: dict[tuple[str, int], int] = {}
        for topic, parts in by_topic.items():
            if not isinstance(parts, dict):
                raise InvalidRequest(f"'offsets' of topic {topic!r} must be a JSON object of partition: offset")
            for p in parts:
                offsets[(topic, _partition(p))] = _int(parts, p)
                if len(offsets) > MAX_OFFSETS:
                    raise InvalidRequest(f"an offset commit holds at most {MAX_OFFSETS} partitions")
        self.cluster.commit_offsets(group, offsets)  # the ZooKeeper path's checks (negative offsets...)
        return {}

    def offset_fetch(self, request: dict[str, Any], may: CallPermissions) -> dict[str, Any]:
        group = check_group_id(request.get("group"))
        topic = request.get("topic")
        if topic is not None:
            check_topic_name(topic)
        out: dict[str, dict[str, int]] = {}
        for (t, p), offset in sorted(self.cluster.committed_offsets(group, topic).items()):
            if topic is None and not may.allowed(Operation.DESCRIBE, TOPIC, t):
                continue
            out.setdefault(t, {})[str(p)] = offset
        return {"offsets": out}

    def list_groups(self, _request: dict[str, Any], may: CallPermissions) -> dict[str, Any]:
        return {"groups": [g for g in self.cluster.groups() if may.allowed(Operation.DESCRIBE, GROUP, g)]}

    def describe_group(self, request: dict[str, Any], may: CallPermissions) -> dict[str, Any]:
        """The group's live members by the topics they read (Describe on the group)."""
        group = check_group_id(request.get("group"))
        members = self.cluster.group_members(group)
        return {"members": [{"topics": list(topics), "members": ids} for topics, ids in sorted(members.items())]}

    # ----------------------------------------------------------------- group membership
    def join_group(self, request: dict[str, Any], may: CallPermissions) -> dict[str, Any]:
        """Kafka's JoinGroup: Read on the group and on every topic; the partitions are
        ``"<topic>:<partition>"`` of those topics, each existing."""
        group = check_group_id(request.get("group"))
        topics = request.get("topics")
        if not isinstance(topics, list) or not 0 < len(topics) <= MAX_TOPICS:
            raise InvalidRequest(f"'topics' must be a list of 1 to {MAX_TOPICS} topic names")
        counts: dict[str, int] = {}
        for name in topics:
            counts[check_topic_name(name)] = self.topic_metadata(name).partitions  # UnknownTopic
        items = request.get("partitions")
        if not isinstance(items, list) or not 0 < len(items) <= MAX_MEMBER_PARTITIONS:
            raise InvalidRequest(f"'partitions' must be a list of 1 to {MAX_MEMBER_PARTITIONS} '<topic>:<partition>'")
        checked: set[str] = set()
        for item in items:
            topic, _, p = item.rpartition(":") if isinstance(item, str) else ("", "", "")
            if topic not in counts:
                raise InvalidRequest(f"partition {item!r:.100} is not '<topic>:<partition>' of one of 'topics'")
            partition = _partition(p)
            if partition >= counts[topic]:
                raise InvalidRequest(f"topic {topic!r} has no partition {partition} (it has {counts[topic]})")
            checked.add(f"{topic}:{partition}")
        return self.members.join(group, sorted(counts), sorted(checked), _int(request, "session_timeout_ms"))

    def group_heartbeat(self, request: dict[str, Any], may: CallPermissions) -> dict[str, Any]:
        group = check_group_id(request.get("group"))
        return self.members.heartbeat(group, request.get("member_id"), _bool(request, "released"))

    def leave_group(self, request: dict[str, Any], may: CallPermissions) -> dict[str, Any]:
        group = check_group_id(request.get("group"))
        self.members.leave(group, request.get("member_id"))
        return {}

    # ----------------------------------------------------------------- topic administration
    def create_topic(self, request: dict[str, Any], may: CallPermissions) -> dict[str, Any]:
        name = check_topic_name(request.get("name"))
        schema = request.get("value_schema")
        if schema is not None and not (isinstance(schema, str | dict) and len(str(schema)) <= MAX_SCHEMA_CHARS):
            raise InvalidRequest("'value_schema' must be Avro schema JSON (text or object) of at most 1 MiB")
        meta = self.cluster.create_topic(
            name,
            _int(request, "partitions"),
            _int(request, "replication_factor", 1),
            _configs(request),
            None if schema is None else ValueSchema.parse(schema, topic=name),
            internal=_bool(request, "internal"),
        )
        return topic_json(meta)

    def delete_topic(self, request: dict[str, Any], may: CallPermissions) -> dict[str, Any]:
        name = check_topic_name(request.get("name"))
        self.cluster.delete_topic(name, internal=_bool(request, "internal"))
        return {}

    def alter_configs(self, request: dict[str, Any], may: CallPermissions) -> dict[str, Any]:
        name = check_topic_name(request.get("name"))
        if request.get("configs") is None:
            raise InvalidRequest("request is missing 'configs'")
        delete = request.get("delete", [])
        if not isinstance(delete, list) or len(delete) > MAX_CONFIGS or not all(isinstance(k, str) for k in delete):
            raise InvalidRequest(f"'delete' must be a list of at most {MAX_CONFIGS} config names")
        meta = self.cluster.alter_topic_configs(
            name, _configs(request), delete=delete, internal=_bool(request, "internal")
        )
        return topic_json(meta)

    def create_partitions(self, request: dict[str, Any], may: CallPermissions) -> dict[str, Any]:
        name = check_topic_name(request.get("name"))
        meta = self.cluster.create_partitions(name, _int(request, "partitions"), internal=_bool(request, "internal"))
        return topic_json(meta)

    def register_schema(self, request: dict[str, Any], may: CallPermissions) -> dict[str, Any]:
        topic = check_topic_name(request.get("topic"))
        schema = request.get("schema")
        if not isinstance(schema, str | dict) or len(str(schema)) > MAX_SCHEMA_CHARS:
            raise InvalidRequest("'schema' must be Avro schema JSON (text or object) of at most 1 MiB")
        self.cluster.topic(topic)  # UnknownTopic: schemas belong to existing topics
        registered = self.registry.register(topic, schema)
        return {"version": registered.version, "schema": registered.json}

    # ----------------------------------------------------------------- the Spark sink's state
    def sink_state(self, request: dict[str, Any], may: CallPermissions) -> dict[str, Any]:
        """Reads (Describe) or changes (Write) the state of a sink, whose id is its transactional id."""
        op = request.get("op")
        sink = check_transactional_id(request.get("sink"))
        if op == "read":
            state, version = self.sinks.read(sink)
            return {"state": state, "version": version}
        version = request.get("version")
        if version is not None:
            version = _int(request, "version")
        if op == "write":
            state = _map(request, "state", 1 << 20)
            return {"state": None, "version": self.sinks.write(sink, state, version)}
        if op == "delete":
            self.sinks.delete(sink, version)
            return {"state": None, "version": None}
        raise InvalidRequest(f"'op' must be read, write or delete, got {op!r:.100}")
