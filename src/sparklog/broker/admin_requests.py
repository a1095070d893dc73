"""A broker's answers to the administration actions (Kafka's DescribeUserScramCredentials /
AlterUserScramCredentials, DescribeAcls / CreateAcls / DeleteAcls, DescribeClientQuotas /
AlterClientQuotas, AlterPartitionReassignments / ListPartitionReassignments; the wire is in
:mod:`sparklog.protocol.wire`), so an administrator needs neither network access to ZooKeeper nor its digest.

The handlers are thin: each request is parsed and checked whole, then handed to the very stores the
ZooKeeper path uses (:class:`~sparklog.security.credential_store.CredentialStore`,
:class:`~sparklog.security.acl_store.AclStore`, :class:`~sparklog.security.quotas.QuotaStore`,
:meth:`~sparklog.coordination.cluster.ClusterMetadata.request_reassignment`) on the broker's own
ZooKeeper session: one implementation of the logic, two ways in. What a call needs (Describe or
Alter on the cluster, DescribeConfigs or AlterConfigs for quotas) is checked before it comes here
(:mod:`sparklog.broker.call_authorization`). A bad request is a typed error naming what is wrong and
nothing is written. A user's password never reaches the broker: an upsertion carries the salt and
the salted password the client computed (:func:`sparklog.security.credentials.salted_password`).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable, Mapping
from typing import Any

from sparklog.broker.call_permissions import CallPermissions
from sparklog.coordination.cluster import ClusterMetadata
from sparklog.errors import InvalidRequest
from sparklog.names import check_topic_name, check_user_name
from sparklog.protocol import wire
from sparklog.security.acl_store import MAX_ACLS, AclStore
from sparklog.security.acls import AclBinding, AclFilter
from sparklog.security.credential_store import (
    MAX_USERS,
    CredentialStore,
    check_iterations,
    check_mechanism,
    credential,
)
from sparklog.security.credentials import SCRAM_SHA_256
from sparklog.security.quotas import MAX_QUOTAS, Quota, QuotaStore, quota_user

MAX_REASSIGNED = 10_000  # partitions of one reassignment (num.partitions.max)
MAX_REPLICAS = 100  # replicas of one reassigned partition
MAX_BYTES_B64 = 2_048  # characters of a base64 salt or salted password

AdminAnswer = Callable[[dict[str, Any], CallPermissions], dict[str, Any]]


def _list(request: Mapping[str, Any], name: str, limit: int, required: bool = False) -> list[Any]:
    value = request.get(name)
    if value is None and not required:
        return []
    if not isinstance(value, list) or len(value) > limit:
        raise InvalidRequest(f"'{name}' must be a list of at most {limit} entries, got {type(value).__name__}")
    return value


def _object(value: object, what: str) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise InvalidRequest(f"{what} must be a JSON object, got {value!r:.80}")
    return value


def _bytes(entry: Mapping[str, Any], name: str) -> bytes:
    text = entry.get(name)
    if not isinstance(text, str) or len(text) > MAX_BYTES_B64:
        raise InvalidRequest(f"'{name}' must be base64 text of at most {MAX_BYTES_B64} characters")
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidRequest(f"'{name}' is not valid base64") from None


def _once(names: list[str]) -> None:
    """Kafka refuses a request naming a user twice (DUPLICATE_RESOURCE): which would win?"""
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise InvalidRequest(f"user {name!r} appears more than once in one request")
        seen.add(name)


class AdminRequests:
    """Answers the administration actions with the stores of ``cluster``'s ZooKeeper session."""

    def __init__(self, cluster: ClusterMetadata) -> None:
        self.cluster = cluster
        self.credentials = CredentialStore(cluster.zk, cluster.layout)
        self.acls = AclStore(cluster.zk, cluster.layout)
        self.quotas = QuotaStore(cluster.zk, cluster.layout)
        self.actions: dict[str, AdminAnswer] = {
            wire.DESCRIBE_USER_SCRAM_CREDENTIALS: self.describe_user_scram_credentials,
            wire.ALTER_USER_SCRAM_CREDENTIALS: self.alter_user_scram_credentials,
            wire.DESCRIBE_ACLS: self.describe_acls,
            wire.CREATE_ACLS: self.create_acls,
            wire.DELETE_ACLS: self.delete_acls,
            wire.DESCRIBE_CLIENT_QUOTAS: self.describe_client_quotas,
            wire.ALTER_CLIENT_QUOTAS: self.alter_client_quotas,
            wire.ALTER_PARTITION_REASSIGNMENTS: self.alter_partition_reassignments,
            wire.LIST_PARTITION_REASSIGNMENTS: self.list_partition_reassignments,
        }

    # ----------------------------------------------------------------- SCRAM users
    def describe_user_scram_credentials(self, request: dict[str, Any], _may: CallPermissions) -> dict[str, Any]:
        """The users (all, or those named that exist) and their credentials' mechanism and
        iterations: never a salt or a key."""
        names = None if request.get("users") is None else _list(request, "users", MAX_USERS)
        found = self.credentials.iterations(names)
        return {
            "users": [
                {"name": name, "credentials": [{"mechanism": SCRAM_SHA_256, "iterations": iterations}]}
                for name, iterations in found.items()
            ]
        }

    def alter_user_scram_credentials(self, request: dict[str, Any], _may: CallPermissions) -> dict[str, Any]:
        """Upsertions (salt and salted password, as the client computed them) and deletions; every
        entry is checked, and the credentials made, before the first write."""
        upsertions = []
        for raw in _list(request, "upsertions", MAX_USERS):
            entry = _object(raw, "an upsertion")
            name = check_user_name(entry.get("name"))
            check_mechanism(entry.get("mechanism"))
            iterations = check_iterations(entry.get("iterations"))
            salt, salted = _bytes(entry, "salt"), _bytes(entry, "salted_password")
            credential(salt, salted, iterations)  # UnacceptableCredential now, before any write
            upsertions.append((name, salt, salted, iterations))
        deletions = []
        for raw in _list(request, "deletions", MAX_USERS):
            entry = _object(raw, "a deletion")
            deletions.append(check_user_name(entry.get("name")))
            check_mechanism(entry.get("mechanism"))
        if not upsertions and not deletions:
            raise InvalidRequest("the request names no user: give 'upsertions' or 'deletions'")
        _once([name for name, *_ in upsertions] + deletions)
        upserted = [
            {"name": name, "created": self.credentials.upsert_salted(name, salt, salted, iterations)}
            for name, salt, salted, iterations in upsertions
        ]
        deleted = [{"name": name, "removed": self.credentials.remove(name)} for name in deletions]
        return {"upserted": upserted, "deleted": deleted}

    # ----------------------------------------------------------------- ACLs
    def describe_acls(self, request: dict[str, Any], _may: CallPermissions) -> dict[str, Any]:
        found = self.acls.describe(AclFilter.from_json(request.get("filter") or {}))
        return {"acls": [binding.to_json() for binding in found]}

    def create_acls(self, request: dict[str, Any], _may: CallPermissions) -> dict[str, Any]:
        bindings = [AclBinding.from_json(raw) for raw in _list(request, "acls", MAX_ACLS, required=True)]
        return {"created": [binding.to_json() for binding in self.acls.add(bindings)]}

    def delete_acls(self, request: dict[str, Any], _may: CallPermissions) -> dict[str, Any]:
        filters = [AclFilter.from_json(raw) for raw in _list(request, "filters", MAX_ACLS, required=True)]
        return {"deleted": [binding.to_json() for binding in self.acls.delete(filters)]}

    # ----------------------------------------------------------------- client quotas
    def describe_client_quotas(self, _request: dict[str, Any], _may: CallPermissions) -> dict[str, Any]:
        return {"quotas": {user: quota.to_dict() for user, quota in self.quotas.quotas().items()}}

    def alter_client_quotas(self, request: dict[str, Any], _may: CallPermissions) -> dict[str, Any]:
        """Each entry replaces a user's (or ``<default>``'s) quota, or with ``"quota": null``
        removes it."""
        entries: list[tuple[str, Quota]] = []
        for raw in _list(request, "entries", MAX_QUOTAS, required=True):
            entry = _object(raw, "a quota entry")
            entries.append((quota_user(entry.get("user")), Quota.parse(entry.get("quota"))))
        _once([user for user, _ in entries])
        results: list[dict[str, Any]] = []
        for user, quota in entries:
            if quota.empty:
                results.append({"user": user, "removed": self.quotas.remove(user)})
            else:
                self.quotas.set(user, quota)
                results.append({"user": user})
        return {"results": results}

    # ----------------------------------------------------------------- partition reassignment
    def alter_partition_reassignments(self, request: dict[str, Any], _may: CallPermissions) -> dict[str, Any]:
        """Asks the controller to move partitions (the ZooKeeper path's checks: partitions of the
        topic, distinct live brokers, at least min.insync.replicas, none already moving)."""
        topic = check_topic_name(request.get("topic"))
        partitions = _object(request.get("partitions"), "'partitions'")
        if not 0 < len(partitions) <= MAX_REASSIGNED:
            raise InvalidRequest(f"'partitions' must name 1 to {MAX_REASSIGNED} partitions")
        targets: dict[int, list[int]] = {}
        for key, replicas in partitions.items():
            if not isinstance(key, str) or not key.isdigit() or len(key) > 9:
                raise InvalidRequest(f"partition keys must be decimal partition numbers, got {key!r:.100}")
            if not isinstance(replicas, list) or not 0 < len(replicas) <= MAX_REPLICAS:
                raise InvalidRequest(f"partition {key}: replicas must be a list of 1 to {MAX_REPLICAS} broker ids")
            if not all(wire.is_int64(b) and b >= 0 for b in replicas):
                raise InvalidRequest(f"partition {key}: replicas must be broker ids (0 or more), got {replicas!r:.100}")
            targets[int(key)] = replicas
        self.cluster.request_reassignment(topic, targets)
        return {}

    def list_partition_reassignments(self, request: dict[str, Any], _may: CallPermissions) -> dict[str, Any]:
        pending = self.cluster.pending_reassignment(check_topic_name(request.get("topic")))
        return {"partitions": None if pending is None else {str(p): r for p, r in sorted(pending.items())}}
