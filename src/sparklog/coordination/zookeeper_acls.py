"""ZooKeeper locked down: brokers and admin tools authenticate to ZooKeeper with a digest
(``user:password``) and create sparklog's znodes so that only that identity may change them;
anyone else may read them, except users' credentials, which only it may read (Kafka's
``zookeeper.set.acl``). The ZooKeeper a secured local cluster runs for itself has its root locked
the same way (:func:`lock_root`): nobody else may create znodes beside sparklog's.

Brokers take ``zookeeper.digest=user:password`` in their properties file; admin tools run next to
ZooKeeper take env ``SPARKLOG_ZOOKEEPER_DIGEST``. Clients need neither: they talk to brokers
(``bootstrap.servers``).
"""

from __future__ import annotations

import dataclasses
import os

from kazoo.client import KazooClient
from kazoo.security import ACL, make_acl, make_digest_acl

from sparklog.errors import InvalidConfig

DIGEST_ENV = "SPARKLOG_ZOOKEEPER_DIGEST"


@dataclasses.dataclass(frozen=True)
class ZooKeeperDigest:
    """A ZooKeeper digest identity."""

    username: str
    password: str = dataclasses.field(repr=False)

    @classmethod
    def parse(cls, text: str, setting: str = "zookeeper.digest") -> ZooKeeperDigest:
        user, sep, password = text.partition(":")
        if not sep or not user or not password:
            raise InvalidConfig(f"{setting} must be 'user:password'")
        return cls(user, password)

    @classmethod
    def from_env(cls) -> ZooKeeperDigest | None:
        text = os.environ.get(DIGEST_ENV)
        return cls.parse(text, f"env {DIGEST_ENV}") if text else None

    @property
    def auth_data(self) -> list[tuple[str, str]]:
        return [("digest", f"{self.username}:{self.password}")]

    @property
    def default_acl(self) -> list[ACL]:
        """Every znode: this identity may do anything, the world may only read."""
        return [make_digest_acl(self.username, self.password, all=True), make_acl("world", "anyone", read=True)]

    @property
    def private_acl(self) -> list[ACL]:
        """Credentials: this identity only."""
        return [make_digest_acl(self.username, self.password, all=True)]


def private_acl(zk: KazooClient) -> list[ACL] | None:
    """The ACL for secrets written through ``zk``: its digest identity only (None: ZooKeeper is not
    locked down, the client's default applies)."""
    for scheme, credential in getattr(zk, "auth_data", ()) or ():
        if scheme == "digest":
            return ZooKeeperDigest.parse(credential).private_acl
    return None


def lock_root(hosts: str, digest: ZooKeeperDigest, timeout: float = 10.0) -> None:
    """Give the root znode of the ZooKeeper at ``hosts`` (no chroot) ``digest``'s default ACL: the
    world may list and read it but not create znodes there, ``digest`` may do anything. Its children
    keep their own ACLs (ZooKeeper's ``/zookeeper`` among them): only for a ZooKeeper sparklog owns."""
    zk = KazooClient(hosts=hosts, timeout=timeout, **client_options(digest))
    zk.start(timeout=timeout)
    try:
        zk.set_acls("/", digest.default_acl)
    finally:
        zk.stop()
        zk.close()


def client_options(digest: ZooKeeperDigest | None) -> dict[str, object]:
    """The ``KazooClient`` arguments for ``digest`` (none without one)."""
    if digest is None:
        return {}
    return {"auth_data": digest.auth_data, "default_acl": digest.default_acl}
