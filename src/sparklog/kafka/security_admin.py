"""What the security administration handlers (ACLs, users' SCRAM credentials, client quotas) and
DescribeLogDirs share: Kafka's numbers for ACLs both ways, Kafka's SCRAM mechanism numbers, and the
refusal of a principal who may not administer the cluster.

**ACL numbers.** The ``int8`` fields of DescribeAcls, CreateAcls and DeleteAcls, as kafka-python's
``ACLResourceType``, ``ACLOperation``, ``ACLPermissionType`` and ``ACLResourcePatternType`` number
them, are turned into sparklog's ACL types (:mod:`sparklog.security.acls`) and back. sparklog's ACLs
are Kafka's without what it has no use for: the resource types DelegationToken and User (sparklog
has no delegation tokens) and the operations IdempotentWrite (Kafka 3 lets an idempotent producer
write with Write on the topic, as sparklog does), CreateTokens, DescribeTokens and TwoPhaseCommit.
An ACL naming one of those cannot be created (INVALID_REQUEST, saying what sparklog has); a filter
naming one matches nothing, since no such ACL can be stored. ANY selects ACLs in a filter only, as
MATCH (every pattern covering a resource name) does; a number Kafka does not have either is
INVALID_REQUEST.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from types import MappingProxyType
from typing import TypeVar

from kafka.protocol.admin import ACLOperation, ACLPermissionType, ACLResourcePatternType, ACLResourceType

from sparklog.errors import InvalidRequest
from sparklog.kafka import error_codes
from sparklog.kafka.api import Message, RequestContext
from sparklog.security.acls import (
    AclBinding,
    AclFilter,
    Operation,
    PatternType,
    Permission,
    ResourcePattern,
    ResourceType,
    parse_host,
)
from sparklog.security.principal import parse_principal

E = TypeVar("E", bound=enum.Enum)

ANY = int(ACLResourceType.ANY)  # the same number in each of the four enums
MATCH = int(ACLResourcePatternType.MATCH)

RESOURCE_TYPES = {
    ResourceType.TOPIC: int(ACLResourceType.TOPIC),
    ResourceType.GROUP: int(ACLResourceType.GROUP),
    ResourceType.CLUSTER: int(ACLResourceType.CLUSTER),
    ResourceType.TRANSACTIONAL_ID: int(ACLResourceType.TRANSACTIONAL_ID),
}
OPERATIONS = {
    Operation.ALL: int(ACLOperation.ALL),
    Operation.READ: int(ACLOperation.READ),
    Operation.WRITE: int(ACLOperation.WRITE),
    Operation.CREATE: int(ACLOperation.CREATE),
    Operation.DELETE: int(ACLOperation.DELETE),
    Operation.ALTER: int(ACLOperation.ALTER),
    Operation.DESCRIBE: int(ACLOperation.DESCRIBE),
    Operation.CLUSTER_ACTION: int(ACLOperation.CLUSTER_ACTION),
    Operation.DESCRIBE_CONFIGS: int(ACLOperation.DESCRIBE_CONFIGS),
    Operation.ALTER_CONFIGS: int(ACLOperation.ALTER_CONFIGS),
}
PERMISSIONS = {Permission.DENY: int(ACLPermissionType.DENY), Permission.ALLOW: int(ACLPermissionType.ALLOW)}
PATTERN_TYPES = {
    PatternType.LITERAL: int(ACLResourcePatternType.LITERAL),
    PatternType.PREFIXED: int(ACLResourcePatternType.PREFIXED),
}

# Kafka's values that sparklog has no ACLs of (User: 7 since Kafka 3; TwoPhaseCommit: 15 since Kafka 4)
ABSENT_RESOURCE_TYPES = {int(ACLResourceType.DELEGATION_TOKEN): "DelegationToken", 7: "User"}
ABSENT_OPERATIONS = {
    int(ACLOperation.IDEMPOTENT_WRITE): "IdempotentWrite",
    int(ACLOperation.CREATE_TOKENS): "CreateTokens",
    int(ACLOperation.DESCRIBE_TOKENS): "DescribeTokens",
    15: "TwoPhaseCommit",
}

NOTHING: Mapping[int, str] = MappingProxyType({})

# Kafka's ScramMechanism
SCRAM_SHA_256 = 1
SCRAM_SHA_512 = 2


class _Unheld(Exception):
    """A filter names a value of Kafka's that no ACL stored here can have: it matches nothing."""


def _filter_value(number: int, numbers: Mapping[E, int], kind: str, absent: Mapping[int, str] = NOTHING) -> E | None:
    """The sparklog value of Kafka's ``number`` in a filter (None: ANY; :class:`_Unheld`: a value
    of Kafka's no ACL here can have)."""
    if number == ANY:
        return None
    if number in absent:
        raise _Unheld()
    return _value(number, numbers, kind, absent, f", ANY ({ANY})")


