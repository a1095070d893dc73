"""ACLs in ZooKeeper (:class:`AclStore`: add, delete and describe by filter, as Kafka's
CreateAcls/DeleteAcls/DescribeAcls; the one implementation behind ``sparklog acls`` through
ZooKeeper and a broker's ACL actions alike), and the copy of them a broker keeps in memory
(:class:`AclCache`, kept current by watches).

Layout (:mod:`sparklog.coordination.zk_layout`): one znode per resource pattern,
``<root>/security/acls/<literal|prefixed>/<Topic|Group|Cluster|TransactionalId>/<name>``, holding
``{"acls": [{"principal", "host", "operation", "permission"}, ...]}``; a pattern without ACLs has no
znode. As in Kafka, a change reads the znode, edits its list and writes it back on condition that the
znode's version did not move (or that it still does not exist, or still has the version read when it
is deleted), all patterns of one call in one ZooKeeper transaction; a conflicting writer makes the
transaction fail as a whole, and :class:`~kazoo.retry.KazooRetry` runs the read-edit-write again, so
concurrent adds and removes never lose one another's entries.
"""

from __future__ import annotations

import functools
import json
import logging
import threading
from collections.abc import Callable, Iterable

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError
from kazoo.protocol.states import ZnodeStat
from kazoo.recipe.watchers import ChildrenWatch, DataWatch
from kazoo.retry import ForceRetryError, KazooRetry, RetryFailedError

from sparklog.coordination.zk_layout import ZkLayout
from sparklog.errors import CoordinatorNotAvailable, InvalidRequest
from sparklog.security.acls import AclBinding, AclFilter, AclIndex, PatternType, ResourcePattern, ResourceType

log = logging.getLogger(__name__)

# how long a change keeps trying while other writers change the same znodes (or ZooKeeper is away)
CHANGE_DEADLINE_S = 30.0
# ACLs one request creates, filters one request deletes with (through a broker, either protocol): a
# change is one ZooKeeper transaction, which must stay well below ZooKeeper's request size limit
MAX_ACLS = 1_000
_CONFLICTS = (BadVersionError, NodeExistsError, NoNodeError)

# an edit of one pattern's bindings: (the new list, the bindings that were added or removed)
_Edit = Callable[[ResourcePattern, list[AclBinding]], tuple[list[AclBinding], list[AclBinding]]]


def _path(layout: ZkLayout, pattern: ResourcePattern) -> str:
    return layout.acl_resource(pattern.pattern_type.value, pattern.resource_type.value, pattern.name)


def _encode(bindings: Iterable[AclBinding]) -> bytes:
    return json.dumps({"acls": [binding.to_entry() for binding in bindings]}).encode()


def _decode(pattern: ResourcePattern, data: bytes) -> list[AclBinding]:
    """The bindings stored in a pattern's znode (:class:`InvalidRequest` naming it if malformed)."""
    try:
        entries = json.loads(data)["acls"]
        if not isinstance(entries, list):
            raise TypeError("'acls' is not a list")
        return [AclBinding.from_entry(pattern, entry) for entry in entries]
    except (ValueError, KeyError, TypeError, InvalidRequest) as exc:
        raise InvalidRequest(f"the ACLs of {pattern} in ZooKeeper are malformed: {exc}") from None


def _sort_key(binding: AclBinding) -> tuple[str, ...]:
    pattern = binding.pattern
    return (
        pattern.resource_type.value,
        pattern.pattern_type.value,
        pattern.name,
        binding.principal,
        binding.permission.value,
        binding.operation.value,
        binding.host,
    )


