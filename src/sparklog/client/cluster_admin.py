"""Administration beyond topics and groups (users' SCRAM credentials, ACLs, client quotas, partition
reassignment), the two ways :class:`~sparklog.client.admin.Admin` reaches it:

- :class:`BrokerAdmin`: a client given ``bootstrap.servers`` asks any broker with the
  administration actions of :mod:`sparklog.protocol.wire` (Kafka's Admin APIs; no ZooKeeper session, no
  ZooKeeper digest); the broker checks the caller's ACLs (Describe or Alter on the cluster,
  DescribeConfigs or AlterConfigs for quotas);
- :class:`ZooKeeperAdmin`: a client given a ZooKeeper connect string writes the znodes itself
  (what admin tools next to ZooKeeper did before brokers could).

Both hand the same stores the same values (the broker's handlers call the very stores
:class:`ZooKeeperAdmin` calls: :mod:`sparklog.broker.admin_requests`), so the two ways behave alike.
A password never leaves the client: both take the salt and salted password it computed.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from sparklog.client.broker_view import ADMIN_TIMEOUT_S, BrokerView
from sparklog.coordination.cluster import ClusterMetadata
from sparklog.protocol import wire
from sparklog.security.acl_store import AclStore
from sparklog.security.acls import AclBinding, AclFilter
from sparklog.security.credential_store import CredentialStore
from sparklog.security.credentials import SCRAM_SHA_256
from sparklog.security.quotas import Quota, QuotaStore


class ClusterAdmin(Protocol):
    """What :class:`~sparklog.client.admin.Admin` needs for users, ACLs, quotas and reassignments."""

    def scram_iterations(self, users: list[str] | None) -> dict[str, int]:
        """Each user's iteration count (every user, or those of ``users`` that exist)."""
        ...

    def upsert_scram_credential(self, user: str, salt: bytes, salted: bytes, iterations: int) -> bool:
        """Set ``user``'s credential from its salted password; True if the user is new."""
        ...

    def delete_scram_credential(self, user: str) -> bool:
        """Remove ``user``; whether there was one."""
        ...

    def describe_acls(self, acl_filter: AclFilter) -> list[AclBinding]: ...

    def create_acls(self, bindings: list[AclBinding]) -> list[AclBinding]:
        """Store ``bindings``; those that were not stored yet."""
        ...

    def delete_acls(self, filters: list[AclFilter]) -> list[AclBinding]:
        """Remove every binding a filter matches; those removed."""
        ...

    def client_quotas(self) -> dict[str, Quota]: ...

    def set_client_quota(self, user: str, quota: Quota) -> None: ...

    def remove_client_quota(self, user: str) -> bool: ...

    def request_reassignment(self, topic: str, targets: Mapping[int, list[int]]) -> None: ...

    def pending_reassignment(self, topic: str) -> dict[int, list[int]] | None: ...


class ZooKeeperAdmin:
    """:class:`ClusterAdmin` writing ZooKeeper through ``cluster``'s session."""

    def __init__(self, cluster: ClusterMetadata) -> None:
        self.cluster = cluster
        self.credentials = CredentialStore(cluster.zk, cluster.layout)
        self.acls = AclStore(cluster.zk, cluster.layout)
        self.quotas = QuotaStore(cluster.zk, cluster.layout)

    def scram_iterations(self, users: list[str] | None) -> dict[str, int]:
        return self.credentials.iterations(users)

    def upsert_scram_credential(self, user: str, salt: bytes, salted: bytes, iterations: int) -> bool:
        return self.credentials.upsert_salted(user, salt, salted, iterations)

    def delete_scram_credential(self, user: str) -> bool:
        return self.credentials.remove(user)

    def describe_acls(self, acl_filter: AclFilter) -> list[AclBinding]:
        return self.acls.describe(acl_filter)

    def create_acls(self, bindings: list[AclBinding]) -> list[AclBinding]:
        return self.acls.add(bindings)

    def delete_acls(self, filters: list[AclFilter]) -> list[AclBinding]:
        return self.acls.delete(filters)

    def client_quotas(self) -> dict[str, Quota]:
        return self.quotas.quotas()

    def set_client_quota(self, user: str, quota: Quota) -> None:
        self.quotas.set(user, quota)

    def remove_client_quota(self, user: str) -> bool:
        return self.quotas.remove(user)

    def request_reassignment(self, topic: str, targets: Mapping[int, list[int]]) -> None:
        self.cluster.request_reassignment(topic, targets)

    def pending_reassignment(self, topic: str) -> dict[int, list[int]] | None:
        return self.cluster.pending_reassignment(topic)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def scram_upsertion(user: str, salt: bytes, salted: bytes, iterations: int) -> dict[str, Any]:
    """One upsertion of ``alter_user_scram_credentials`` (Kafka's ``ScramCredentialUpsertion``):
    the salt and salted password, never the password."""
    return {
        "name": user,
        "mechanism": SCRAM_SHA_256,
        "iterations": iterations,
        "salt": _b64(salt),
        "salted_password": _b64(salted),
    }


