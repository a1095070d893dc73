"""Bounded broker resources in the storage engine: producer ids expire (``producer.id.expiration.ms``)
and the producer table has a size cap; open files stay bounded whatever the number of segments (only
the active segment keeps its files open, the others' memory maps and indexes are loaded on demand
within a process-wide cache); ``segment.ms`` has a floor."""

from __future__ import annotations

import os
import random
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from log_helpers import (
    Clock,
    Record,
    abandon,
    append_and_expect,
    brute_offset_for_time,
    config,
    read_all,
    read_from,
    records_of,
    settled,
    wait_for_background_flushes,
)
from sparklog.broker.log import PartitionLog, compact
from sparklog.broker.log.producer_state import (
    DEFAULT_PRODUCER_ID_EXPIRATION_MS,
    ProducerStateTable,
)
from sparklog.broker.log.segment import SEGMENT_CACHE
from sparklog.broker.log_manager import LogManager
from sparklog.config import TopicConfig
from sparklog.errors import DuplicateSequence, InvalidConfig, OffsetOutOfRange, OutOfOrderSequence

DAY_MS = 86_400_000
SEGMENTS = 520
ONE_BATCH_PER_SEGMENT = config(segment_bytes=1024)  # a stored batch of a ~700-byte value fills a segment


# ------------------------------------------------------------------------------------- producer ids
def test_producer_id_expiration_defaults_to_kafkas_one_day(tmp_path: Path) -> None:
    assert DEFAULT_PRODUCER_ID_EXPIRATION_MS == DAY_MS
    manager = LogManager(tmp_path)
    assert manager.producer_id_expiration_ms == DAY_MS
    manager.close()


def test_producer_ids_expire_in_the_maintenance_pass_and_a_returning_producer_is_new(tmp_path: Path) -> None:
    expiration = 60_000
    manager = LogManager(tmp_path, producer_id_expiration_ms=expiration)
    log = manager.get("t", 0, TopicConfig())
    clock = Clock(10_000_000)
    log.clock = clock
    first = log.append({"value": [b"a", b"b"]}, producer_id=7, producer_seq=0)
    log.append({"value": [b"c"]}, producer_id=7, producer_seq=2)
    clock.advance(30_000)
    log.append({"value": [b"d"]}, producer_id=8, producer_seq=0)

    clock.advance(expiration - 30_000 - 1)  # producer 7 last wrote expiration - 1 ms ago
    manager.maintain()
    assert 7 in log.producers and 8 in log.producers
    assert log.append({"value": [b"a", b"b"]}, producer_id=7, producer_seq=0).duplicate  # still known

    clock.advance(1)  # now exactly expiration ms after producer 7's last write: forgotten, 8 is not
    manager.maintain()
    assert 7 not in log.producers and 8 in log.producers
    end = log.log_end_offset
    again = log.append({"value": [b"a", b"b"]}, producer_id=7, producer_seq=0)  # a new producer
    assert not again.duplicate and again.base_offset == end != first.base_offset
    assert log.append({"value": [b"e"]}, producer_id=7, producer_seq=2).base_offset == end + 2
    with pytest.raises(OutOfOrderSequence):  # and it is tracked again from its new start
        log.append({"value": [b"f"]}, producer_id=7, producer_seq=9)

    clock.advance(expiration)
    manager.maintain()
    assert len(log.producers) == 0
    # a producer that comes back after expiry with its next sequence (not 0) is accepted too
    assert not log.append({"value": [b"g"]}, producer_id=8, producer_seq=41).duplicate
    assert [r[3] for r in read_all(log)] == [b"a", b"b", b"c", b"d", b"a", b"b", b"e", b"g"]
    manager.close()


def test_without_expiration_a_stale_producer_is_still_refused(tmp_path: Path) -> None:
    """The counterpart of the test above: within producer.id.expiration.ms sequences are enforced."""
    manager = LogManager(tmp_path, producer_id_expiration_ms=DAY_MS)
    log = manager.get("t", 0, TopicConfig())
    clock = Clock(10_000_000)
    log.clock = clock
    log.append({"value": [b"a"]}, producer_id=7, producer_seq=0)
    log.append({"value": [b"b"]}, producer_id=7, producer_seq=1)
    clock.advance(DAY_MS - 1)
    manager.maintain()
    with pytest.raises(OutOfOrderSequence):
        log.append({"value": [b"c"]}, producer_id=7, producer_seq=5)
    with pytest.raises(DuplicateSequence):
        log.append({"value": [b"a", b"x"]}, producer_id=7, producer_seq=0)
    manager.close()


