"""What each Flight call needs to be allowed: the broker's one table of Kafka (operation, resource)
pairs per call.

Kafka's broker authorizes a request against (operation, resource) pairs before any of its work
starts, one rule per API. Here every Flight call (a ``do_put`` or ``do_get`` of one ``type``, or an
action) has one row in :data:`CALLS`, a rule that derives what the call needs from its request:

- :class:`Acl`: an operation on a resource (Read on topic ``orders``);
- :class:`AnyOf`: one of several (CreateTopics: Create on the cluster or on the topic);
- :class:`AsReplica`: the caller is broker N's own principal (and may ClusterAction on the
  cluster): replica fetches, and the follower's offsets-for-leader-epoch. The id must be a broker
  id (0 or more); a negative one is refused, a consumer's fetch is a call of its own.

:class:`~sparklog.broker.server.BrokerServer` asks :func:`needs` before the handler runs and
refuses a call whose type has no row, or whose request does not say what the rule needs to know.
Handlers are given the caller's permissions only where Kafka also decides item by item (a row's
``per_item``: a listing leaves out what the caller may not Describe, a many-partition
``list_offsets`` answers a refused partition with its own error) or message by message (a row's
``per_message``: an open stream checks again before each message, so a revoked ACL or an ended
session reaches it).
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Mapping
from typing import Any

from sparklog.broker.record_copy import MAX_SLICES, CopySlice
from sparklog.broker.replication.fetch_request import REPLICA_FETCH
from sparklog.broker.request_fields import int_field, topic_field
from sparklog.errors import InvalidRequest
from sparklog.names import check_group_id, check_topic_name, check_transactional_id
from sparklog.protocol import wire
from sparklog.protocol.multi_fetch import FETCH_MANY
from sparklog.security.acls import CLUSTER_NAME, Operation, ResourceType

TOPIC, GROUP, CLUSTER = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
TRANSACTIONAL_ID = ResourceType.TRANSACTIONAL_ID
FETCH = "fetch"  # a single-partition fetch: a do_get ticket without a type
CONSUMER = -1  # the replica id of a consumer's fetch (Kafka's)
MAX_NAMES = 100_000  # topics named by one request (bounds the work of checking them)


class Call(enum.StrEnum):
    PUT = "put"
    GET = "get"
    ACTION = "action"


@dataclasses.dataclass(frozen=True)
class Acl:
    """``operation`` on a resource: the ACLs must allow it."""

    operation: Operation
    resource_type: ResourceType
    name: str = CLUSTER_NAME


@dataclasses.dataclass(frozen=True)
class AnyOf:
    """One of ``options`` is enough."""

    options: tuple[Acl, ...]


@dataclasses.dataclass(frozen=True)
class AsReplica:
    """The caller must be broker ``replica_id`` itself (its registered principal) with ClusterAction
    on the cluster."""

    replica_id: int


Need = Acl | AnyOf | AsReplica
Needs = Callable[[Mapping[str, Any]], list[Need]]


@dataclasses.dataclass(frozen=True)
class Rule:
    needs: Needs
    per_item: str = ""  # what the handler also decides item by item
    per_message: str = ""  # what an open stream checks again before each message


# ----------------------------------------------------------------- reading what a rule needs to know
def _group(request: Mapping[str, Any]) -> str:
    return check_group_id(request.get("group"))


def _as_replica(replica_id: int) -> list[Need]:
    if replica_id < 0:
        raise InvalidRequest(f"a replica's fetch needs the fetching broker's id (0 or more), got {replica_id}")
    return [AsReplica(replica_id), Acl(Operation.CLUSTER_ACTION, CLUSTER)]


def _topic_keys(request: Mapping[str, Any], key: str) -> list[str]:
    value = request.get(key)
    if not isinstance(value, dict) or len(value) > MAX_NAMES:
        raise InvalidRequest(f"'{key}' must be a JSON object keyed by topic, of at most {MAX_NAMES} topics")
    return [check_topic_name(name) for name in value]


def _topic_list(request: Mapping[str, Any], key: str) -> list[str]:
    value = request.get(key)
    if not isinstance(value, list) or len(value) > MAX_NAMES:
        raise InvalidRequest(f"'{key}' must be a list of at most {MAX_NAMES} topic names")
    return [check_topic_name(name) for name in value]


# ----------------------------------------------------------------- the rules
def _fetch(request: Mapping[str, Any]) -> list[Need]:
    replica_id = int_field(request, "replica_id", CONSUMER)
    if replica_id == CONSUMER:
        return [Acl(Operation.READ, TOPIC, topic_field(request))]
    return _as_replica(replica_id)


def _offsets_for_leader_epoch(request: Mapping[str, Any]) -> list[Need]:
    """Kafka's OffsetForLeaderEpoch: ClusterAction for a follower, Describe on the topic for a consumer."""
    replica_id = int_field(request, "replica_id", CONSUMER)
    if replica_id == CONSUMER:
        return [Acl(Operation.DESCRIBE, TOPIC, topic_field(request))]
    return _as_replica(replica_id)