def _bindings(raw: Iterable[Any]) -> list[AclBinding]:
    return [AclBinding.from_json(item) for item in raw]


class BrokerAdmin:
    """:class:`ClusterAdmin` answered by any broker of ``view`` (its administration actions)."""

    def __init__(self, view: BrokerView) -> None:
        self.view = view

    def _call(self, action: str, body: dict[str, Any]) -> dict[str, Any]:
        return self.view.call(action, body, ADMIN_TIMEOUT_S)

    def scram_iterations(self, users: list[str] | None) -> dict[str, int]:
        answer = self._call(wire.DESCRIBE_USER_SCRAM_CREDENTIALS, {"users": users})
        return {
            str(user["name"]): int(credential["iterations"])
            for user in answer["users"]
            for credential in user["credentials"]
            if credential["mechanism"] == SCRAM_SHA_256
        }

    def upsert_scram_credential(self, user: str, salt: bytes, salted: bytes, iterations: int) -> bool:
        body = {"upsertions": [scram_upsertion(user, salt, salted, iterations)]}
        return bool(self._call(wire.ALTER_USER_SCRAM_CREDENTIALS, body)["upserted"][0]["created"])

    def delete_scram_credential(self, user: str) -> bool:
        body = {"deletions": [{"name": user, "mechanism": SCRAM_SHA_256}]}
        return bool(self._call(wire.ALTER_USER_SCRAM_CREDENTIALS, body)["deleted"][0]["removed"])

    def describe_acls(self, acl_filter: AclFilter) -> list[AclBinding]:
        return _bindings(self._call(wire.DESCRIBE_ACLS, {"filter": acl_filter.to_json()})["acls"])

    def create_acls(self, bindings: list[AclBinding]) -> list[AclBinding]:
        body = {"acls": [binding.to_json() for binding in bindings]}
        return _bindings(self._call(wire.CREATE_ACLS, body)["created"])

    def delete_acls(self, filters: list[AclFilter]) -> list[AclBinding]:
        body = {"filters": [acl_filter.to_json() for acl_filter in filters]}
        return _bindings(self._call(wire.DELETE_ACLS, body)["deleted"])

    def client_quotas(self) -> dict[str, Quota]:
        answer = self._call(wire.DESCRIBE_CLIENT_QUOTAS, {})
        return {str(user): Quota.parse(rates) for user, rates in answer["quotas"].items()}

    def set_client_quota(self, user: str, quota: Quota) -> None:
        self._call(wire.ALTER_CLIENT_QUOTAS, {"entries": [{"user": user, "quota": quota.to_dict() or None}]})

    def remove_client_quota(self, user: str) -> bool:
        answer = self._call(wire.ALTER_CLIENT_QUOTAS, {"entries": [{"user": user, "quota": None}]})
        return bool(answer["results"][0].get("removed"))

    def request_reassignment(self, topic: str, targets: Mapping[int, list[int]]) -> None:
        body = {"topic": topic, "partitions": {str(p): list(replicas) for p, replicas in targets.items()}}
        self._call(wire.ALTER_PARTITION_REASSIGNMENTS, body)

    def pending_reassignment(self, topic: str) -> dict[int, list[int]] | None:
        partitions = self._call(wire.LIST_PARTITION_REASSIGNMENTS, {"topic": topic})["partitions"]
        return None if partitions is None else {int(p): [int(b) for b in r] for p, r in partitions.items()}
