"""Topic metadata by ZooKeeper watches: one children watch on the topics, and per topic a watch on
its metadata znode (partitions, replica assignment, config) and on its schema versions. Each
change goes to the :class:`~sparklog.broker.topic_catalog.TopicCatalog` and the replicas
(:class:`ReplicaAssignments`); a read that fails in a ZooKeeper blip is retried, never lost."""

from __future__ import annotations

import logging
import threading
from typing import Protocol

from kazoo.exceptions import KazooException
from kazoo.recipe.watchers import ChildrenWatch, DataWatch

from sparklog.broker.topic_catalog import TopicCatalog
from sparklog.coordination.cluster import ClusterMetadata, TopicMetadata
from sparklog.errors import UnknownTopic

log = logging.getLogger(__name__)


class ReplicaAssignments(Protocol):
    """What the watcher tells the replicas (:class:`~sparklog.broker.replica_manager.ReplicaManager`)."""

    def assign(self, topic: str, meta: TopicMetadata) -> bool: ...

    def holds_topic(self, topic: str) -> bool: ...

    def drop_topic(self, topic: str) -> None: ...


class TopicWatcher:
    """Follows every topic in ZooKeeper for one broker; :meth:`start` sets the watches."""

    def __init__(
        self,
        cluster: ClusterMetadata,
        catalog: TopicCatalog,
        replicas: ReplicaAssignments,
        stopped: threading.Event,
    ) -> None:
        self._cluster = cluster
        self._catalog = catalog
        self._replicas = replicas
        self._stopped = stopped
        self._watched: set[str] = set()  # topics whose metadata znode is watched
        self._watches: dict[str, int] = {}  # topic -> number of its current metadata watch
        self._watch_count = 0
        self._unread: set[str] = set()  # notified, but reading their metadata failed: retried
        self._lock = threading.RLock()

    def start(self) -> TopicWatcher:
        ChildrenWatch(self._cluster.zk, self._cluster.layout.topics, self._on_topics)
        return self

    def read_unread(self) -> None:
        """Read again the topics whose last read failed (after a reconnect, and every maintenance round)."""
        for name in list(self._unread):
            self.refresh(name)

    def _on_topics(self, children: list[str]) -> bool | None:
        if self._stopped.is_set():
            return False
        for gone in self._watched - set(children):
            self._watched.discard(gone)
            self._watches.pop(gone, None)  # its watch ends at its next notification
            self._drop(gone)
        # not the catalog's topics: a client may have made this broker read a topic before this
        # notification arrived, and the topic must be watched all the same. A topic still being
        # created is watched too (its metadata znode), and taken when its creation is complete.
        for name in set(children) - self._watched:
            self._watched.add(name)
            self._watch(name)
        return None

    def _gone(self, name: str) -> None:
        """The topic node was deleted: drop the topic now (the topics' children notification may
        come later, or never show the name missing: deleted and created again in between, as
        when a create removes what a failed creation left), and follow a node of that name that
        exists again."""
        self._watched.discard(name)
        self._watches.pop(name, None)
        self._drop(name)
        try:
            again = self._cluster.zk.exists(self._cluster.layout.topic(name)) is not None
        except KazooException:
            again = False  # the topics' children watch brings it back after reconnecting
        if again and name not in self._watched:
            self._watched.add(name)
            self._watch(name)

    def _drop(self, name: str) -> None:
        """Forget a topic that is gone or being deleted: its replicas stop, its logs are deleted."""
        with self._lock:
            self._catalog.forget(name)
            self._unread.discard(name)
            self._replicas.drop_topic(name)

    def _watch(self, name: str) -> None:
        cluster = self._cluster
        self._watch_count += 1
        generation = self._watches[name] = self._watch_count

        def on_topic(data: bytes | None, _stat: object) -> bool | None:
            if self._stopped.is_set() or self._watches.get(name) != generation:
                return False  # stopping, or a newer watch follows this name
            if data is None:
                self._gone(name)
                return False
            return None if self.refresh(name) else False

        def on_schemas(_children: list[str]) -> bool | None:
            if self._stopped.is_set() or (
                self._catalog.get(name) is None and not cluster.zk.exists(cluster.layout.topic(name))
            ):
                return False
            self._catalog.load_value_schemas(name)
            return None

        self._catalog.load_value_schemas(name)
        DataWatch(cluster.zk, cluster.layout.topic(name), on_topic)
        if cluster.zk.exists(cluster.layout.schemas(name)):
            ChildrenWatch(cluster.zk, cluster.layout.schemas(name), on_schemas)

    def refresh(self, name: str) -> bool:
        """Read a topic's metadata and take (or drop) this broker's replicas of it; False if the
        topic node is gone. A topic still being created is left alone (its last write, which
        makes it complete, is watched); one being deleted is dropped at once. A read that fails (a
        ZooKeeper connection blip) is not lost: the topic is read again after reconnecting and by
        the maintenance loop."""
        try:
            try:
                meta, status = self._cluster.topic(name), ""
            except UnknownTopic:  # gone, or not a topic yet (or any more): which?
                meta, status = self._cluster.read_topic(name)
        except UnknownTopic:
            self._unread.discard(name)
            return False
        except KazooException as exc:
            log.warning("could not read topic %s (%r); retrying", name, exc)
            self._unread.add(name)
            return True
        self._unread.discard(name)
        if status:
            if self._catalog.get(name) is not None or self._replicas.holds_topic(name):
                log.info("topic %s is being %s: dropping its replicas", name, status)
                self._drop(name)
            return True
        with self._lock:  # the watch thread and the maintenance loop may both get here
            self._catalog.put(name, meta)
            if not self._replicas.assign(name, meta):
                self._unread.add(name)
        return True
