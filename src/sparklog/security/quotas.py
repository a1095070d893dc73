"""Client quotas (Kafka's ``producer_byte_rate``, ``consumer_byte_rate`` and ``request_rate``) in
ZooKeeper (:class:`QuotaStore`: set, remove, list), and the copy a broker keeps in memory
(:class:`QuotaCache`, kept current by watches).

Layout (:mod:`sparklog.coordination.zk_layout`): one znode per user,
``<root>/security/quotas/users/<user>``, and ``<default>`` for every user without its own, holding
``{"producer_byte_rate": 1048576, "consumer_byte_rate": null, "request_rate": 100}`` (per second;
a missing or null rate is no limit). As in Kafka, each rate a user's own znode does not set comes
from ``<default>``. A broker enforces them only with ``authorizer.enabled=true`` (a quota needs a
principal; :mod:`sparklog.broker.throttle`).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import math
import threading
from collections.abc import Mapping
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError
from kazoo.protocol.states import ZnodeStat
from kazoo.recipe.watchers import ChildrenWatch, DataWatch

from sparklog.coordination.zk_layout import DEFAULT_QUOTA_USER, ZkLayout
from sparklog.errors import CoordinatorNotAvailable, InvalidRequest
from sparklog.names import check_user_name
from sparklog.security.principal import USER_TYPE

log = logging.getLogger(__name__)

RATES = ("producer_byte_rate", "consumer_byte_rate", "request_rate")
MAX_QUOTAS = 1_000  # entries one request (through a broker, either protocol) alters
ALTER_TRIES = 100  # read-edit-writes of one quota while other writers get in between


@dataclasses.dataclass(frozen=True)
class Quota:
    """Rates per second (None: no limit)."""

    producer_byte_rate: float | None = None
    consumer_byte_rate: float | None = None
    request_rate: float | None = None

    def __post_init__(self) -> None:
        for name in RATES:
            value = getattr(self, name)
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0
            ):
                raise InvalidRequest(f"{name} must be a positive number, got {value!r:.80}")

    def to_json(self) -> bytes:
        return json.dumps(self.to_dict()).encode()

    @classmethod
    def from_json(cls, data: bytes) -> Quota:
        try:
            raw = json.loads(data)
            if not isinstance(raw, dict):
                raise TypeError("not a JSON object")
        except (ValueError, TypeError) as exc:
            raise InvalidRequest(f"a quota in ZooKeeper is malformed: {exc}") from None
        return cls(**{name: raw.get(name) for name in RATES})

    def to_dict(self) -> dict[str, float]:
        """The rates it sets, by Kafka's names (what the quota actions carry)."""
        return {name: getattr(self, name) for name in RATES if getattr(self, name) is not None}

    @classmethod
    def parse(cls, raw: object) -> Quota:
        """A quota as :meth:`to_dict` writes it (null: none), checked: unknown rates and rates that
        are not positive numbers are an :class:`InvalidRequest`."""
        if raw is None:
            return NO_QUOTA
        if not isinstance(raw, dict):
            raise InvalidRequest(f"a quota must be a JSON object of rates ({', '.join(RATES)}), got {raw!r:.80}")
        unknown = sorted(str(key) for key in raw if key not in RATES)
        if unknown:
            raise InvalidRequest(f"unknown quota rate(s) {', '.join(unknown)[:200]}; known: {', '.join(RATES)}")
        return cls(**{name: raw.get(name) for name in RATES})

    def or_else(self, default: Quota) -> Quota:
        """Each rate this quota does not set taken from ``default``."""
        return Quota(*(getattr(self, n) if getattr(self, n) is not None else getattr(default, n) for n in RATES))

    @property
    def empty(self) -> bool:
        return all(getattr(self, name) is None for name in RATES)


NO_QUOTA = Quota()


def quota_user(name: object) -> str:
    """``name`` if a quota may be kept for it: a valid user name, or ``<default>``."""
    return DEFAULT_QUOTA_USER if name == DEFAULT_QUOTA_USER else check_user_name(name)


