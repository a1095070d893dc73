"""What the principal of one Flight call may do: the broker's one enforcement point for ACLs
(:mod:`sparklog.security.authorizer`), handed to each request handler as a narrow interface
(``check`` / ``allowed``). Without an authorizer (a broker without ``authorizer.enabled``) every
call may do everything, as before security existed."""

from __future__ import annotations

from typing import Protocol

import pyarrow.flight as flight

from sparklog.security.acls import CLUSTER_NAME, Operation, ResourceType
from sparklog.security.authorizer import Authorizer, host_of_peer
from sparklog.security.principal import ANONYMOUS, USER_TYPE

TOPIC, GROUP, CLUSTER = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
TRANSACTIONAL_ID = ResourceType.TRANSACTIONAL_ID


def principal(context: flight.ServerCallContext, sasl: bool) -> str:
    """Who made the call: on a SASL listener, the principal its session token names; on a mutual TLS
    listener, ``User:<name>`` where gRPC gives the client certificate's name (its first subject
    alternative name, else its common name); else ``User:ANONYMOUS``."""
    identity = context.peer_identity()
    if not identity:
        return ANONYMOUS
    name = identity.decode(errors="replace")
    return name if sasl else f"{USER_TYPE}:{name}"


class CallPermissions(Protocol):
    def check(self, operation: Operation, resource_type: ResourceType, name: str = CLUSTER_NAME) -> None:
        """AuthorizationFailed naming principal, operation and resource unless allowed."""
        ...

    def allowed(self, operation: Operation, resource_type: ResourceType, name: str = CLUSTER_NAME) -> bool: ...


class Unrestricted:
    """Every call may do everything (no authorizer configured)."""

    def check(self, operation: Operation, resource_type: ResourceType, name: str = CLUSTER_NAME) -> None:
        return None

    def allowed(self, operation: Operation, resource_type: ResourceType, name: str = CLUSTER_NAME) -> bool:
        return True


UNRESTRICTED = Unrestricted()


class PrincipalPermissions:
    """The ACLs of one call's principal and client host."""

    def __init__(self, authorizer: Authorizer, principal: str, host: str) -> None:
        self.authorizer = authorizer
        self.principal = principal
        self.host = host

    def check(self, operation: Operation, resource_type: ResourceType, name: str = CLUSTER_NAME) -> None:
        self.authorizer.check(self.principal, self.host, operation, resource_type, name)

    def allowed(self, operation: Operation, resource_type: ResourceType, name: str = CLUSTER_NAME) -> bool:
        return self.authorizer.authorize(self.principal, self.host, operation, resource_type, name)


def permissions(context: flight.ServerCallContext, authorizer: Authorizer | None, sasl: bool) -> CallPermissions:
    if authorizer is None:
        return UNRESTRICTED
    return PrincipalPermissions(authorizer, principal(context, sasl), host_of_peer(context.peer()))
