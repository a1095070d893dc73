"""The partition states a broker gives clients in metadata, kept in memory until ZooKeeper says they
changed (Kafka's brokers answer metadata from their metadata cache, not from ZooKeeper).

A client refreshes a topic's metadata every few seconds (``metadata.max.age.ms``); reading every
partition's state each time cost a broker one ZooKeeper read per partition (a thousand for a
thousand partitions, for every producer and consumer, every 5 s). Here a state is read once with a
data watch set on its znode; the watch's event (changed, deleted) drops it, and the next describe
reads it again. A state whose watch fired while it was being read is not kept, and losing the
ZooKeeper connection (watches may be lost with the session) drops every state.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable

from kazoo.protocol.states import KazooState, WatchedEvent

from sparklog.coordination.cluster import PartitionState

TopicPartition = tuple[str, int]
States = dict[int, tuple[PartitionState, int]]  # partition -> (state, znode version)
# reads the states of some partitions of a topic and sets the watch on each znode read
StatesReader = Callable[[str, Iterable[int], Callable[[WatchedEvent], None]], States]


class PartitionStateCache:
    def __init__(self, read: StatesReader, path_of: Callable[[str, int], str]) -> None:
        self._read = read
        self._path_of = path_of
        self._lock = threading.Lock()
        self._states: dict[TopicPartition, tuple[PartitionState, int]] = {}
        self._watched: dict[str, TopicPartition] = {}  # znode path -> its partition
        self._dropped: dict[TopicPartition, int] = {}  # how often each was dropped (a read in flight compares)
        self._cleared = 0  # how often everything was dropped

    def states(self, topic: str, partitions: Iterable[int]) -> States:
        """The states of ``partitions`` of ``topic`` (a partition without a state is left out)."""
        wanted = list(partitions)
        with self._lock:
            out: States = {}
            missing = []
            for p in wanted:
                found = self._states.get((topic, p))
                if found is None:
                    missing.append(p)
                else:
                    out[p] = found
            cleared = self._cleared
            dropped = {p: self._dropped.get((topic, p), 0) for p in missing}
            for p in missing:
                self._watched[self._path_of(topic, p)] = (topic, p)
        if not missing:
            return out
        read = self._read(topic, missing, self._changed)
        with self._lock:
            keep = self._cleared == cleared
            for p in missing:
                found = read.get(p)
                if found is None:  # no state znode: no watch was set on it
                    self._watched.pop(self._path_of(topic, p), None)
                    continue
                out[p] = found
                if keep and self._dropped.get((topic, p), 0) == dropped[p]:
                    self._states[(topic, p)] = found
        return out

    def _changed(self, event: WatchedEvent) -> None:
        """A watched state znode changed or went away (or the watch ended): read it again next time."""
        with self._lock:
            key = self._watched.pop(event.path, None)
            if key is not None:
                self._states.pop(key, None)
                self._dropped[key] = self._dropped.get(key, 0) + 1

    def on_connection_state(self, state: str) -> None:
        """A kazoo connection listener: while disconnected (and after a lost session) changes may go
        unseen, so nothing cached is trusted."""
        if state in (KazooState.SUSPENDED, KazooState.LOST):
            with self._lock:
                self._states.clear()
                self._watched.clear()
                self._dropped.clear()
                self._cleared += 1
