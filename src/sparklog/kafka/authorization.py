"""What each Kafka API needs to be allowed: one row per API key, Kafka's (operation, resource) pairs
as ``KafkaApis`` authorizes them, decided by the broker's one authorizer (the same ACLs, super
users and principals as the Flight listener's).

Kafka decides most APIs item by item (a Produce's refused topic gets ``TOPIC_AUTHORIZATION_FAILED``
in its own partitions' answers while the others are written), so a row says which operation on
which resource type the API needs; the handler asks :meth:`ApiPermissions.allowed` for each topic,
group or the cluster it touches, and the operation comes from the row, never from the handler. A
handler asking about a resource type its row does not list is a bug (an AssertionError), and the
listener refuses (closes) an API without a row when it checks ACLs. Without
``authorizer.enabled`` every principal may do everything, as on the Flight listener.
"""

from __future__ import annotations

import dataclasses
from typing import Protocol

from sparklog.errors import (
    AuthorizationFailed,
    ClusterAuthorizationFailed,
    GroupAuthorizationFailed,
    TopicAuthorizationFailed,
)
from sparklog.kafka import error_codes
from sparklog.security.acls import CLUSTER_NAME, Operation, ResourceType

TOPIC, GROUP, CLUSTER = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
READ, WRITE, CREATE, DELETE = Operation.READ, Operation.WRITE, Operation.CREATE, Operation.DELETE
ALTER, DESCRIBE = Operation.ALTER, Operation.DESCRIBE
DESCRIBE_CONFIGS, ALTER_CONFIGS = Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS


@dataclasses.dataclass(frozen=True)
class Need:
    """``operation`` on resources of ``resource_type`` (``of``: which ones, in words)."""

    operation: Operation
    resource_type: ResourceType
    of: str


@dataclasses.dataclass(frozen=True)
class ApiRule:
    """What one API needs; none (ApiVersions, the SASL exchange) means anyone may call it."""

    needs: tuple[Need, ...] = ()

    def operation(self, resource_type: ResourceType, operation: Operation | None = None) -> Operation:
        """The operation this API needs on ``resource_type`` (``operation``: one of several it
        lists for that type); an AssertionError if the row does not list it (a handler's bug)."""
        for need in self.needs:
            if need.resource_type is resource_type and (operation is None or need.operation is operation):
                return need.operation
        raise AssertionError(f"the API's row lists no {operation or 'operation'} on {resource_type.label}s")


def _rule(*needs: tuple[Operation, ResourceType, str]) -> ApiRule:
    return ApiRule(tuple(Need(*need) for need in needs))