def test_producer_state_rebuilt_on_open_expires_by_the_batches_max_timestamp(tmp_path: Path) -> None:
    clock = Clock(10_000_000)
    log = PartitionLog(tmp_path / "p", TopicConfig(), clock=clock)
    log.append({"value": [b"a"], "timestamp": [9_000_000]}, producer_id=1, producer_seq=0)  # older records
    log.append({"value": [b"b"]}, producer_id=2, producer_seq=0)  # stamped now: 10_000_000
    log.append({"value": [b"c"], "timestamp": [10_500_000]}, producer_id=3, producer_seq=0)  # ahead of now
    log.close()

    clock.advance(1_000)
    log = PartitionLog(tmp_path / "p", TopicConfig(), clock=clock)
    assert log.producers.last_write_ms(1) == 9_000_000
    assert log.producers.last_write_ms(2) == 10_000_000
    assert log.producers.last_write_ms(3) == 10_001_000  # never later than the clock when rebuilt
    assert log.producers.remove_expired(clock(), 1_000) == 2  # 1 and 2, not 3
    assert 3 in log.producers and len(log.producers) == 1
    assert log.producers.remove_expired(clock() + 1_000, 1_000) == 1
    log.close()


def test_truncation_keeps_the_remaining_producers_last_write(tmp_path: Path) -> None:
    clock = Clock(10_000_000)
    log = PartitionLog(tmp_path / "p", TopicConfig(), clock=clock)
    log.append({"value": [b"a"]}, producer_id=1, producer_seq=0)
    clock.advance(500)
    log.append({"value": [b"b"]}, producer_id=1, producer_seq=1)
    log.truncate_to(1)
    assert log.producers.last_write_ms(1) == 10_000_500
    log.close()


def test_the_producer_table_is_bounded_least_recently_written_first() -> None:
    table = ProducerStateTable(max_producers=3)
    for pid in range(3):
        table.record(pid, 0, 1, pid, pid, last_write_ms=100 + pid)
    table.record(0, 1, 1, 10, 10, last_write_ms=200)  # producer 0 wrote again: 1 is now the oldest
    table.record(3, 0, 1, 11, 11, last_write_ms=201)
    assert len(table) == 3
    assert 1 not in table and {0, 2, 3} <= {pid for pid in range(4) if pid in table}
    assert table.duplicate_of(1, 5, 1) is None  # evicted: a new producer
    assert table.duplicate_of(0, 1, 1) is not None


# -------------------------------------------------------------------------------------- open files
@pytest.fixture
def cache_limit(monkeypatch: pytest.MonkeyPatch) -> Iterator[int]:
    """A small process-wide cache of loaded segments, so that reads evict and load again."""
    SEGMENT_CACHE.release_all()
    monkeypatch.setattr(SEGMENT_CACHE, "limit", 16)
    yield 16
    SEGMENT_CACHE.release_all()


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def mapped_files(directory: Path) -> int:
    """Memory maps of the process over files of ``directory``."""
    with open("/proc/self/maps") as maps:
        return sum(1 for line in maps if str(directory) in line)


def fill_segments(log: PartitionLog, rng: random.Random, count: int = SEGMENTS) -> list[Record]:
    expected: list[Record] = []
    for i in range(count):
        append_and_expect(log, {"key": [b"k%d" % (i % 7)], "value": [rng.randbytes(700)]}, expected)
        log.clock.advance(1)  # type: ignore[attr-defined]
    wait_for_background_flushes(log)
    return expected


