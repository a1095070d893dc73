"""Who may fetch as a replica. A fetch that names a ``replica_id`` moves the leader's view of that
follower (its position, the ISR, the high watermark), so only that broker may send it: a client
that posed as a follower could put a dead replica back into the ISR, and ``acks=all`` records
would then be acknowledged with one real copy."""

from __future__ import annotations

from collections.abc import Callable

from sparklog.errors import AuthorizationFailed
from sparklog.security.principal import ANONYMOUS

UNKNOWN = object()  # the broker is not (yet) known as live here


class ReplicaGuard:
    """Checks the principal of a replica fetch against the principal its broker registered.

    ``registered(broker_id)`` gives the principal that broker authenticates as to other brokers
    (None: the cluster's brokers do not authenticate), or :data:`UNKNOWN`; ``own`` is this
    broker's inter-broker principal (None without inter-broker authentication)."""

    def __init__(self, registered: Callable[[int], object], own: str | None) -> None:
        self.registered = registered
        self.own = own

    def check(self, principal: str, replica_id: int) -> None:
        expected = self.registered(replica_id)
        if expected is UNKNOWN:  # not seen live yet: brokers of this cluster authenticate as this one does
            expected = self.own
        if expected is None:  # brokers do not authenticate: only an unauthenticated listener serves replicas
            if principal == ANONYMOUS:
                return
        elif principal == expected:
            return
        raise AuthorizationFailed(
            f"{principal} may not fetch as replica {replica_id}: only broker {replica_id}'s own principal may"
        )
