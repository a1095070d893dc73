"""What the principal of one Flight call may do: the broker's one enforcement point for ACLs
(:mod:`sparklog.security.authorizer`), handed to each request handler as a narrow interface
(``check`` / ``allowed``). Without an authorizer (a broker without ``authorizer.enabled``) every
call may do everything, as before security existed."""

from __future__ import annotations

from typing import Protocol

import pyarrow.flight as flight

from sparklog.security.acls import CLUSTER_NAME, Operation, ResourceType
from sparklog.security.authorizer import Authorizer, host_of_peer
from sparklog.security.principal import ANONYMOUS

TOPIC, GROUP, CLUSTER = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER


def principal(context: flight.ServerCallContext) -> str:
    """Who made the call: the principal its session token names on a SASL listener, else
    ``User:ANONYMOUS``."""
    identity = context.peer_identity()
    return identity.decode() if identity else ANONYMOUS


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


def permissions(context: flight.ServerCallContext, authorizer: Authorizer | None) -> CallPermissions:
    if authorizer is None:
        return UNRESTRICTED
    return PrincipalPermissions(authorizer, principal(context), host_of_peer(context.peer()))