def test_hundreds_of_rolled_segments_keep_open_files_bounded(tmp_path: Path, cache_limit: int) -> None:
    before = open_fds()
    log = PartitionLog(tmp_path / "p", ONE_BATCH_PER_SEGMENT, clock=Clock())
    expected = fill_segments(log, random.Random(5))
    assert len(log.segments) == SEGMENTS
    # the active segment's record file and two indexes (the old code: three per segment, 1,560 here)
    assert open_fds() - before <= 3
    assert [s for s in log.segments[:-1] if s.holds_files] == []

    # every record reads back byte-identical, from the start and from each offset, and by time
    assert read_all(log) == expected
    for offset in range(0, SEGMENTS, 37):
        assert read_from(log, offset) == expected[offset:]
    for ts in sorted({r[1] for r in expected})[::41]:
        assert log.offset_for_time(ts) == brute_offset_for_time(expected, ts)
    assert open_fds() - before <= 3
    assert len(SEGMENT_CACHE) <= cache_limit
    assert mapped_files(tmp_path) <= cache_limit + 1  # the cache's segments and the active one

    log.close()
    assert open_fds() == before
    del log


def test_batches_read_before_a_segment_is_dropped_or_deleted_stay_intact(tmp_path: Path, cache_limit: int) -> None:
    log = PartitionLog(tmp_path / "p", config(segment_bytes=1024, retention_ms=1000), clock=Clock(10_000))
    expected = fill_segments(log, random.Random(6), count=40)
    held = log.read(3, max_bytes=1)  # a zero-copy batch over segment 3's memory map
    assert records_of(held) == expected[3:4]
    SEGMENT_CACHE.release_all()  # the segment drops its map and indexes; the reader's buffer keeps the map
    log.clock.advance(100_000)  # type: ignore[attr-defined]
    assert settled(log).apply_retention() == 39  # and then the file goes
    assert records_of(held) == expected[3:4]
    log.close()


def test_a_log_reopened_with_lazily_loaded_segments_reads_everything(tmp_path: Path, cache_limit: int) -> None:
    directory = tmp_path / "p"
    log = PartitionLog(directory, ONE_BATCH_PER_SEGMENT, clock=Clock())
    expected = fill_segments(log, random.Random(7), count=300)
    log.close()

    before = open_fds()
    log = PartitionLog(directory, ONE_BATCH_PER_SEGMENT, clock=Clock(2_000_000))  # a clean open
    assert open_fds() - before <= 3 and len(SEGMENT_CACHE) <= cache_limit
    for _ in range(2):  # the second time every segment is loaded again after being dropped
        assert read_all(log) == expected
        assert [log.offset_for_time(ts) for ts in (0, expected[150][1], expected[-1][1])] == [0, 150, 299]
        SEGMENT_CACHE.release_all()
        assert mapped_files(directory) <= 1
    expected += fill_segments(log, random.Random(8), count=20)
    assert read_all(log) == expected
    assert open_fds() - before <= 3

    abandon(log)  # no clean shutdown: the next open verifies from the recovery point on
    log = PartitionLog(directory, ONE_BATCH_PER_SEGMENT, clock=Clock(3_000_000))
    assert read_all(log) == expected
    assert open_fds() - before <= 3
    log.close()
    assert open_fds() == before


def test_truncation_into_a_dropped_segment_then_appends(tmp_path: Path, cache_limit: int) -> None:
    log = PartitionLog(tmp_path / "p", ONE_BATCH_PER_SEGMENT, clock=Clock())
    expected = fill_segments(log, random.Random(9), count=60)
    SEGMENT_CACHE.release_all()
    before = open_fds()
    log.truncate_to(25)  # segments 25.. go; segment 24, closed and dropped, becomes the active one
    assert log.log_end_offset == 25 and read_all(log) == expected[:25]
    append_and_expect(log, {"key": [b"k"], "value": [b"after"]}, expected := expected[:25])
    assert read_all(log) == expected
    assert open_fds() - before <= 3
    log.close()
    log = PartitionLog(tmp_path / "p", ONE_BATCH_PER_SEGMENT, clock=Clock())
    assert read_all(log) == expected
    log.close()


def test_compaction_and_stale_readers_of_dropped_segments(tmp_path: Path, cache_limit: int) -> None:
    cfg = config(cleanup_policy="compact", segment_bytes=1024, delete_retention_ms=0)
    log = PartitionLog(tmp_path / "p", cfg, clock=Clock())
    expected = fill_segments(log, random.Random(10), count=80)
    old_segments = list(log.segments)  # what a reader that started before the compaction holds
    SEGMENT_CACHE.release_all()
    result = compact(settled(log))
    assert result.segments_cleaned > 0
    latest = {r[2]: r[0] for r in expected}
    kept = [r for r in expected if latest[r[2]] == r[0] or r[0] >= log.active.base_offset]
    assert read_all(log) == kept
    # a stale segment object still reads what its file held before the swap (or nothing), never
    # the new file through its old positions
    stale = [s for s in old_segments[:-1] if s not in log.segments]
    assert stale and all(s.closed for s in stale)
    for segment in old_segments[:-1]:
        batches, _, _ = segment.read(segment.base_offset, 1 << 20)
        got = records_of(b for b, _ in batches)
        assert got == [r for r in expected if segment.base_offset <= r[0] < segment.next_offset]
    SEGMENT_CACHE.release_all()
    assert read_all(log) == kept
    log.close()


