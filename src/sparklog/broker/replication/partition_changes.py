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


class PartitionChanges:
    """Which partitions changed (log end, high watermark or role), numbered in order."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._version = 0
        self._recent: deque[tuple[int, TopicPartition]] = deque(maxlen=HISTORY)

    @property
    def version(self) -> int:
        return self._version

    def notify(self, key: TopicPartition) -> None:
        with self._cond:
            self._version += 1
            self._recent.append((self._version, key))
            self._cond.notify_all()

    def notify_all(self) -> None:
        """Everything may have changed (the broker is stopping): every waiter looks again."""
        with self._cond:
            self._version += 1
            self._recent.clear()
            self._cond.notify_all()

    def wait(self, since: int, timeout_s: float) -> tuple[int, set[TopicPartition] | None]:
        """Wait up to ``timeout_s`` for a change after version ``since``. Returns the version now
        and the partitions changed since ``since`` (None: too many to tell, look at all)."""
        with self._cond:
            if self._version == since:
                self._cond.wait(timeout_s)
            if self._version == since:
                return since, set()
            if not self._recent or self._recent[0][0] > since + 1:
                return self._version, None
            return self._version, {key for version, key in self._recent if version > since}

    def wait_for(
        self, since: int, keys: Container[TopicPartition], deadline: float, give_up: Callable[[], bool]
    ) -> tuple[int, set[TopicPartition] | None]:
        """Wait until one of ``keys`` changed after version ``since``, until ``deadline`` (a
        ``time.monotonic()`` value) or until ``give_up()`` (asked every ``WAIT_SLICE_S``). Returns
        the version now and the changed keys among ``keys`` (empty: none before the deadline or
        giving up; None: too many changes to tell, look at all)."""
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or give_up():
                return since, set()
            since, changed = self.wait(since, min(remaining, WAIT_SLICE_S))
            if changed is None:
                return since, None
            mine = {key for key in changed if key in keys}
            if mine:
                return since, mine
