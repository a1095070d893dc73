"""Which broker coordinates a consumer group (FindCoordinator's answer).

Kafka places a group on the leader of one partition of ``__consumer_offsets``; sparklog keeps
committed offsets in ZooKeeper and the classic protocol's state in the coordinator's memory
(:mod:`sparklog.kafka.coordinator`), so any broker can coordinate any group. Every broker
computes the same choice from its view of the live brokers that have a Kafka listener:
rendezvous hashing, the broker whose id hashed with the group id scores highest. A broker joining
or leaving moves only the groups it wins or held (a modulo over the broker count would move most).

A group request reaching a broker that does not coordinate the group is answered
NOT_COORDINATOR, and clients look the coordinator up again. When the choice moves (a broker came
or went; views differ for a moment while ZooKeeper's watches deliver), the group's in-memory
state is lost: the new coordinator does not know the members, which rejoin (UNKNOWN_MEMBER_ID,
then JoinGroup), and the old one forgets the group when it next sees a request for it. Committed
offsets are in ZooKeeper and survive.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from sparklog.kafka.api import RequestContext
from sparklog.kafka.broker_access import BrokerEndpoint


def _score(group_id: str, broker_id: int) -> bytes:
    return hashlib.blake2b(f"{broker_id}\0{group_id}".encode(), digest_size=8).digest()


def coordinator_for(group_id: str, brokers: Sequence[BrokerEndpoint]) -> BrokerEndpoint | None:
    """The broker coordinating ``group_id`` among ``brokers`` (None if there are none)."""
    return max(brokers, key=lambda b: _score(group_id, b.broker_id), default=None)


class Placement:
    """One request's view of group placement: the live brokers read once, asked per group."""

    def __init__(self, ctx: RequestContext) -> None:
        self.broker_id = ctx.broker.broker_id
        self.brokers = ctx.broker.kafka_brokers(ctx.listener.protocol)
        self._groups = ctx.listener.groups

    def coordinator(self, group_id: str) -> BrokerEndpoint | None:
        return coordinator_for(group_id, self.brokers)

    def here(self, group_id: str) -> bool:
        """Whether this broker coordinates ``group_id``; if not, whatever it still holds of the
        group is forgotten (its members rejoin at the coordinator)."""
        chosen = self.coordinator(group_id)
        if chosen is not None and chosen.broker_id == self.broker_id:
            return True
        self._groups.forget(group_id)
        return False