class AclStore:
    """Adds, removes and lists ACLs in ZooKeeper through ``zk`` (connected by the caller)."""

    def __init__(self, zk: KazooClient, layout: ZkLayout, deadline: float = CHANGE_DEADLINE_S) -> None:
        self.zk = zk
        self.layout = layout
        self._retry = KazooRetry(max_tries=-1, delay=0.005, backoff=1.5, max_delay=0.5, deadline=deadline)

    def add(self, bindings: Iterable[AclBinding]) -> list[AclBinding]:
        """Store ``bindings``; the ones that were not stored yet are returned."""
        wanted = _by_pattern(bindings)

        def edit(pattern: ResourcePattern, current: list[AclBinding]) -> tuple[list[AclBinding], list[AclBinding]]:
            there = set(current)
            new = [b for b in dict.fromkeys(wanted[pattern]) if b not in there]
            return current + new, new

        return self._change(list(wanted), edit)

    def remove(self, bindings: Iterable[AclBinding]) -> list[AclBinding]:
        """Remove ``bindings``; the ones that were stored are returned (a pattern left without ACLs
        loses its znode)."""
        return self.delete([AclFilter.of(binding) for binding in bindings])

    def remove_all(self, pattern: ResourcePattern) -> list[AclBinding]:
        """Remove every ACL of ``pattern``; they are returned."""
        return self.delete([AclFilter.of_pattern(pattern)])

    def delete(self, filters: Iterable[AclFilter]) -> list[AclBinding]:
        """Remove every stored binding a filter matches (Kafka's DeleteAcls); they are returned.
        Each filter names its resource pattern (type, name, literal or prefixed; the rest may be
        any), so all of a call's patterns change in one conditional transaction, as :meth:`add`'s."""
        wanted: dict[ResourcePattern, list[AclFilter]] = {}
        for found in filters:
            pattern = found.pattern
            if pattern is None:
                raise InvalidRequest(
                    "deleting ACLs needs their resource pattern: a resource type, a name and literal or prefixed"
                )
            wanted.setdefault(pattern, []).append(found)

        def edit(pattern: ResourcePattern, current: list[AclBinding]) -> tuple[list[AclBinding], list[AclBinding]]:
            gone = [b for b in current if any(f.matches(b) for f in wanted[pattern])]
            removed = set(gone)
            return [b for b in current if b not in removed], gone

        return self._change(list(wanted), edit)

    def delete_matching(self, filters: Iterable[AclFilter]) -> list[AclBinding]:
        """Remove every stored binding a filter matches, whatever the filters leave open (Kafka's
        DeleteAcls takes a filter of any resource type, name or pattern type); they are returned.
        A filter naming its resource pattern is applied as :meth:`delete` applies it; another is
        first turned into the bindings it matches now (:meth:`describe`), so a binding added
        after that read is left, as Kafka's broker leaves one added while it deletes."""
        exact: list[AclFilter] = []
        for found in filters:
            if found.pattern is not None:
                exact.append(found)
            else:
                exact.extend(AclFilter.of(binding) for binding in self.describe(found))
        return self.delete(exact) if exact else []

    def describe(self, acl_filter: AclFilter) -> list[AclBinding]:
        """The stored bindings ``acl_filter`` matches, sorted (Kafka's DescribeAcls)."""
        if acl_filter.match:
            found = self.list_acls(acl_filter.resource_type, principal=acl_filter.principal)
        else:
            found = self.list_acls(
                acl_filter.resource_type, acl_filter.name, acl_filter.pattern_type, acl_filter.principal
            )
        return [binding for binding in found if acl_filter.matches(binding)]

    def list_acls(
        self,
        resource_type: ResourceType | None = None,
        name: str | None = None,
        pattern_type: PatternType | None = None,
        principal: str | None = None,
    ) -> list[AclBinding]:
        """The stored ACLs, sorted; each filter given narrows them (``name`` is compared as stored:
        ``*``, a prefix, or a name)."""
        found: list[AclBinding] = []
        for pt in [pattern_type] if pattern_type else list(PatternType):
            for rt in [resource_type] if resource_type else list(ResourceType):
                parent = self.layout.acl_resources(pt.value, rt.value)
                try:
                    names = [name] if name is not None else self.zk.get_children(parent)
                except NoNodeError:
                    continue
                for child in names:
                    try:
                        pattern = ResourcePattern(rt, child, pt)
                        data, _ = self.zk.get(_path(self.layout, pattern))
                    except (NoNodeError, InvalidRequest):
                        continue  # gone meanwhile, or a name no ACL can have
                    found.extend(_decode(pattern, data))
        if principal is not None:
            found = [b for b in found if b.principal == principal]
        return sorted(found, key=_sort_key)

    def _change(self, wanted: list[ResourcePattern], edit: _Edit) -> list[AclBinding]:
        """Apply ``edit`` to the bindings of each pattern of ``wanted`` in one conditional
        transaction, retried while other writers get in between; the bindings it reports changed."""
        for pattern in wanted:
            self.zk.ensure_path(self.layout.acl_resources(pattern.pattern_type.value, pattern.resource_type.value))
        try:
            return self._retry.copy()(self._change_once, wanted, edit)
        except RetryFailedError:
            shown = ", ".join(str(p) for p in wanted)
            raise CoordinatorNotAvailable(
                f"could not change the ACLs of {shown}: other changes or ZooKeeper failures kept getting in the way; "
                "try again"
            ) from None

    def _change_once(self, wanted: list[ResourcePattern], edit: _Edit) -> list[AclBinding]:
        tx = self.zk.transaction()
        changed: list[AclBinding] = []
        for pattern in wanted:
            path = _path(self.layout, pattern)
            stat: ZnodeStat | None
            try:
                data, stat = self.zk.get(path)
                current = _decode(pattern, data)
            except NoNodeError:
                stat, current = None, []
            new, diff = edit(pattern, current)
            if not diff:
                continue
            changed.extend(diff)
            if stat is None:
                tx.create(path, _encode(new))
            elif new:
                tx.set_data(path, _encode(new), version=stat.version)
            else:
                tx.delete(path, version=stat.version)
        if not changed:
            return changed
        results = tx.commit()
        failed = [r for r in results if isinstance(r, Exception)]
        if any(isinstance(r, _CONFLICTS) for r in failed):
            raise ForceRetryError()  # another writer got in between: read and edit again
        if failed:
            raise failed[0]
        return changed


