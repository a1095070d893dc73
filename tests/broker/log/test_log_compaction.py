"""Log compaction: the latest record per key survives, offsets never change, tombstones expire after
delete.retention.ms, the active segment is left alone, and a crash at any step of a segment swap leaves
a valid log that compacts again."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest

from log_helpers import (
    Clock,
    Record,
    abandon,
    append_and_expect,
    batch_records,
    batch_spans,
    blocked_background_flusher,
    brute_offset_for_time,
    config,
    file_bytes,
    read_all,
    read_from,
    segment_base,
    segment_files,
    settled,
)
from sparklog.broker.log import PartitionLog, compact, iter_segment
from sparklog.errors import InvalidRecord

DELETE_RETENTION_MS = 1000
CFG = config(
    cleanup_policy="compact", segment_bytes=4096, delete_retention_ms=DELETE_RETENTION_MS, index_interval_bytes=0
)


class Crash(Exception):
    pass


def fill(log: PartitionLog, rng: random.Random, appends: int = 24, keys: int = 8) -> list[Record]:
    """Appends of a few records each over a small key space; about one in eight values is a tombstone."""
    expected: list[Record] = []
    for _ in range(appends):
        n = rng.randint(1, 5)
        columns = {
            "key": [f"k{rng.randrange(keys)}".encode() for _ in range(n)],
            "value": [None if rng.random() < 0.125 else f"v{len(expected) + i}".encode() for i in range(n)],
        }
        append_and_expect(log, columns, expected)
        log.clock.advance(rng.randint(0, 3))  # type: ignore[attr-defined]
    return expected


def segment_records(directory: Path) -> dict[int, list[Record]]:
    """What each segment file holds, read with plain pyarrow."""
    return {
        segment_base(p): [r for batch, _ in iter_segment(str(p)) for r in batch_records(batch)]
        for p in segment_files(directory)
    }


def compacted(records: list[Record], active_base: int, now: int) -> list[Record]:
    """The model: below the active segment keep a record only if it is its key's latest and not a
    tombstone older than delete.retention.ms."""
    latest = {r[2]: r[0] for r in records}
    return [
        r
        for r in records
        if r[0] >= active_base or (latest[r[2]] == r[0] and not (r[3] is None and r[1] < now - DELETE_RETENTION_MS))
    ]


def latest_values(records: list[Record]) -> dict[bytes, object]:
    return {r[2]: r[3] for r in records}


def check_compacted_log(log: PartitionLog, model: list[Record], end: int) -> None:
    assert log.log_end_offset == end
    assert read_all(log) == model
    offsets = [r[0] for r in model]
    for gap in sorted(set(range(log.log_start_offset, end)) - set(offsets))[:20]:  # reads from removed offsets
        assert read_from(log, gap) == [r for r in model if r[0] >= gap]
    for ts in sorted({r[1] for r in model}):
        assert log.offset_for_time(ts) == brute_offset_for_time(model, ts)


@pytest.fixture
def clock() -> Clock:
    return Clock(10_000_000)


def test_compaction_keeps_the_latest_value_per_key_and_the_offsets(tmp_path: Path, clock: Clock) -> None:
    log = PartitionLog(tmp_path, CFG, clock=clock)
    expected = fill(log, random.Random(1))
    segments_before = segment_records(tmp_path)
    assert len(segments_before) >= 4
    active = segment_files(tmp_path)[-1]
    active_bytes = active.read_bytes()
    active_base = segment_base(active)
    assert segments_before[active_base], "the active segment must hold records for this test"
    end = log.log_end_offset

    result = compact(settled(log))

    model = compacted(expected, active_base, clock.now)
    assert len(model) < len(expected)
    check_compacted_log(log, model, end)
    assert latest_values(model) == latest_values(expected)
    # offsets are unchanged, records never move between segments, the active segment is untouched
    after = segment_records(tmp_path)
    assert set(after) == set(segments_before)
    for base, records in after.items():
        assert records == [r for r in segments_before[base] if r in model]
    assert active.read_bytes() == active_bytes
    assert result.records_before == active_base
    assert result.records_after == sum(1 for r in model if r[0] < active_base)
    assert result.segments_cleaned == sum(
        1 for base, recs in segments_before.items() if base != active_base and after[base] != recs
    )

    # nothing left to do: a second pass changes nothing
    files = file_bytes(tmp_path, log)
    assert compact(settled(log)).segments_cleaned == 0
    assert file_bytes(tmp_path, log) == files

    # appends go on at the same end
    append_and_expect(log, {"key": [b"k0"], "value": [b"last"]}, model)
    assert read_all(log) == model
    log.close()
    log = PartitionLog(tmp_path, CFG, clock=clock)
    check_compacted_log(log, model, end + 1)
    abandon(log)
    log = PartitionLog(tmp_path, CFG, clock=clock)  # unclean reopen: recovery of compacted segments
    assert log.recovered_bytes == 0
    check_compacted_log(log, model, end + 1)
    log.close()


def test_compaction_with_an_empty_active_segment(tmp_path: Path, clock: Clock) -> None:
    log = PartitionLog(tmp_path, CFG, clock=clock)
    expected = fill(log, random.Random(2))
    log.roll()
    end = log.log_end_offset
    compact(settled(log))
    model = compacted(expected, end, clock.now)
    check_compacted_log(log, model, end)
    # every key now appears once (tombstones are young, so they stay too)
    assert sorted(r[2] for r in model) == sorted(set(r[2] for r in expected))
    assert log.append({"key": [b"k1"], "value": [b"x"]}).base_offset == end
    log.close()


def test_tombstones_are_kept_until_delete_retention_has_passed(tmp_path: Path, clock: Clock) -> None:
    log = PartitionLog(tmp_path, CFG, clock=clock)
    start = clock.now
    log.append({"key": [b"a", b"b", b"c"], "value": [b"a1", b"b1", b"c1"]})
    log.append({"key": [b"a", b"c"], "value": [None, None]})  # tombstones for a and c, offsets 3, 4
    log.append({"key": [b"c"], "value": [b"c2"]})  # c comes back: its tombstone is no longer the latest
    log.roll()
    log.append({"key": [b"b"], "value": [None]})  # a tombstone in the active segment, offset 6

    def contents() -> list[tuple[int, bytes, bytes | None]]:
        return [(r[0], r[2], r[3]) for r in read_all(log)]

    # a1 and b1 are superseded (b by the tombstone in the active segment), c's tombstone too; the
    # young tombstone of a stays so that consumers learn about the delete
    compact(settled(log))
    assert contents() == [(3, b"a", None), (5, b"c", b"c2"), (6, b"b", None)]

    clock.now = start + DELETE_RETENTION_MS - 1
    compact(settled(log))
    assert contents() == [(3, b"a", None), (5, b"c", b"c2"), (6, b"b", None)]

    clock.now = start + DELETE_RETENTION_MS + 1
    compact(settled(log))
    assert contents() == [(5, b"c", b"c2"), (6, b"b", None)]
    assert log.log_end_offset == 7

    # the active segment is never cleaned, however old its tombstone
    clock.now += 10 * DELETE_RETENTION_MS
    compact(settled(log))
    assert contents() == [(5, b"c", b"c2"), (6, b"b", None)]
    log.roll()
    compact(settled(log))
    assert contents() == [(5, b"c", b"c2")]
    assert log.log_end_offset == 7
    log.close()
    log = PartitionLog(tmp_path, CFG, clock=clock)
    assert contents() == [(5, b"c", b"c2")]
    assert log.append({"key": [b"a"], "value": [b"a2"]}).base_offset == 7
    log.close()


@pytest.mark.parametrize("policy", ["compact", "compact,delete"])
@pytest.mark.parametrize(
    "bad",
    [
        {"key": [b"a", None], "value": [b"1", b"2"]},
        {"key": [None], "value": [b"1"]},
        {"value": [b"1", b"2"]},
    ],
    ids=["one-null-key", "null-key", "no-key-column"],
)
def test_records_without_a_key_are_refused(tmp_path: Path, clock: Clock, policy: str, bad: dict) -> None:
    cfg = config(cleanup_policy=policy, segment_bytes=4096)
    log = PartitionLog(tmp_path, cfg, clock=clock)
    expected: list[Record] = []
    append_and_expect(log, {"key": [b"a", b"b"], "value": [b"x", None]}, expected)
    files = file_bytes(tmp_path, log)
    with pytest.raises(InvalidRecord):
        log.append(bad)
    assert log.log_end_offset == 2
    assert read_all(log) == expected
    assert file_bytes(tmp_path, log) == files
    append_and_expect(log, {"key": [b"c"], "value": [b"y"]}, expected)
    assert read_all(log) == expected
    log.close()


def test_null_keys_are_fine_without_compaction(tmp_path: Path, clock: Clock) -> None:
    log = PartitionLog(tmp_path, config(cleanup_policy="delete"), clock=clock)
    expected: list[Record] = []
    append_and_expect(log, {"key": [None, b"a"], "value": [b"1", b"2"]}, expected)
    assert read_all(log) == expected
    assert compact(settled(log)).segments_cleaned == 0  # not a compacted topic: nothing happens
    assert read_all(log) == expected
    log.close()


def crash_on(step: str, occurrence: int):
    calls = {"count": 0}

    def hook(name: str) -> None:
        if name == step:
            calls["count"] += 1
            if calls["count"] == occurrence:
                raise Crash(f"{step} #{occurrence}")

    return hook


@pytest.mark.parametrize("occurrence", [1, 2, 3])
@pytest.mark.parametrize("step", ["written", "indexes-removed", "swapped"])
def test_crash_during_compaction(tmp_path: Path, clock: Clock, step: str, occurrence: int) -> None:
    log = PartitionLog(tmp_path, CFG, clock=clock)
    expected = fill(log, random.Random(3), appends=30)
    end = log.log_end_offset
    before = segment_records(tmp_path)
    bases = sorted(before)
    active_base = bases[-1]
    model = compacted(expected, active_base, clock.now)
    post = {base: [r for r in recs if r in model] for base, recs in before.items()}
    changed = [base for base in bases if post[base] != before[base]]
    assert len(changed) >= 3, "the test needs at least three segments to clean"

    with pytest.raises(Crash):
        compact(settled(log), crash_hook=crash_on(step, occurrence))
    abandon(log)

    log = PartitionLog(tmp_path, CFG, clock=clock)
    assert not (tmp_path / ".cleaning").exists()
    assert log.log_end_offset == end
    now = segment_records(tmp_path)
    assert sorted(now) == bases
    crashed = changed[occurrence - 1]
    for base in bases:
        # each segment holds either its old or its compacted content, never anything else ...
        assert now[base] in (before[base], post[base]), f"segment {base}"
        # ... and exactly the one the crash point implies
        done = base < crashed or (base == crashed and step == "swapped")
        assert now[base] == (post[base] if done else before[base]), f"segment {base}"
    records = read_all(log)
    assert records == [r for base in bases for r in now[base]]
    assert latest_values(records) == latest_values(expected)  # no key lost its latest value
    for ts in sorted({r[1] for r in records}):
        assert log.offset_for_time(ts) == brute_offset_for_time(records, ts)

    # compaction picks up where it left off
    compact(settled(log))
    check_compacted_log(log, model, end)
    assert segment_records(tmp_path) == post
    append_and_expect(log, {"key": [b"k1"], "value": [b"after"]}, model)
    log.close()
    log = PartitionLog(tmp_path, CFG, clock=clock)
    check_compacted_log(log, model, end + 1)
    log.close()


def test_compaction_while_a_rolled_segment_waits_for_its_fsync(tmp_path: Path, clock: Clock) -> None:
    """Compaction closes and replaces segments; a background fsync still queued for one of them has
    nothing left to do and must not break the log's close()."""
    with blocked_background_flusher() as gate:
        log = PartitionLog(tmp_path, CFG, clock=clock)
        expected = fill(log, random.Random(5), appends=12)
        active_base = segment_base(segment_files(tmp_path)[-1])
        assert compact(log).segments_cleaned >= 1
        gate.set()
        log.close()
    assert (tmp_path / "clean-shutdown").exists()
    log = PartitionLog(tmp_path, CFG, clock=clock)
    assert read_all(log) == compacted(expected, active_base, clock.now)
    log.close()


def index_entries(path: Path) -> list[tuple[int, int]]:
    data = np.fromfile(path, dtype=np.dtype([("key", "<i8"), ("value", "<i8")]))
    return [(int(k), int(v)) for k, v in data]


def test_compacted_segments_get_their_indexes_rebuilt(tmp_path: Path, clock: Clock) -> None:
    """Compaction removes a segment's indexes before the swap and (docs/architecture.md) rebuilds them:
    with index.interval.bytes=0 every batch of every segment has its offset index entry again."""
    log = PartitionLog(tmp_path, CFG, clock=clock)
    fill(log, random.Random(6))
    assert compact(settled(log)).segments_cleaned >= 2
    log.close()
    for reopen in (False, True):
        if reopen:
            PartitionLog(tmp_path, CFG, clock=clock).close()
        for path in segment_files(tmp_path):
            _, spans = batch_spans(path)
            expected = [(base, position) for position, _, base, _ in spans]
            assert index_entries(path.with_suffix(".index")) == expected, f"{path.name} (reopened: {reopen})"
            assert len(index_entries(path.with_suffix(".timeindex"))) == len(spans)