def _list_offsets(request: Mapping[str, Any]) -> list[Need]:
    if "partitions" in request:
        return []  # per partition, by the handler
    return [Acl(Operation.DESCRIBE, TOPIC, topic_field(request))]


def _copy_records(request: Mapping[str, Any]) -> list[Need]:
    """Read on the source partition's topic, Write on every target's."""
    slices = request.get("slices")
    if not isinstance(slices, list) or not 0 < len(slices) <= MAX_SLICES:
        raise InvalidRequest(f"'slices' must be a list of 1 to {MAX_SLICES} slices")
    needs: list[Need] = [Acl(Operation.READ, TOPIC, topic_field(request))]
    needs.extend(Acl(Operation.WRITE, TOPIC, CopySlice.parse(item).topic) for item in slices)
    return list(dict.fromkeys(needs))


def _offset_fetch(request: Mapping[str, Any]) -> list[Need]:
    needs: list[Need] = [Acl(Operation.DESCRIBE, GROUP, _group(request))]
    if request.get("topic") is not None:
        needs.append(Acl(Operation.DESCRIBE, TOPIC, topic_field(request)))
    return needs


def _group_and_topics(key: str, list_of_topics: bool) -> Needs:
    """Read on the group and on each topic the request names (OffsetCommit, JoinGroup)."""

    def needs(request: Mapping[str, Any]) -> list[Need]:
        topics = _topic_list(request, key) if list_of_topics else _topic_keys(request, key)
        return [Acl(Operation.READ, GROUP, _group(request)), *(Acl(Operation.READ, TOPIC, t) for t in topics)]

    return needs


def _on_group(operation: Operation) -> Needs:
    return lambda request: [Acl(operation, GROUP, _group(request))]


def _on_topic(operation: Operation, key: str = "topic") -> Needs:
    return lambda request: [Acl(operation, TOPIC, topic_field(request, key))]


def _create_topic(request: Mapping[str, Any]) -> list[Need]:
    name = topic_field(request, "name")
    return [AnyOf((Acl(Operation.CREATE, CLUSTER), Acl(Operation.CREATE, TOPIC, name)))]


def _sink_state(request: Mapping[str, Any]) -> list[Need]:
    """The Spark sink's state, as Kafka guards a transactional producer's: Describe to read, Write to change."""
    operation = Operation.DESCRIBE if request.get("op") == "read" else Operation.WRITE
    return [Acl(operation, TRANSACTIONAL_ID, check_transactional_id(request.get("sink")))]


def _on_cluster(operation: Operation) -> Needs:
    return lambda _request: [Acl(operation, CLUSTER)]


def _nothing(_request: Mapping[str, Any]) -> list[Need]:
    return []


