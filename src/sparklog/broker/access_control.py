"""What a broker checks its callers with, made from its security settings: who may fetch as a
replica (:class:`~sparklog.security.replica_guard.ReplicaGuard`), and with
``authorizer.enabled=true`` the ACLs (an :class:`~sparklog.security.acl_store.AclCache` behind an
:class:`~sparklog.security.authorizer.Authorizer`) and the client quotas (a
:class:`~sparklog.security.quotas.QuotaCache` behind a :class:`~sparklog.broker.throttle.Throttle`;
super users, brokers among them, are never throttled)."""

from __future__ import annotations

from collections.abc import Callable

from kazoo.client import KazooClient

from sparklog.broker.throttle import Throttle
from sparklog.coordination.zk_layout import ZkLayout
from sparklog.security.acl_store import AclCache
from sparklog.security.authorizer import Authorizer
from sparklog.security.broker_config import BrokerSecurity
from sparklog.security.quotas import NO_QUOTA, Quota, QuotaCache
from sparklog.security.replica_guard import ReplicaGuard


def quotas_but_super_users(cache: QuotaCache, super_users: frozenset[str]) -> Callable[[str], Quota]:
    """The quota of a principal: none for super users (brokers among them), never throttled."""
    return lambda principal: NO_QUOTA if principal in super_users else cache.quota_for(principal)


class AccessControl:
    """``registered_principal(broker_id)``: the principal a live broker registered (see
    :class:`ReplicaGuard`). The caches follow ZooKeeper by watches until :meth:`close`."""

    def __init__(
        self,
        security: BrokerSecurity,
        zk: KazooClient,
        layout: ZkLayout,
        registered_principal: Callable[[int], object],
    ) -> None:
        self.guard = ReplicaGuard(registered_principal, security.broker_principal)
        self.authorizer: Authorizer | None = None
        self.throttle: Throttle | None = None
        self._acls: AclCache | None = None
        self._quotas: QuotaCache | None = None
        if security.authorizer:
            self._acls = AclCache(zk, layout).start()
            self.authorizer = Authorizer(self._acls, security.super_users)
            self._quotas = QuotaCache(zk, layout).start()
            self.throttle = Throttle(quotas_but_super_users(self._quotas, self.authorizer.super_users))

    def close(self) -> None:
        if self._acls is not None:
            self._acls.close()
        if self._quotas is not None:
            self._quotas.close()
