"""PartitionLog.truncate_to (a follower cutting the log back to its leader's): what stays, what goes, what
happens to the offsets, and to batches a reader already holds."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from log_helpers import (
    Clock,
    Record,
    abandon,
    append_and_expect,
    batch_records,
    brute_offset_for_time,
    config,
    copy_dir,
    random_columns,
    read_all,
    read_from,
    read_recovery_point,
    segment_base,
    segment_files,
    settled,
)
from sparklog.broker.log import PartitionLog
from sparklog.errors import OffsetOutOfRange

CFG = config(segment_bytes=4096, index_interval_bytes=0)


@pytest.fixture
def original(tmp_path: Path) -> tuple[Path, list[Record]]:
    directory = tmp_path / "original"
    rng = random.Random(9)
    log = PartitionLog(directory, CFG, clock=Clock())
    expected: list[Record] = []
    for _ in range(20):
        append_and_expect(log, random_columns(rng, rng.randint(1, 8)), expected)
    assert len(segment_files(directory)) >= 4
    log.close()
    return directory, expected


def test_truncate_to_every_offset(original: tuple[Path, list[Record]], tmp_path: Path) -> None:
    directory, expected = original
    end = len(expected)
    for offset in [*range(0, end, 3), end - 1, end, end + 5]:
        work = copy_dir(directory, tmp_path / "work")
        log = PartitionLog(work, CFG, clock=Clock())
        log.truncate_to(offset)
        kept = expected[: min(offset, end)]
        assert log.log_end_offset == min(offset, end), f"truncate_to({offset})"
        assert read_all(log) == kept
        for o in range(max(0, len(kept) - 5), len(kept)):
            assert read_from(log, o) == kept[o:]
        with pytest.raises(OffsetOutOfRange):
            log.read(len(kept) + 1)
        for ts in (0, 2500, 5000):
            assert log.offset_for_time(ts) == brute_offset_for_time(kept, ts)
        rp = read_recovery_point(work)
        assert rp is None or rp <= len(kept)
        # every segment file left holds only records below the cut
        assert all(segment_base(p) <= max(len(kept), 0) for p in segment_files(work))
        # appends continue right at the cut, and everything survives an unclean and a clean reopen
        now = list(kept)
        append_and_expect(log, {"key": [b"new"], "value": [b"after truncate"]}, now)
        abandon(log)
        log = PartitionLog(work, CFG, clock=Clock())
        assert read_all(log) == now
        log.close()
        log = PartitionLog(work, CFG, clock=Clock())
        assert read_all(log) == now
        log.close()


def test_truncate_below_the_log_start_restarts_the_log_there(tmp_path: Path) -> None:
    log = PartitionLog(tmp_path, config(segment_bytes=1024, retention_bytes=0), clock=Clock())
    expected: list[Record] = []
    for i in range(4):
        append_and_expect(log, {"key": [b"k"], "value": [b"v%d" % i]}, expected)
    assert settled(log).apply_retention() == 3
    assert log.log_start_offset == 3
    log.truncate_to(2)
    assert (log.log_start_offset, log.log_end_offset) == (2, 2)
    assert log.read(2) == []
    assert log.append({"value": [b"x"]}).base_offset == 2
    log.close()
    log = PartitionLog(tmp_path, config(segment_bytes=1024), clock=Clock())
    assert [r[0] for r in read_all(log)] == [2]
    log.close()


def test_batches_already_read_stay_intact_after_truncate(tmp_path: Path) -> None:
    """read() hands out zero-copy batches over the memory-mapped segment. A truncate_to (and the appends
    that follow it) must not change batches a reader already holds: they are the reader's data.
    (The log is kept inside one memory page: past a page boundary the same bug is a SIGBUS.)"""
    log = PartitionLog(tmp_path, config(), clock=Clock())
    expected: list[Record] = []
    for i in range(3):
        append_and_expect(log, {"key": [b"k"] * 3, "value": [b"value-%d" % i] * 3, "timestamp": [i] * 3}, expected)
    assert segment_files(tmp_path)[0].stat().st_size < 4096
    held = log.read(6)
    assert [r for b in held for r in batch_records(b)] == expected[6:]
    log.truncate_to(6)
    log.append({"key": [b"z"] * 3, "value": [b"other"] * 3, "timestamp": [9] * 3})
    assert [r for b in held for r in batch_records(b)] == expected[6:]
    log.close()
