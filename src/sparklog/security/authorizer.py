"""The check every broker call goes through: may this principal, calling from this host, do this
operation on this resource?

Super users may do everything; anyone else needs an ACL that allows it and none that denies it
(:func:`~sparklog.security.acls.acls_allow`). A resource without any ACL is refused to everyone but
super users (Kafka's ``allow.everyone.if.no.acl.found=false``).

The :class:`Authorizer` is pure logic over a narrow interface, :class:`AclSource`: the bindings that
could match a resource. A broker passes its :class:`~sparklog.security.acl_store.AclCache` (kept
current by ZooKeeper watches); tests pass a plain list of bindings.
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Iterable
from typing import Protocol, runtime_checkable

from sparklog.errors import AuthorizationFailed, InvalidRequest
from sparklog.security.acls import (
    WILDCARD_PRINCIPAL,
    AclBinding,
    AclIndex,
    Operation,
    ResourceType,
    acls_allow,
)
from sparklog.security.principal import parse_principal

log = logging.getLogger(__name__)


@runtime_checkable
class AclSource(Protocol):
    """Where an :class:`Authorizer` finds ACLs."""

    def matching(self, resource_type: ResourceType, name: str) -> Iterable[AclBinding]:
        """Every binding whose pattern covers the resource (more is harmless, fewer is not)."""
        ...


def parse_super_users(text: str) -> set[str]:
    """Kafka's ``super.users`` setting, ``User:admin;User:ops``, as a set of principals."""
    return {item.strip() for item in text.split(";") if item.strip()}


def host_of_peer(peer: str) -> str:
    """The client's IP address in a gRPC peer string, as ACLs name hosts: ``ipv4:10.0.0.5:53412`` ->
    ``10.0.0.5``, ``ipv6:[::1]:53412`` -> ``::1``, ``ipv6:[::ffff:10.0.0.5]:53412`` -> ``10.0.0.5``
    (any other form is returned unchanged; it matches only ACLs on every host)."""
    kind, sep, address = peer.partition(":")
    if not sep or kind not in ("ipv4", "ipv6"):
        return peer
    host = address.rpartition(":")[0] or address
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return host
    mapped = ip.ipv4_mapped if isinstance(ip, ipaddress.IPv6Address) else None
    return str(mapped or ip)


class Authorizer:
    """``authorize``/``check`` a call against ACLs from ``acls`` (an :class:`AclSource`, or bindings,
    kept as they are at construction) and ``super_users`` (principals such as ``User:admin``, allowed
    everything)."""

    def __init__(self, acls: AclSource | Iterable[AclBinding], super_users: Iterable[str] = ()) -> None:
        self._acls: AclSource = acls if isinstance(acls, AclSource) else AclIndex(acls)
        self.super_users = frozenset(_super_user(principal) for principal in super_users)

    def authorize(
        self, principal: str, host: str, operation: Operation, resource_type: ResourceType, name: str
    ) -> bool:
        """Whether ``principal`` calling from ``host`` (an IP address, see :func:`host_of_peer`) may do
        ``operation`` on the resource ``name`` of ``resource_type`` (the cluster's name is
        ``kafka-cluster``)."""
        if principal in self.super_users:
            return True
        allowed = acls_allow(self._acls.matching(resource_type, name), principal, host, operation, resource_type, name)
        if not allowed:
            log.info("denied %s from %s: %s on %s %r", principal, host, operation, resource_type.label, name)
        return allowed

    def check(self, principal: str, host: str, operation: Operation, resource_type: ResourceType, name: str) -> None:
        """:meth:`authorize`, raising :class:`AuthorizationFailed` (``User:alice may not Write topic
        'events'``) when refused."""
        if not self.authorize(principal, host, operation, resource_type, name):
            raise AuthorizationFailed(f"{principal} may not {operation} {resource_type.label} {name!r}")


def _super_user(principal: str) -> str:
    checked = parse_principal(principal)
    if checked == WILDCARD_PRINCIPAL:
        raise InvalidRequest("super users are named one by one; 'User:*' (everyone) cannot be a super user")
    return checked