CALLS: dict[tuple[Call, str], Rule] = {
    (Call.PUT, wire.PRODUCE): Rule(_on_topic(Operation.WRITE), per_message="Write on the topic"),
    (Call.PUT, wire.PRODUCE_MANY): Rule(_nothing, per_message="Write on each batch's topic"),
    (Call.GET, FETCH): Rule(_fetch, per_message="Read on the topic (a consumer's)"),
    (Call.GET, FETCH_MANY): Rule(_on_topic(Operation.READ), per_message="Read on the topic"),
    (Call.GET, REPLICA_FETCH): Rule(lambda request: _as_replica(int_field(request, "replica_id"))),
    (Call.ACTION, wire.PING): Rule(_nothing),
    (Call.ACTION, wire.LIST_OFFSETS): Rule(_list_offsets, per_item="Describe on each partition's topic"),
    (Call.ACTION, wire.OFFSETS_FOR_LEADER_EPOCH): Rule(_offsets_for_leader_epoch),
    (Call.ACTION, wire.COPY_RECORDS): Rule(_copy_records),
    (Call.ACTION, wire.METADATA): Rule(_nothing, per_item="Describe on each topic (left out or refused alone)"),
    (Call.ACTION, wire.OFFSET_COMMIT): Rule(_group_and_topics("offsets", list_of_topics=False)),
    (Call.ACTION, wire.OFFSET_FETCH): Rule(_offset_fetch, per_item="Describe on each topic of an unnamed one"),
    (Call.ACTION, wire.LIST_GROUPS): Rule(_nothing, per_item="Describe on each group"),
    (Call.ACTION, wire.DESCRIBE_GROUP): Rule(_on_group(Operation.DESCRIBE)),
    (Call.ACTION, wire.JOIN_GROUP): Rule(_group_and_topics("topics", list_of_topics=True)),
    (Call.ACTION, wire.GROUP_HEARTBEAT): Rule(_on_group(Operation.READ)),
    (Call.ACTION, wire.LEAVE_GROUP): Rule(_on_group(Operation.READ)),
    (Call.ACTION, wire.CREATE_TOPIC): Rule(_create_topic),
    (Call.ACTION, wire.DELETE_TOPIC): Rule(_on_topic(Operation.DELETE, "name")),
    (Call.ACTION, wire.ALTER_CONFIGS): Rule(_on_topic(Operation.ALTER, "name")),
    (Call.ACTION, wire.CREATE_PARTITIONS): Rule(_on_topic(Operation.ALTER, "name")),  # Kafka's: Alter on the topic
    (Call.ACTION, wire.REGISTER_SCHEMA): Rule(_on_topic(Operation.ALTER)),
    (Call.ACTION, wire.SINK_STATE): Rule(_sink_state),
    # administration (Kafka's: DescribeUserScramCredentials, DescribeAcls and
    # ListPartitionReassignments Describe Cluster; AlterUserScramCredentials, CreateAcls, DeleteAcls
    # and AlterPartitionReassignments Alter Cluster; client quotas DescribeConfigs / AlterConfigs)
    (Call.ACTION, wire.DESCRIBE_USER_SCRAM_CREDENTIALS): Rule(_on_cluster(Operation.DESCRIBE)),
    (Call.ACTION, wire.ALTER_USER_SCRAM_CREDENTIALS): Rule(_on_cluster(Operation.ALTER)),
    (Call.ACTION, wire.DESCRIBE_ACLS): Rule(_on_cluster(Operation.DESCRIBE)),
    (Call.ACTION, wire.CREATE_ACLS): Rule(_on_cluster(Operation.ALTER)),
    (Call.ACTION, wire.DELETE_ACLS): Rule(_on_cluster(Operation.ALTER)),
    (Call.ACTION, wire.DESCRIBE_CLIENT_QUOTAS): Rule(_on_cluster(Operation.DESCRIBE_CONFIGS)),
    (Call.ACTION, wire.ALTER_CLIENT_QUOTAS): Rule(_on_cluster(Operation.ALTER_CONFIGS)),
    (Call.ACTION, wire.ALTER_PARTITION_REASSIGNMENTS): Rule(_on_cluster(Operation.ALTER)),
    (Call.ACTION, wire.LIST_PARTITION_REASSIGNMENTS): Rule(_on_cluster(Operation.DESCRIBE)),
}


def call_type(call: Call, request: Mapping[str, Any], action: str = "") -> str:
    """The row a call is under: an action's name, a ``do_put``'s or ``do_get``'s ``type`` (a
    ``do_get`` without one is a single-partition fetch)."""
    if call is Call.ACTION:
        return action
    kind = request.get("type", FETCH if call is Call.GET else None)
    return kind if isinstance(kind, str) else repr(kind)


def needs(call: Call, name: str, request: Mapping[str, Any]) -> list[Need]:
    """What the call needs, from its row; :class:`InvalidRequest` for a call without one."""
    rule = CALLS.get((call, name))
    if rule is None:
        what = "action" if call is Call.ACTION else f"{call} type"
        raise InvalidRequest(f"unknown {what} {name!r:.100}")
    return rule.needs(request)