class QuotaStore:
    """Sets, removes and lists the users' quotas in ZooKeeper through ``zk`` (connected by the caller)."""

    def __init__(self, zk: KazooClient, layout: ZkLayout) -> None:
        self.zk = zk
        self.layout = layout

    def set(self, user: str, quota: Quota) -> None:
        """Store ``user``'s quota (``<default>``: every user without its own), replacing any it had;
        an empty quota removes it."""
        if quota.empty:
            self.remove(user)
            return
        path = self.layout.user_quota(quota_user(user))
        try:
            self.zk.set(path, quota.to_json())
        except NoNodeError:
            self.zk.create(path, quota.to_json(), makepath=True)

    def alter(self, user: str, rates: Mapping[str, float | None], validate_only: bool = False) -> Quota:
        """Set the rates of ``rates`` in ``user``'s quota and remove those mapped to None, keeping
        the others (Kafka's AlterClientQuotas: an operation per key); the quota it then has. The
        quota is read and written back on condition that nobody changed it meanwhile (read again
        if somebody did), so concurrent changes of other rates are kept. Checked whole first
        (:class:`InvalidRequest`: an unknown rate, one that is not a positive number);
        ``validate_only``: checked, nothing written."""
        unknown = sorted(str(key) for key in rates if key not in RATES)
        if unknown:
            raise InvalidRequest(f"unknown quota rate(s) {', '.join(unknown)[:200]}; known: {', '.join(RATES)}")
        path = self.layout.user_quota(quota_user(user))
        for _ in range(ALTER_TRIES):
            stat: ZnodeStat | None
            try:
                data, stat = self.zk.get(path)
                current = Quota.from_json(data)
            except NoNodeError:
                stat, current = None, NO_QUOTA
            merged = {**current.to_dict(), **rates}
            quota = Quota(**{name: merged.get(name) for name in RATES})
            if validate_only or (stat is None and quota.empty):
                return quota
            try:
                if stat is None:
                    self.zk.create(path, quota.to_json(), makepath=True)
                elif quota.empty:
                    self.zk.delete(path, version=stat.version)
                else:
                    self.zk.set(path, quota.to_json(), version=stat.version)
            except (BadVersionError, NoNodeError, NodeExistsError):
                continue  # another writer got in between: read and edit again
            return quota
        raise CoordinatorNotAvailable(f"the quota of {user!r:.100} kept changing under this change; try again")

    def remove(self, user: str) -> bool:
        """Remove ``user``'s quota; whether it had one."""
        try:
            self.zk.delete(self.layout.user_quota(quota_user(user)))
        except NoNodeError:
            return False
        return True

    def quotas(self) -> dict[str, Quota]:
        """Every stored quota by user name (``<default>`` included), sorted by name."""
        try:
            names = self.zk.get_children(self.layout.user_quotas)
        except NoNodeError:
            return {}
        found: dict[str, Quota] = {}
        for name in sorted(names):
            try:
                data, _ = self.zk.get(self.layout.user_quota(name))
                found[name] = Quota.from_json(data)
            except (NoNodeError, InvalidRequest):
                continue
        return found


def user_of(principal: str) -> str | None:
    """``alice`` for ``User:alice``; None for a principal of another type."""
    kind, sep, name = principal.partition(":")
    return name if sep and kind == USER_TYPE else None


class QuotaCache:
    """Every user's quota in memory, for a broker's :class:`~sparklog.broker.throttle.Throttle`.

    A ``ChildrenWatch`` on the users' quota znode and a ``DataWatch`` on each user's (stopped when
    the znode goes); no polling. A change reaches the broker as soon as ZooKeeper notifies it."""

    def __init__(self, zk: KazooClient, layout: ZkLayout) -> None:
        self.zk = zk
        self.layout = layout
        self._lock = threading.Lock()
        self._watched: set[str] = set()
        self._quotas: dict[str, Quota] = {}
        self._closed = False

    def start(self) -> QuotaCache:
        """Read every quota and start following changes (returns once the current ones are loaded)."""
        self.zk.ensure_path(self.layout.user_quotas)
        ChildrenWatch(self.zk, self.layout.user_quotas, self._on_children)
        return self

    def close(self) -> None:
        self._closed = True

    def __enter__(self) -> QuotaCache:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def quota_for(self, principal: str) -> Quota:
        """The quota of ``principal``: its user's own rates, each missing one from ``<default>``."""
        quotas = self._quotas
        default = quotas.get(DEFAULT_QUOTA_USER, NO_QUOTA)
        name = user_of(principal)
        own = quotas.get(name) if name is not None else None
        return own.or_else(default) if own is not None else default

    def _on_children(self, children: list[str]) -> bool:
        if self._closed:
            return False
        for name in children:
            with self._lock:
                if name in self._watched:
                    continue
                self._watched.add(name)
            try:
                path = self.layout.user_quota(quota_user(name))
            except InvalidRequest as exc:
                log.warning("ignoring the quota znode %r: %s", name, exc)
                continue
            DataWatch(self.zk, path, functools.partial(self._on_data, name))
        return True

    def _on_data(self, name: str, data: bytes | None, stat: ZnodeStat | None) -> Any:
        if self._closed:
            return False
        if stat is None:
            with self._lock:
                self._watched.discard(name)
                quotas = dict(self._quotas)
                quotas.pop(name, None)
                self._quotas = quotas
            return False
        try:
            quota = Quota.from_json(data or b"")
        except InvalidRequest as exc:
            log.warning("ignoring the quota of %r: %s", name, exc)
            quota = NO_QUOTA
        with self._lock:
            self._quotas = {**self._quotas, name: quota}
        return True
