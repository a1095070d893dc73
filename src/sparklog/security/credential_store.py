"""Users' SCRAM credentials in ZooKeeper (``<root>/security/users/<name>``), what ``sparklog users``
manages and what brokers check a handshake against."""

from __future__ import annotations

import threading

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError
from kazoo.recipe.watchers import ChildrenWatch

from sparklog.coordination.zk_layout import ZkLayout
from sparklog.errors import InvalidRequest
from sparklog.names import check_user_name
from sparklog.security.scram import DEFAULT_ITERATIONS, ScramCredential
from sparklog.security.zookeeper_acls import private_acl

MIN_ITERATIONS = 4096  # Kafka's minimum for SCRAM-SHA-256


class CredentialStore:
    """Reads and writes users' credentials."""

    def __init__(self, zk: KazooClient, layout: ZkLayout) -> None:
        self.zk = zk
        self.layout = layout

    def upsert(self, user: str, password: str, iterations: int = DEFAULT_ITERATIONS) -> bool:
        """Set ``user``'s password (a new salted credential); True if the user is new."""
        if not password:
            raise InvalidRequest(f"user {user!r}: the password must not be empty")
        if iterations < MIN_ITERATIONS:
            raise InvalidRequest(f"iterations must be at least {MIN_ITERATIONS}, got {iterations}")
        path = self.layout.user(user)
        data = ScramCredential.create(password, iterations).to_json()
        try:
            self.zk.create(path, data, acl=private_acl(self.zk), makepath=True)
            return True
        except NodeExistsError:
            self.zk.set(path, data)
            return False

    def remove(self, user: str) -> bool:
        """Delete ``user``; False if there was no such user."""
        try:
            self.zk.delete(self.layout.user(user))
            return True
        except NoNodeError:
            return False

    def users(self) -> list[str]:
        try:
            return sorted(self.zk.get_children(self.layout.users))
        except NoNodeError:
            return []

    def credential(self, user: str) -> ScramCredential | None:
        try:
            data, _ = self.zk.get(self.layout.user(check_user_name(user)))
        except NoNodeError:
            return None
        return ScramCredential.from_json(data)


class KnownUsers:
    """The names of the users that exist, followed by a watch (a broker asks it at every call)."""

    def __init__(self, zk: KazooClient, layout: ZkLayout) -> None:
        self._names: frozenset[str] = frozenset()
        self._ready = threading.Event()
        zk.ensure_path(layout.users)
        ChildrenWatch(zk, layout.users, self._on_users)
        self._ready.wait(10)

    def _on_users(self, children: list[str]) -> None:
        self._names = frozenset(children)
        self._ready.set()

    def __contains__(self, user: object) -> bool:
        return user in self._names