def _by_pattern(bindings: Iterable[AclBinding]) -> dict[ResourcePattern, list[AclBinding]]:
    grouped: dict[ResourcePattern, list[AclBinding]] = {}
    for binding in bindings:
        grouped.setdefault(binding.pattern, []).append(binding)
    return grouped


_Key = tuple[PatternType, ResourceType, str]


class AclCache:
    """Every ACL of the cluster in memory, for a broker's :class:`~sparklog.security.authorizer.Authorizer`
    (an :class:`~sparklog.security.authorizer.AclSource`).

    One kazoo watch per znode and no polling: a ``ChildrenWatch`` on each of the eight
    ``<pattern type>/<resource type>`` znodes, and a ``DataWatch`` on each resource pattern's znode
    (stopped when the znode goes). Both are set again by kazoo after a lost session. A change made
    anywhere reaches the cache as soon as ZooKeeper notifies it (milliseconds); the lookup index is
    rebuilt on the first :meth:`matching` after a change."""

    def __init__(self, zk: KazooClient, layout: ZkLayout) -> None:
        self.zk = zk
        self.layout = layout
        self._lock = threading.Lock()
        self._watched: set[_Key] = set()
        self._patterns: dict[ResourcePattern, tuple[AclBinding, ...]] = {}
        self._index: AclIndex | None = AclIndex()
        self._closed = False

    def start(self) -> AclCache:
        """Read every ACL and start following changes (returns once the current ACLs are loaded)."""
        for pt in PatternType:
            for rt in ResourceType:
                parent = self.layout.acl_resources(pt.value, rt.value)
                self.zk.ensure_path(parent)
                ChildrenWatch(self.zk, parent, functools.partial(self._on_children, pt, rt))
        return self

    def close(self) -> None:
        """Stop following changes (each watch ends at its next event)."""
        self._closed = True

    def __enter__(self) -> AclCache:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def matching(self, resource_type: ResourceType, name: str) -> list[AclBinding]:
        """The bindings whose pattern covers the resource (see :meth:`AclIndex.matching`)."""
        index = self._index
        if index is None:
            index = self._rebuild()
        return index.matching(resource_type, name)

    def bindings(self) -> list[AclBinding]:
        """Every binding the cache holds, sorted."""
        index = self._index
        if index is None:
            index = self._rebuild()
        return sorted(index, key=_sort_key)

    def _rebuild(self) -> AclIndex:
        with self._lock:
            if self._index is None:
                self._index = AclIndex(b for found in self._patterns.values() for b in found)
            return self._index

    def _on_children(self, pattern_type: PatternType, resource_type: ResourceType, children: list[str]) -> bool:
        if self._closed:
            return False
        for name in children:
            key = (pattern_type, resource_type, name)
            with self._lock:
                if key in self._watched:
                    continue
                self._watched.add(key)
            try:
                pattern = ResourcePattern(resource_type, name, pattern_type)
            except InvalidRequest as exc:
                log.warning("ignoring the ACL znode %s/%s/%s: %s", pattern_type, resource_type, name, exc)
                continue  # stays in _watched: not looked at again
            DataWatch(self.zk, _path(self.layout, pattern), functools.partial(self._on_data, key, pattern))
        return True

    def _on_data(self, key: _Key, pattern: ResourcePattern, data: bytes | None, stat: ZnodeStat | None) -> bool:
        if self._closed:
            return False
        if stat is None:  # the znode is gone: stop watching it (a new one is found by its parent's watch)
            with self._lock:
                self._watched.discard(key)
                self._patterns.pop(pattern, None)
                self._index = None
            return False
        try:
            found = tuple(_decode(pattern, data or b""))
        except InvalidRequest as exc:
            log.warning("ignoring %s", exc)
            found = ()
        with self._lock:
            self._patterns[pattern] = found
            self._index = None
        return True