def _value(number: int, numbers: Mapping[E, int], kind: str, absent: Mapping[int, str] = NOTHING, more: str = "") -> E:
    """The sparklog value of Kafka's ``number`` in an ACL (InvalidRequest naming the ones there are)."""
    for member, known in numbers.items():
        if known == number:
            return member
    listed = ", ".join(f"{member} ({known})" for member, known in numbers.items())
    if number in absent:
        raise InvalidRequest(f"{kind} {absent[number]} ({number}) is not supported: sparklog's are {listed}")
    if number == ANY:
        raise InvalidRequest(f"{kind} ANY ({ANY}) selects ACLs in a filter; an ACL names one of {listed}")
    raise InvalidRequest(f"unknown {kind} {number}; use one of {listed}{more}")


def binding_of(creation: Message) -> AclBinding:
    """The ACL of a CreateAcls creation (InvalidRequest naming what is wrong with it)."""
    resource_type = _value(creation.resource_type, RESOURCE_TYPES, "resource type", ABSENT_RESOURCE_TYPES)
    operation = _value(creation.operation, OPERATIONS, "operation", ABSENT_OPERATIONS)
    permission = _value(creation.permission_type, PERMISSIONS, "permission type")
    if creation.resource_pattern_type == MATCH:
        raise InvalidRequest(
            f"pattern type MATCH ({MATCH}) selects ACLs in a filter; an ACL's pattern is LITERAL (3) or PREFIXED (4)"
        )
    pattern_type = _value(creation.resource_pattern_type, PATTERN_TYPES, "pattern type")
    pattern = ResourcePattern(resource_type, creation.resource_name, pattern_type)
    return AclBinding.parse(pattern, creation.principal, creation.host, operation, permission)


def filters_of(request: Message) -> list[AclFilter]:
    """The filters a DescribeAcls request or a DeleteAcls filter stands for: one, or one per
    resource type for MATCH with any resource type (each type whose resources can have the
    name), or none when it names a value no ACL here can have. InvalidRequest for a bad value."""
    try:
        resource_type = _filter_value(
            request.resource_type_filter, RESOURCE_TYPES, "resource type", ABSENT_RESOURCE_TYPES
        )
        operation = _filter_value(request.operation, OPERATIONS, "operation", ABSENT_OPERATIONS)
        permission = _filter_value(request.permission_type, PERMISSIONS, "permission type")
    except _Unheld:
        return []
    name = request.resource_name_filter
    number = request.pattern_type_filter
    match = number == MATCH and name is not None  # MATCH without a name: any pattern, as Kafka's
    pattern_type = None if number == MATCH else _filter_value(number, PATTERN_TYPES, "pattern type")
    principal = None if request.principal_filter is None else parse_principal(request.principal_filter)
    host = None if request.host_filter is None else parse_host(request.host_filter)
    if match and resource_type is None:
        found = []
        for each in ResourceType:
            try:
                found.append(AclFilter(each, name, None, True, principal, host, operation, permission))
            except InvalidRequest:
                continue  # a name no resource of the type can have (the cluster's is kafka-cluster)
        return found
    return [AclFilter(resource_type, name, pattern_type, match, principal, host, operation, permission)]


def pattern_numbers(pattern: ResourcePattern) -> dict[str, object]:
    """A resource pattern as Kafka's responses carry it."""
    return {
        "resource_type": RESOURCE_TYPES[pattern.resource_type],
        "resource_name": pattern.name,
        "pattern_type": PATTERN_TYPES[pattern.pattern_type],
    }


def entry_numbers(binding: AclBinding) -> dict[str, object]:
    """An ACL's principal, host, operation and permission as Kafka's responses carry them."""
    return {
        "principal": binding.principal,
        "host": binding.host,
        "operation": OPERATIONS[binding.operation],
        "permission_type": PERMISSIONS[binding.permission],
    }


def refused_on_cluster(ctx: RequestContext) -> dict[str, object] | None:
    """The error fields of a request its principal may not make (the operation its API's row
    needs on the cluster; Kafka's CLUSTER_AUTHORIZATION_FAILED); None if it may."""
    if ctx.may.allowed(ResourceType.CLUSTER):
        return None
    rule = ctx.may.rule
    needed = f"{rule.operation(ResourceType.CLUSTER)} on the cluster" if rule is not None else "this"
    return error(error_codes.CLUSTER_AUTHORIZATION_FAILED, f"{ctx.principal} is not authorized to do {needed}")


def error(code: int, message: str) -> dict[str, object]:
    """A result's ``error_code`` and ``error_message`` for an error of Kafka's own."""
    return {"error_code": code, "error_message": message[:500]}


def too_many(count: int, limit: int, what: str) -> dict[str, object] | None:
    """The error fields of a request naming more than ``limit`` ``what`` (each becomes a write
    to ZooKeeper); None if it names no more."""
    if count <= limit:
        return None
    return error(error_codes.INVALID_REQUEST, f"the request names {count} {what}; at most {limit} at once")