def test_a_closed_segment_reads_what_it_held_and_never_maps_a_new_file(tmp_path: Path, cache_limit: int) -> None:
    log = PartitionLog(tmp_path / "p", ONE_BATCH_PER_SEGMENT, clock=Clock())
    expected = fill_segments(log, random.Random(12), count=6)
    kept, deleted = log.segments[1], log.segments[2]
    SEGMENT_CACHE.release_all()  # neither holds a memory map now
    kept.close()  # maps the file again, for readers still holding the object
    replacement = tmp_path / "replacement"
    replacement.write_bytes(deleted.path.read_bytes())
    os.replace(replacement, kept.path)  # the file is replaced (as compaction does)
    batches, _, _ = kept.read(1, 1 << 20)
    assert records_of(b for b, _ in batches) == expected[1:2]
    deleted.delete()
    deleted.path.write_bytes(kept.path.read_bytes())  # another file appears under the same name
    with pytest.raises(FileNotFoundError):
        deleted.read(2, 1 << 20)
    abandon(log)


def test_the_maintenance_pass_drops_idle_segments(tmp_path: Path, cache_limit: int) -> None:
    manager = LogManager(tmp_path, segment_idle_s=0)
    log = manager.get("t", 0, ONE_BATCH_PER_SEGMENT)
    log.clock = Clock()
    expected = fill_segments(log, random.Random(11), count=30)
    assert read_all(log) == expected
    assert len(SEGMENT_CACHE) > 0 and mapped_files(tmp_path) > 1
    manager.maintain()
    assert len(SEGMENT_CACHE) == 0
    assert mapped_files(tmp_path) <= 1  # the active segment's
    assert read_all(log) == expected
    manager.close()


# ---------------------------------------------------------------------------------------- segment.ms
@pytest.mark.parametrize("value", [0, 1, 999])
def test_segment_ms_below_one_second_is_refused(value: int) -> None:
    with pytest.raises(InvalidConfig, match=r"segment\.ms must be >= 1000"):
        config(segment_ms=value)
    assert config(segment_ms=1000).segment_ms == 1000


def test_concurrent_readers_while_segments_roll_are_dropped_and_deleted(tmp_path: Path, cache_limit: int) -> None:
    """Readers on other threads, a tiny cache (every read loads and evicts), rolls on every append and
    retention deleting the oldest segments: every read returns exactly the records stored."""
    SEGMENT_CACHE.limit = 2
    log = PartitionLog(tmp_path / "p", config(segment_bytes=1024, retention_bytes=60 * 1024), clock=Clock())
    expected = fill_segments(log, random.Random(13), count=40)
    errors: list[BaseException] = []
    done = threading.Event()

    def reader(seed: int) -> None:
        rng = random.Random(seed)
        try:
            while not done.is_set():
                start, end = log.log_start_offset, log.log_end_offset
                offset = rng.randrange(start, end)
                try:
                    got = records_of(log.read(offset, max_bytes=rng.choice([1, 4096, 1 << 20])))
                except OffsetOutOfRange:
                    continue  # retention deleted it meanwhile
                assert got and got[0][0] <= offset
                assert got == expected[got[0][0] : got[-1][0] + 1]
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=reader, args=(seed,)) for seed in range(3)]
    for thread in threads:
        thread.start()
    rng = random.Random(14)
    for i in range(200):
        append_and_expect(log, {"key": [b"k"], "value": [rng.randbytes(700)]}, expected)
        if i % 10 == 0:
            log.apply_retention()
            SEGMENT_CACHE.release_all()
    done.set()
    for thread in threads:
        thread.join()
    assert errors == []
    wait_for_background_flushes(log)
    assert read_all(log) == expected[log.log_start_offset :]
    log.close()
