"""Retention (retention.ms by a segment's largest timestamp, retention.bytes), rolling (segment.ms,
segment.bytes) and the flush policy (flush.messages, flush.ms and the recovery point)."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from log_helpers import (
    Clock,
    Record,
    abandon,
    append_and_expect,
    batch_spans,
    blocked_background_flusher,
    brute_offset_for_time,
    config,
    read_all,
    read_from,
    read_recovery_point,
    segment_base,
    segment_files,
    settled,
    wait_for_background_flushes,
)
from sparklog.broker.log import PartitionLog
from sparklog.errors import OffsetOutOfRange


def one_batch_per_segment(**settings: object):
    # a stored batch is larger than 1024 - schema bytes: every append after the first one rolls
    return config(segment_bytes=1024, **settings)


def append_with_timestamps(log: PartitionLog, timestamps: list[int], expected: list[Record]) -> None:
    n = len(timestamps)
    append_and_expect(
        log,
        {"key": [b"k"] * n, "value": [b"v%d" % (len(expected) + i) for i in range(n)], "timestamp": timestamps},
        expected,
    )


def bases(directory: Path) -> list[int]:
    return [segment_base(p) for p in segment_files(directory)]


def check_start(log: PartitionLog, expected: list[Record], start: int) -> None:
    assert log.log_start_offset == start
    assert log.log_end_offset == len(expected)
    assert read_all(log) == expected[start:]
    assert read_from(log, start) == expected[start:]
    for below in {0, start - 1}:
        if below < start:
            with pytest.raises(OffsetOutOfRange):
                log.read(below)
    assert log.offset_for_time(0) == brute_offset_for_time(expected[start:], 0)


# ---------------------------------------------------------------------------------------- retention.ms


def test_retention_ms_deletes_segments_by_their_largest_timestamp(tmp_path: Path) -> None:
    clock = Clock(0)
    cfg = one_batch_per_segment(retention_ms=1000)
    log = PartitionLog(tmp_path, cfg, clock=clock)
    expected: list[Record] = []
    append_with_timestamps(log, [100, 90], expected)  # segment 0: largest 100
    append_with_timestamps(log, [50, 5000], expected)  # segment 2: one old record, largest 5000
    append_with_timestamps(log, [200], expected)  # segment 4: old, but after a young segment
    append_with_timestamps(log, [300, 310], expected)  # segment 5
    append_with_timestamps(log, [10], expected)  # segment 7: the active segment, very old
    assert bases(tmp_path) == [0, 2, 4, 5, 7]

    clock.now = 1100  # segment 0 is exactly retention.ms old: kept
    assert settled(log).apply_retention() == 0
    check_start(log, expected, 0)

    clock.now = 1101
    assert settled(log).apply_retention() == 1
    assert bases(tmp_path) == [2, 4, 5, 7]
    check_start(log, expected, 2)

    clock.now = 5500  # segment 2 is young: it and everything after it stay (oldest first, as Kafka)
    assert settled(log).apply_retention() == 0
    check_start(log, expected, 2)

    clock.now = 100_000  # everything is old, but the active segment is never deleted
    assert settled(log).apply_retention() == 3
    assert bases(tmp_path) == [7]
    check_start(log, expected, 7)
    assert settled(log).apply_retention() == 0

    # the log goes on and its start survives a clean and an unclean reopen
    append_with_timestamps(log, [100_000], expected)
    log.close()
    log = PartitionLog(tmp_path, cfg, clock=clock)
    check_start(log, expected, 7)
    abandon(log)
    log = PartitionLog(tmp_path, cfg, clock=clock)
    check_start(log, expected, 7)
    log.close()


def test_retention_ms_uses_the_largest_timestamp_after_reopen(tmp_path: Path) -> None:
    """After a reopen the segments' largest timestamps come from the indexes and headers: retention must
    decide exactly as before."""
    clock = Clock(0)
    cfg = one_batch_per_segment(retention_ms=1000, index_interval_bytes=0)
    log = PartitionLog(tmp_path, cfg, clock=clock)
    expected: list[Record] = []
    for largest in (100, 200, 5000, 300):
        append_with_timestamps(log, [largest - 1, largest, 0], expected)
    log.close()
    log = PartitionLog(tmp_path, cfg, clock=clock)
    clock.now = 1150
    assert settled(log).apply_retention() == 1
    clock.now = 5999
    assert settled(log).apply_retention() == 1
    check_start(log, expected, 6)
    log.close()


def test_records_without_timestamps_get_the_clock_time(tmp_path: Path) -> None:
    clock = Clock(50_000)
    cfg = one_batch_per_segment(retention_ms=1000)
    log = PartitionLog(tmp_path, cfg, clock=clock)
    expected: list[Record] = []
    append_and_expect(log, {"value": [b"a", b"b"]}, expected)
    clock.advance(2000)
    append_and_expect(log, {"value": [b"c"]}, expected)
    append_and_expect(log, {"value": [b"d"]}, expected)
    assert [r[1] for r in read_all(log)] == [50_000, 50_000, 52_000, 52_000]
    assert settled(log).apply_retention() == 1
    check_start(log, expected, 2)
    log.close()


# ---------------------------------------------------------------------------------------- retention.bytes


def test_retention_bytes_deletes_the_oldest_segments_over_the_limit(tmp_path: Path) -> None:
    clock = Clock()
    log = PartitionLog(tmp_path, one_batch_per_segment(), clock=clock)
    expected: list[Record] = []
    for i in range(6):
        append_with_timestamps(log, [clock.now] * (i + 1), expected)
    sizes = [p.stat().st_size for p in segment_files(tmp_path)]
    assert log.size_bytes == sum(sizes)
    starts = bases(tmp_path)
    log.close()

    # a limit that leaves the last three segments and a bit: the fourth from the end must stay too
    limit = sum(sizes[-3:]) + 1
    cfg = one_batch_per_segment(retention_bytes=limit)
    log = PartitionLog(tmp_path, cfg, clock=clock)
    deleted = settled(log).apply_retention()
    assert deleted == len(sizes) - 4
    remaining = [p.stat().st_size for p in segment_files(tmp_path)]
    assert remaining == sizes[deleted:]
    assert sum(remaining) >= limit > sum(remaining[1:])
    check_start(log, expected, starts[deleted])
    assert settled(log).apply_retention() == 0
    log.close()

    # exactly the size of the last three: the fourth from the end goes
    cfg = one_batch_per_segment(retention_bytes=sum(sizes[-3:]))
    log = PartitionLog(tmp_path, cfg, clock=clock)
    assert settled(log).apply_retention() == 1
    check_start(log, expected, starts[-3])
    log.close()

    # zero: everything but the active segment
    cfg = one_batch_per_segment(retention_bytes=0)
    log = PartitionLog(tmp_path, cfg, clock=clock)
    assert settled(log).apply_retention() == 2
    assert bases(tmp_path) == [starts[-1]]
    check_start(log, expected, starts[-1])
    assert settled(log).apply_retention() == 0
    assert read_all(log) == expected[starts[-1] :]
    log.close()


def test_retention_does_nothing_for_a_compact_only_topic(tmp_path: Path) -> None:
    clock = Clock(10**9)
    cfg = one_batch_per_segment(cleanup_policy="compact", retention_ms=0, retention_bytes=0)
    log = PartitionLog(tmp_path, cfg, clock=clock)
    expected: list[Record] = []
    for _ in range(3):
        append_with_timestamps(log, [0], expected)
    assert settled(log).apply_retention() == 0
    check_start(log, expected, 0)
    log.close()


def test_compact_delete_topic_applies_retention(tmp_path: Path) -> None:
    clock = Clock(10**9)
    cfg = one_batch_per_segment(cleanup_policy="compact,delete", retention_ms=1000)
    log = PartitionLog(tmp_path, cfg, clock=clock)
    expected: list[Record] = []
    for _ in range(3):
        append_with_timestamps(log, [0], expected)
    assert settled(log).apply_retention() == 2
    check_start(log, expected, 2)
    log.close()


# ---------------------------------------------------------------------------------------- rolling


def test_segment_ms_rolls_the_active_segment_by_age(tmp_path: Path) -> None:
    clock = Clock(0)
    cfg = config(segment_ms=1000)
    log = PartitionLog(tmp_path, cfg, clock=clock)
    expected: list[Record] = []
    append_with_timestamps(log, [1], expected)
    clock.now = 999
    append_with_timestamps(log, [2], expected)
    assert bases(tmp_path) == [0]
    clock.now = 1000
    append_with_timestamps(log, [3], expected)  # the segment is 1000 ms old: this append rolls
    assert bases(tmp_path) == [0, 2]
    clock.now = 1999
    append_with_timestamps(log, [4, 5], expected)
    assert bases(tmp_path) == [0, 2]
    clock.now = 10_000  # long idle: one roll, not one per elapsed segment.ms
    append_with_timestamps(log, [6], expected)
    append_with_timestamps(log, [7], expected)
    assert bases(tmp_path) == [0, 2, 5]
    assert read_all(log) == expected
    log.close()


def test_segment_ms_does_not_roll_an_empty_segment(tmp_path: Path) -> None:
    clock = Clock(0)
    log = PartitionLog(tmp_path, config(segment_ms=1000), clock=clock)
    clock.now = 5000
    expected: list[Record] = []
    append_with_timestamps(log, [1], expected)
    assert bases(tmp_path) == [0]
    log.close()


def test_segment_bytes_rolls_and_bounds_the_segment_files(tmp_path: Path) -> None:
    """segment.bytes bounds the segment files (as in Kafka, only a single batch may exceed it)."""
    segment_bytes = 4096
    log = PartitionLog(tmp_path, config(segment_bytes=segment_bytes), clock=Clock())
    expected: list[Record] = []
    for i in range(40):
        append_with_timestamps(log, list(range(1 + i % 7)), expected)
    assert read_all(log) == expected
    files = segment_files(tmp_path)
    assert len(files) > 5
    oversized = []
    for path in files:
        _, spans = batch_spans(path)
        if len(spans) > 1 and path.stat().st_size > segment_bytes:
            oversized.append(f"{path.name}: {path.stat().st_size} bytes in {len(spans)} batches")
    assert not oversized, f"segments over segment.bytes={segment_bytes}: {oversized}"
    log.close()


def test_roll_starts_a_new_segment_only_when_the_active_one_has_records(tmp_path: Path) -> None:
    log = PartitionLog(tmp_path, config(), clock=Clock())
    log.roll()
    assert bases(tmp_path) == [0]
    expected: list[Record] = []
    append_with_timestamps(log, [1, 2], expected)
    log.roll()
    log.roll()
    assert bases(tmp_path) == [0, 2]
    append_with_timestamps(log, [3], expected)
    assert read_all(log) == expected
    log.close()


# ---------------------------------------------------------------------------------------- flushing


def test_flush_messages_moves_the_recovery_point(tmp_path: Path) -> None:
    clock = Clock()
    log = PartitionLog(tmp_path, config(flush_messages=5), clock=clock)
    expected: list[Record] = []
    append_with_timestamps(log, [1, 2, 3], expected)
    assert read_recovery_point(tmp_path) is None
    append_with_timestamps(log, [4], expected)
    assert read_recovery_point(tmp_path) is None
    append_with_timestamps(log, [5], expected)
    assert read_recovery_point(tmp_path) == 5
    append_with_timestamps(log, [6, 7, 8, 9], expected)
    assert read_recovery_point(tmp_path) == 5
    append_with_timestamps(log, [10, 11, 12], expected)  # seven unflushed: one flush at the end
    assert read_recovery_point(tmp_path) == 12
    abandon(log)
    log = PartitionLog(tmp_path, config(flush_messages=5), clock=clock)
    assert read_all(log) == expected
    log.close()
    assert read_recovery_point(tmp_path) == 12


def test_flush_messages_one_flushes_every_append(tmp_path: Path) -> None:
    log = PartitionLog(tmp_path, config(flush_messages=1), clock=Clock())
    expected: list[Record] = []
    for i in range(4):
        append_with_timestamps(log, [i] * (i + 1), expected)
        assert read_recovery_point(tmp_path) == len(expected)
    log.close()


def test_flush_ms_moves_the_recovery_point(tmp_path: Path) -> None:
    clock = Clock(0)
    log = PartitionLog(tmp_path, config(flush_ms=1000), clock=clock)
    expected: list[Record] = []
    append_with_timestamps(log, [1], expected)
    clock.now = 999
    append_with_timestamps(log, [2], expected)
    assert read_recovery_point(tmp_path) is None
    clock.now = 1000
    append_with_timestamps(log, [3], expected)
    assert read_recovery_point(tmp_path) == 3
    clock.now = 1500
    append_with_timestamps(log, [4], expected)
    assert read_recovery_point(tmp_path) == 3
    log.close()
    assert read_recovery_point(tmp_path) == 4


def test_rolled_segments_move_the_recovery_point_after_their_fsync(tmp_path: Path) -> None:
    log = PartitionLog(tmp_path, one_batch_per_segment(), clock=Clock())
    expected: list[Record] = []
    for i in range(4):
        append_with_timestamps(log, [i] * 2, expected)
    wait_for_background_flushes(log)
    assert read_recovery_point(tmp_path) == 6  # the base of the active segment
    log.flush()
    assert read_recovery_point(tmp_path) == 8
    log.close()


@pytest.fixture
def blocked_flusher() -> Iterator[threading.Event]:
    with blocked_background_flusher() as gate:
        yield gate


def test_flush_does_not_claim_rolled_segments_that_are_not_fsynced_yet(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, blocked_flusher: threading.Event
) -> None:
    """The recovery point promises that everything below it was fsynced. A flush() right after a roll,
    while the rolled segment still waits for its background fsync, must not move it past that segment."""
    synced: list[str] = []
    real_fsync = os.fsync

    def recording_fsync(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", recording_fsync)
    log = PartitionLog(tmp_path, config(), clock=Clock())
    expected: list[Record] = []
    append_with_timestamps(log, [1, 2, 3], expected)
    log.roll()
    append_with_timestamps(log, [4], expected)
    log.flush()
    rolled = str(segment_files(tmp_path)[0])
    rp = read_recovery_point(tmp_path)
    assert rolled in synced or rp is None or rp <= 0, (
        f"recovery point {rp} covers {Path(rolled).name}, which was never fsynced (fsynced: {synced})"
    )
    blocked_flusher.set()
    log.close()


def test_close_after_retention_deleted_a_segment_waiting_for_its_fsync(
    tmp_path: Path, blocked_flusher: threading.Event
) -> None:
    """Retention may delete a rolled segment before the background thread fsyncs it; that fsync has
    nothing left to do and must not break close() (nor leave the log without its clean-shutdown marker)."""
    clock = Clock()
    cfg = one_batch_per_segment(retention_bytes=0)
    log = PartitionLog(tmp_path, cfg, clock=clock)
    expected: list[Record] = []
    append_with_timestamps(log, [1, 2], expected)
    append_with_timestamps(log, [3], expected)  # rolls: segment 0 waits for the blocked flusher
    assert log.apply_retention() == 1
    blocked_flusher.set()
    log.close()
    assert (tmp_path / "clean-shutdown").exists()
    assert read_recovery_point(tmp_path) == 3
    log = PartitionLog(tmp_path, cfg, clock=clock)
    check_start(log, expected, 2)
    log.close()
