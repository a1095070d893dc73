"""The broker's one wake-up for all its partitions (:class:`PartitionChanges`): which partitions a
waiter hears about, and when."""

from __future__ import annotations

import threading
import time

from sparklog.broker.replication.partition_changes import HISTORY, PartitionChanges


def never() -> bool:
    return False


def test_a_waiter_hears_only_its_partitions_changed_after_its_version() -> None:
    changes = PartitionChanges()
    changes.notify(("t", 0))
    since = changes.version
    changes.notify(("t", 1))
    changes.notify(("u", 0))
    changes.notify(("t", 1))
    version, changed = changes.wait_for(since, {("t", 0), ("t", 1)}, time.monotonic() + 1, never)
    assert version == since + 3
    assert changed == {("t", 1)}  # ("t", 0) changed before ``since``; ("u", 0) is not followed


def test_a_waiter_too_far_behind_is_told_to_look_at_everything() -> None:
    changes = PartitionChanges()
    since = changes.version
    for i in range(HISTORY + 1):
        changes.notify(("t", i % 3))
    assert changes.wait_for(since, {("t", 0)}, time.monotonic() + 1, never) == (since + HISTORY + 1, None)
    # exactly at the edge of what is remembered, it still gets the keys
    changes = PartitionChanges()
    for i in range(HISTORY):
        changes.notify(("t", i % 3))
    assert changes.wait_for(0, {("t", 2)}, time.monotonic() + 1, never) == (HISTORY, {("t", 2)})


def test_a_change_to_another_partition_does_not_end_the_wait() -> None:
    changes = PartitionChanges()
    since = changes.version
    results: list[tuple[int, set[tuple[str, int]] | None]] = []
    waiter = threading.Thread(
        target=lambda: results.append(changes.wait_for(since, {("t", 0)}, time.monotonic() + 10, never))
    )
    waiter.start()
    changes.notify(("t", 1))
    time.sleep(0.2)
    assert not results  # still waiting
    changes.notify(("t", 0))
    waiter.join(5)
    assert results == [(since + 2, {("t", 0)})]


def test_giving_up_and_the_deadline_end_a_quiet_wait() -> None:
    changes = PartitionChanges()
    assert changes.wait_for(0, {("t", 0)}, time.monotonic() + 0.1, never) == (0, set())
    asked = threading.Event()

    def give_up() -> bool:
        asked.set()
        return True

    assert changes.wait_for(0, {("t", 0)}, time.monotonic() + 10, give_up) == (0, set())
    assert asked.is_set()
