"""Users' SCRAM credentials in ZooKeeper (``<root>/security/users/<name>``), what ``sparklog users``
manages and what brokers check a handshake against.

A credential's version is its znode's ``mzxid``: ZooKeeper's transaction id of the write that made
it. It grows with every password change and is new when a removed user is added again, so a session
that began with one version is over as soon as the user has another (or none)."""

from __future__ import annotations

import contextlib
import functools
import secrets
import threading

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError
from kazoo.protocol.states import ZnodeStat
from kazoo.recipe.watchers import ChildrenWatch, DataWatch

from sparklog.coordination.zk_layout import ZkLayout
from sparklog.coordination.zookeeper_acls import private_acl
from sparklog.errors import InvalidUserName, UnacceptableCredential
from sparklog.names import check_user_name
from sparklog.security.credentials import (
    DEFAULT_ITERATIONS,
    SCRAM_SHA_256,
    ScramCredential,
    new_salt,
    salted_password,
)

MIN_ITERATIONS = 4096  # Kafka's minimum for SCRAM-SHA-256
MAX_ITERATIONS = 16384  # Kafka's maximum (each PLAIN login computes that many rounds on the broker)
MIN_SALT_BYTES = 12  # scramp's smallest salt (a shorter one could never log in)
MAX_SALT_BYTES = 1024
SALTED_PASSWORD_BYTES = 32  # SHA-256's output
MECHANISMS = (SCRAM_SHA_256,)
MAX_USERS = 1_000  # users one request (through a broker, either protocol) describes or alters


def check_iterations(iterations: object) -> int:
    if isinstance(iterations, bool) or not isinstance(iterations, int):
        raise UnacceptableCredential(f"iterations must be an integer, got {iterations!r:.80}")
    if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise UnacceptableCredential(
            f"iterations must be from {MIN_ITERATIONS} to {MAX_ITERATIONS} (Kafka's bounds), got {iterations}"
        )
    return iterations


def check_mechanism(mechanism: object) -> str:
    if mechanism not in MECHANISMS:
        raise UnacceptableCredential(
            f"unknown SCRAM mechanism {mechanism!r:.80}; users' credentials are {', '.join(MECHANISMS)}"
        )
    return str(mechanism)


def credential(salt: bytes, salted: bytes, iterations: int) -> ScramCredential:
    """The credential to store for a salted password (:func:`~sparklog.security.credentials.salted_password`),
    checked first: :class:`UnacceptableCredential` for iterations outside Kafka's bounds, a salt of
    fewer than 12 or more than 1024 bytes, or a salted password that is not SHA-256's 32 bytes."""
    check_iterations(iterations)
    if not MIN_SALT_BYTES <= len(salt) <= MAX_SALT_BYTES:
        raise UnacceptableCredential(f"a salt must have {MIN_SALT_BYTES} to {MAX_SALT_BYTES} bytes, got {len(salt)}")
    if len(salted) != SALTED_PASSWORD_BYTES:
        raise UnacceptableCredential(
            f"a SCRAM-SHA-256 salted password has {SALTED_PASSWORD_BYTES} bytes, got {len(salted)}"
        )
    return ScramCredential.from_salted_password(salt, salted, iterations)


def _valid_name(user: str) -> bool:
    try:
        check_user_name(user)
    except InvalidUserName:
        return False  # a znode nobody made through sparklog: no user of it
    return True


class CredentialStore:
    """Reads and writes users' credentials."""

    def __init__(self, zk: KazooClient, layout: ZkLayout) -> None:
        self.zk = zk
        self.layout = layout

    def upsert(self, user: str, password: str, iterations: int = DEFAULT_ITERATIONS) -> bool:
        """Set ``user``'s password (a new salted credential); True if the user is new."""
        check_iterations(iterations)
        salt = new_salt()
        return self.upsert_salted(user, salt, salted_password(password, salt, iterations), iterations)

    def upsert_salted(self, user: str, salt: bytes, salted: bytes, iterations: int) -> bool:
        """Set ``user``'s credential from its salted password (what a client sends, Kafka's
        AlterUserScramCredentials upsertion: never the password); True if the user is new.
        Checked before anything is written (:func:`credential`)."""
        path = self.layout.user(user)
        data = credential(salt, salted, iterations).to_json()
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

    def iterations(self, users: list[str] | None = None) -> dict[str, int]:
        """Each user's iteration count (the one part of a credential Kafka's
        DescribeUserScramCredentials shows), by name: every user, or those of ``users`` that exist."""
        found: dict[str, int] = {}
        if users is not None:
            names = sorted({check_user_name(user) for user in users})  # InvalidUserName before any read
        else:
            names = [user for user in self.users() if _valid_name(user)]
        for user in names:
            versioned = self.versioned_credential(user)
            if versioned is not None:
                found[user] = versioned[0].iterations
        return found

    def versioned_credential(self, user: str) -> tuple[ScramCredential, int] | None:
        """``user``'s credential and its version, None if there is no such user."""
        try:
            data, stat = self.zk.get(self.layout.user(check_user_name(user)))
        except NoNodeError:
            return None
        return ScramCredential.from_json(data), stat.mzxid

    def version(self, user: str) -> int | None:
        """The version of ``user``'s credential, read now (None: no such user)."""
        stat = self.zk.exists(self.layout.user(check_user_name(user)))
        return None if stat is None else stat.mzxid

    def scram_secret(self) -> bytes:
        """The cluster's secret for unknown users' SCRAM salts: made by the first broker that asks,
        readable by the brokers' ZooKeeper identity only."""
        path = self.layout.scram_secret
        with contextlib.suppress(NodeExistsError):  # another broker made it first
            self.zk.create(path, secrets.token_bytes(32), acl=private_acl(self.zk), makepath=True)
        data, _ = self.zk.get(path)
        return data


class CredentialWatch:
    """The current version of every user's credential, followed by watches (a broker asks it at
    every call and before each message of an open stream): a children watch on the users and a data
    watch on each user ever seen (kept after a removal, so the name's return is seen too)."""

    def __init__(self, zk: KazooClient, layout: ZkLayout) -> None:
        self._store = CredentialStore(zk, layout)
        self._zk = zk
        self._layout = layout
        self._versions: dict[str, int] = {}
        self._watched: set[str] = set()
        self._lock = threading.Lock()
        self._ready = threading.Event()
        zk.ensure_path(layout.users)
        ChildrenWatch(zk, layout.users, self._on_users)
        self._ready.wait(10)

    def _on_users(self, children: list[str]) -> None:
        with self._lock:
            new = [name for name in children if name not in self._watched]
            self._watched.update(new)
        for name in new:
            DataWatch(self._zk, self._layout.user(name), functools.partial(self._on_user, name))
        self._ready.set()

    def _on_user(self, name: str, _data: bytes | None, stat: ZnodeStat | None, _event: object = None) -> None:
        with self._lock:
            if stat is None:
                self._versions.pop(name, None)
            else:
                self._versions[name] = max(stat.mzxid, self._versions.get(name, 0))

    def version(self, user: str) -> int | None:
        return self._versions.get(user)

    def refresh(self, user: str) -> int | None:
        try:
            version = self._store.version(user)
        except Exception:  # an invalid name is no user; ZooKeeper out of reach: the session cannot be confirmed
            return None
        with self._lock:
            if version is None:
                self._versions.pop(user, None)
            else:
                self._versions[user] = max(version, self._versions.get(user, 0))
        return version
