"""One wake-up for all the partitions a broker leads: a replica fetch covering a thousand partitions
waits on this, not on a condition per partition (Kafka's purgatory, reduced to what we need), and
after waking looks only at the partitions that changed."""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Container

TopicPartition = tuple[str, int]
HISTORY = 4096  # changes remembered; a waiter further behind looks at all its partitions again
WAIT_SLICE_S = 0.25  # how often a waiter asks whether it should give up (its client went away...)


class _Waiter:
    """A fetch waiting for one of its partitions to change."""

    __slots__ = ("keys", "woken")

    def __init__(self, keys: Container[TopicPartition]) -> None:
        self.keys = keys
        self.woken = threading.Event()


class PartitionChanges:
    """Which partitions changed (log end, high watermark or role), numbered in order. A change
    wakes only the waiters following that partition (waking every open fetch on each append made
    the one that mattered queue behind the others for the GIL)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._version = 0
        self._recent: deque[tuple[int, TopicPartition]] = deque(maxlen=HISTORY)
        self._waiters: set[_Waiter] = set()

    @property
    def version(self) -> int:
        return self._version

    def notify(self, key: TopicPartition) -> None:
        with self._lock:
            self._version += 1
            self._recent.append((self._version, key))
            waiters = [w for w in self._waiters if key in w.keys]
        for waiter in waiters:
            waiter.woken.set()

    def notify_all(self) -> None:
        """Everything may have changed (the broker is stopping): every waiter looks again."""
        with self._lock:
            self._version += 1
            self._recent.clear()
            waiters = list(self._waiters)
        for waiter in waiters:
            waiter.woken.set()

    def changed_since(self, since: int) -> tuple[int, set[TopicPartition] | None]:
        """The version now and the partitions changed after version ``since`` (None: too many to
        tell, look at all)."""
        with self._lock:
            return self._since(since)

    def _since(self, since: int) -> tuple[int, set[TopicPartition] | None]:
        """(Under the lock.) The version now and the partitions changed after ``since`` (None: too
        many to tell)."""
        if self._version == since:
            return since, set()
        if not self._recent or self._recent[0][0] > since + 1:
            return self._version, None
        changed: set[TopicPartition] = set()
        for version, key in reversed(self._recent):  # newest first: stop at the first one seen before
            if version <= since:
                break
            changed.add(key)
        return self._version, changed

    def wait_for(
        self, since: int, keys: Container[TopicPartition], deadline: float, give_up: Callable[[], bool]
    ) -> tuple[int, set[TopicPartition] | None]:
        """Wait until one of ``keys`` changed after version ``since``, until ``deadline`` (a
        ``time.monotonic()`` value) or until ``give_up()`` (asked every ``WAIT_SLICE_S``). Returns
        the version now and the changed keys among ``keys`` (empty: none before the deadline or
        giving up; None: too many changes to tell, look at all)."""
        waiter = _Waiter(keys)
        sliced = True
        with self._lock:
            self._waiters.add(waiter)
        try:
            while True:
                with self._lock:
                    since, changed = self._since(since)
                if changed is None:
                    return since, None
                mine = {key for key in changed if key in keys}
                if mine:
                    return since, mine
                remaining = deadline - time.monotonic()
                if remaining <= 0 or (sliced and give_up()):
                    return since, set()
                sliced = not waiter.woken.wait(min(remaining, WAIT_SLICE_S))  # asked only after a quiet slice
                waiter.woken.clear()  # a change after this is seen by the next look (its version)
        finally:
            with self._lock:
                self._waiters.discard(waiter)