# API key -> rule (Kafka's API keys; the names are those of Kafka's message schemas)
KAFKA_APIS: dict[int, ApiRule] = {
    0: _rule((WRITE, TOPIC, "each topic written")),  # Produce
    1: _rule((READ, TOPIC, "each topic fetched")),  # Fetch (a consumer's)
    2: _rule((DESCRIBE, TOPIC, "each topic")),  # ListOffsets
    3: _rule(  # Metadata: topics not described are left out of a listing, refused when named
        (DESCRIBE, TOPIC, "each topic"),
        (CREATE, CLUSTER, "the cluster, to create topics it names (or Create on each topic)"),
        (CREATE, TOPIC, "each topic created"),
    ),
    8: _rule((READ, GROUP, "the group"), (READ, TOPIC, "each topic committed")),  # OffsetCommit
    9: _rule((DESCRIBE, GROUP, "the group"), (DESCRIBE, TOPIC, "each topic")),  # OffsetFetch
    10: _rule((DESCRIBE, GROUP, "the group")),  # FindCoordinator (transactions are not served)
    11: _rule((READ, GROUP, "the group")),  # JoinGroup
    12: _rule((READ, GROUP, "the group")),  # Heartbeat
    13: _rule((READ, GROUP, "the group")),  # LeaveGroup
    14: _rule((READ, GROUP, "the group")),  # SyncGroup
    15: _rule((DESCRIBE, GROUP, "each group")),  # DescribeGroups
    16: _rule((DESCRIBE, CLUSTER, "the cluster, to list every group"), (DESCRIBE, GROUP, "each group listed")),
    17: ApiRule(),  # SaslHandshake
    18: ApiRule(),  # ApiVersions
    19: _rule((CREATE, CLUSTER, "the cluster (or Create on each topic)"), (CREATE, TOPIC, "each topic")),
    20: _rule((DELETE, TOPIC, "each topic")),  # DeleteTopics
    22: ApiRule(),  # InitProducerId: an id grants nothing (each Produce is checked); Kafka asks Write on any topic
    23: _rule((DESCRIBE, TOPIC, "each topic")),  # OffsetForLeaderEpoch (a consumer's)
    29: _rule((DESCRIBE, CLUSTER, "the cluster")),  # DescribeAcls
    30: _rule((ALTER, CLUSTER, "the cluster")),  # CreateAcls
    31: _rule((ALTER, CLUSTER, "the cluster")),  # DeleteAcls
    32: _rule((DESCRIBE_CONFIGS, TOPIC, "each topic"), (DESCRIBE_CONFIGS, CLUSTER, "the cluster, for a broker")),
    33: _rule((ALTER_CONFIGS, TOPIC, "each topic"), (ALTER_CONFIGS, CLUSTER, "the cluster, for a broker")),
    35: _rule((DESCRIBE, CLUSTER, "the cluster")),  # DescribeLogDirs
    36: ApiRule(),  # SaslAuthenticate
    37: _rule((ALTER, TOPIC, "each topic")),  # CreatePartitions
    42: _rule((DELETE, GROUP, "each group")),  # DeleteGroups
    44: _rule((ALTER_CONFIGS, TOPIC, "each topic"), (ALTER_CONFIGS, CLUSTER, "the cluster, for a broker")),
    47: _rule((DELETE, GROUP, "the group"), (READ, TOPIC, "each topic")),  # OffsetDelete
    48: _rule((DESCRIBE_CONFIGS, CLUSTER, "the cluster")),  # DescribeClientQuotas
    49: _rule((ALTER_CONFIGS, CLUSTER, "the cluster")),  # AlterClientQuotas
    50: _rule((DESCRIBE, CLUSTER, "the cluster")),  # DescribeUserScramCredentials
    51: _rule((ALTER, CLUSTER, "the cluster")),  # AlterUserScramCredentials
    60: _rule((DESCRIBE, CLUSTER, "the cluster, for authorized operations")),  # DescribeCluster
}


class Authorize(Protocol):
    """The broker's authorizer as the listener needs it."""

    def authorize(
        self, principal: str, host: str, operation: Operation, resource_type: ResourceType, name: str
    ) -> bool: ...


class ApiPermissions:
    """What the principal of one request may do, by its API's row: ``allowed(resource_type, name)``
    (``operation`` picks one of several the row lists for the type). ``authorizer`` None: everything
    is allowed (a broker without ``authorizer.enabled``); ``rule`` None: no row to check against
    (a request context made outside a listener, in tests)."""

    def __init__(self, rule: ApiRule | None, authorizer: Authorize | None, principal: str, host: str) -> None:
        self.rule = rule
        self.authorizer = authorizer
        self.principal = principal
        self.host = host

    def allowed(
        self, resource_type: ResourceType, name: str = CLUSTER_NAME, operation: Operation | None = None
    ) -> bool:
        if self.rule is None:
            return self.authorizer is None
        chosen = self.rule.operation(resource_type, operation)
        if self.authorizer is None:
            return True
        return self.authorizer.authorize(self.principal, self.host, chosen, resource_type, name)

    def refusal(self, resource_type: ResourceType, name: str = CLUSTER_NAME, operation: Operation | None = None) -> int:
        """Kafka's error code for a refusal (``TOPIC_AUTHORIZATION_FAILED``...); 0 when allowed."""
        try:
            self.check(resource_type, name, operation)
        except AuthorizationFailed as refused:
            return error_codes.error_code(refused)
        return error_codes.NONE

    def check(self, resource_type: ResourceType, name: str = CLUSTER_NAME, operation: Operation | None = None) -> None:
        """:meth:`allowed`, raising Kafka's refusal for the resource type when not
        (``User:alice may not Write topic 'events'``)."""
        if not self.allowed(resource_type, name, operation):
            chosen = self.rule.operation(resource_type, operation) if self.rule is not None else operation
            shown = "the cluster" if resource_type is CLUSTER else f"{resource_type.label} {name!r}"
            raise _REFUSALS.get(resource_type, AuthorizationFailed)(f"{self.principal} may not {chosen} {shown}")


_REFUSALS: dict[ResourceType, type[AuthorizationFailed]] = {
    TOPIC: TopicAuthorizationFailed,
    GROUP: GroupAuthorizationFailed,
    CLUSTER: ClusterAuthorizationFailed,
}
