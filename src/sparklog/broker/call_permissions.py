"""What the principal of one Flight call may do: its ACLs (:mod:`sparklog.security.authorizer`) and
whether its session still holds, handed to each request handler as a narrow interface (``check``,
``allowed``, ``check_session``). Without an authorizer (a broker without ``authorizer.enabled``)
every call may do everything, as before security existed; a SASL session is still checked, so a
removed user or a changed password ends that user's open streams either way."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Protocol

import pyarrow.flight as flight

from sparklog.security.acls import CLUSTER_NAME, Operation, ResourceType
from sparklog.security.authorizer import Authorizer, host_of_peer
from sparklog.security.principal import ANONYMOUS, USER_TYPE
from sparklog.security.sessions import CredentialVersions, Identity, check_session

TOPIC, GROUP, CLUSTER = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
TRANSACTIONAL_ID = ResourceType.TRANSACTIONAL_ID


def _identity(context: flight.ServerCallContext, sasl: bool) -> tuple[str, Identity | None]:
    """The call's principal, and on a SASL listener the session identity its token named."""
    raw = context.peer_identity()
    if not raw:
        return ANONYMOUS, None
    if sasl:
        identity = Identity.decode(raw)
        return (identity.principal, identity) if identity is not None else (ANONYMOUS, None)
    return f"{USER_TYPE}:{raw.decode(errors='replace')}", None


def principal(context: flight.ServerCallContext, sasl: bool) -> str:
    """Who made the call: on a SASL listener, the principal its session token names; on a mutual TLS
    listener, ``User:<name>`` where gRPC gives the client certificate's name (its first subject
    alternative name, else its common name); else ``User:ANONYMOUS``."""
    return _identity(context, sasl)[0]


class CallPermissions(Protocol):
    def check(self, operation: Operation, resource_type: ResourceType, name: str = CLUSTER_NAME) -> None:
        """AuthorizationFailed naming principal, operation and resource unless allowed (and
        AuthenticationFailed once the call's session has ended)."""
        ...

    def allowed(self, operation: Operation, resource_type: ResourceType, name: str = CLUSTER_NAME) -> bool: ...

    def check_session(self) -> None:
        """AuthenticationFailed once the call's user is removed or its password changed."""
        ...


class Unrestricted:
    """Every call may do everything (no authorizer configured, no session to end)."""

    def check(self, operation: Operation, resource_type: ResourceType, name: str = CLUSTER_NAME) -> None:
        return None

    def allowed(self, operation: Operation, resource_type: ResourceType, name: str = CLUSTER_NAME) -> bool:
        return True

    def check_session(self) -> None:
        return None


UNRESTRICTED = Unrestricted()


def _no_session() -> None:
    return None


class PrincipalPermissions:
    """The ACLs of one call's principal and client host (all allowed without an ``authorizer``), and
    its session."""

    def __init__(
        self,
        authorizer: Authorizer | None,
        principal: str,
        host: str,
        session: Callable[[], None] = _no_session,
    ) -> None:
        self.authorizer = authorizer
        self.principal = principal
        self.host = host
        self.session = session

    def check(self, operation: Operation, resource_type: ResourceType, name: str = CLUSTER_NAME) -> None:
        self.session()
        if self.authorizer is not None:
            self.authorizer.check(self.principal, self.host, operation, resource_type, name)

    def allowed(self, operation: Operation, resource_type: ResourceType, name: str = CLUSTER_NAME) -> bool:
        if self.authorizer is None:
            return True
        return self.authorizer.authorize(self.principal, self.host, operation, resource_type, name)

    def check_session(self) -> None:
        self.session()


def permissions(
    context: flight.ServerCallContext,
    authorizer: Authorizer | None,
    sasl: bool,
    sessions: CredentialVersions | None = None,
) -> CallPermissions:
    """The permissions of the call ``context`` is for; ``sessions``: the users' credential versions
    a SASL session is checked against (None: sessions are not checked)."""
    who, identity = _identity(context, sasl)
    session = _no_session
    if identity is not None and sessions is not None:
        session = functools.partial(check_session, sessions, identity)
    if authorizer is None and session is _no_session:
        return UNRESTRICTED
    return PrincipalPermissions(authorizer, who, host_of_peer(context.peer()), session)
