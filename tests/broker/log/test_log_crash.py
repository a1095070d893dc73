"""Crash recovery of PartitionLog: torn and corrupted segment tails, damaged indexes, torn new segments.

A crash is simulated by dropping the log object without ``close()`` (no clean-shutdown marker) and
changing the files the way a crash or a bad disk would; the next ``PartitionLog`` must recover a log that
is exactly a prefix of whole appended batches and keeps working.
"""

from __future__ import annotations

import collections
import dataclasses
import os
import random
from pathlib import Path

import numpy as np
import pytest

from log_helpers import (
    Clock,
    Record,
    abandon,
    append_and_expect,
    batch_spans,
    brute_offset_for_time,
    config,
    copy_dir,
    flip_byte,
    random_columns,
    read_all,
    read_from,
    read_recovery_point,
    segment_files,
    settled,
    truncate_file,
)
from sparklog.broker.log import PartitionLog
from sparklog.config import TopicConfig
from sparklog.records import record_schema

CFG = config(segment_bytes=8192, index_interval_bytes=0)
CFG_LARGE = config(segment_bytes=64 << 20)


@dataclasses.dataclass
class Source:
    """A log directory left behind by a crash, and what was appended to it."""

    directory: Path
    cfg: TopicConfig
    expected: list[Record]
    batches: list[tuple[int, int]]  # (base, last) of every appended batch, in order

    @property
    def last_segment(self) -> Path:
        return segment_files(self.directory)[-1]

    def kept_end(self, leo: int) -> int:
        """Check that ``leo`` is a batch boundary; returns it."""
        assert leo == 0 or any(last + 1 == leo for _, last in self.batches), f"{leo} is not a batch boundary"
        return leo


def build_source(directory: Path, cfg: TopicConfig = CFG, seed: int = 7) -> Source:
    rng = random.Random(seed)
    clock = Clock()
    log = PartitionLog(directory, cfg, clock=clock)
    expected: list[Record] = []
    batches = []
    for i in range(10):
        base = log.log_end_offset
        append_and_expect(log, random_columns(rng, rng.randint(1, 6)), expected)
        batches.append((base, log.log_end_offset - 1))
        if i == 5:
            log.roll()
    # the last segment: four batches of its own
    log.roll()
    for _ in range(4):
        base = log.log_end_offset
        append_and_expect(log, random_columns(rng, rng.randint(1, 6)), expected)
        batches.append((base, log.log_end_offset - 1))
    assert len(segment_files(directory)) >= 3
    abandon(log)
    return Source(directory, cfg, expected, batches)


@pytest.fixture
def source(tmp_path: Path) -> Source:
    return build_source(tmp_path / "source")


def check_prefix_log(log: PartitionLog, src: Source) -> int:
    """The reopened log holds exactly the first whole batches appended; returns its end offset."""
    leo = src.kept_end(log.log_end_offset)
    assert log.log_start_offset == 0
    assert read_all(log) == src.expected[:leo]
    for offset in range(max(0, leo - 12), leo):  # reads in the recovered segment
        assert read_from(log, offset) == src.expected[offset:leo]
    assert log.read(leo) == []
    if leo:
        ts = src.expected[leo - 1][1]
        assert log.offset_for_time(ts) == brute_offset_for_time(src.expected[:leo], ts)
    return leo


def check_appends_after_recovery(log: PartitionLog, src: Source, leo: int, reopen: bool = True) -> None:
    """A new append lands right at the recovered end and reads back, also after a clean reopen."""
    expected = list(src.expected[:leo])
    append_and_expect(log, {"key": [b"after"] * 3, "value": [b"x", None, b""], "timestamp": [1, 2, 3]}, expected)
    assert read_all(log) == expected
    log.close()
    if not reopen:
        return
    reopened = PartitionLog(log.directory, src.cfg)
    assert read_all(reopened) == expected
    reopened.close()


# ---------------------------------------------------------------------------------------- torn tails


@pytest.mark.slow
def test_truncated_at_every_byte_of_the_last_two_batches(source: Source, tmp_path: Path) -> None:
    last = source.last_segment
    first_position, spans = batch_spans(last)
    assert len(spans) == 4
    size = last.stat().st_size
    assert spans[-1][1] == size
    start = spans[-2][0]
    seen_ends = set()
    for cut in range(start, size + 1):
        work = copy_dir(source.directory, tmp_path / "work")
        truncate_file(work / last.name, cut)
        log = PartitionLog(work, source.cfg)
        kept = [s for s in spans if s[1] <= cut]
        kept_end_position = kept[-1][1] if kept else first_position
        expected_leo = kept[-1][3] + 1
        assert log.log_end_offset == expected_leo, f"cut at {cut}"
        assert log.recovered_bytes == cut - kept_end_position
        assert (work / last.name).stat().st_size == kept_end_position
        leo = check_prefix_log(log, source)
        seen_ends.add(leo)
        check_appends_after_recovery(log, source, leo, reopen=cut % 16 == 0)
    assert len(seen_ends) == 3  # cut inside the third batch, inside the fourth, nothing cut


def test_truncated_at_sampled_positions_of_the_whole_last_segment(source: Source, tmp_path: Path) -> None:
    """A quick version of the exhaustive test over the whole last segment (schema message included)."""
    last = source.last_segment
    size = last.stat().st_size
    first_position, spans = batch_spans(last)
    base = int(last.name.split(".")[0])
    rng = random.Random(3)
    cuts = sorted({0, 1, first_position - 1, first_position, size - 1} | set(rng.sample(range(size), 60)))
    for cut in cuts:
        work = copy_dir(source.directory, tmp_path / "work")
        truncate_file(work / last.name, cut)
        log = PartitionLog(work, source.cfg)
        kept = [s for s in spans if s[1] <= cut]
        assert log.log_end_offset == (kept[-1][3] + 1 if kept else base), f"cut at {cut}"
        leo = check_prefix_log(log, source)
        check_appends_after_recovery(log, source, leo)


def test_zero_filled_tail_is_cut(source: Source, tmp_path: Path) -> None:
    """A crash can leave a file longer than its data, the rest zeros (a preallocated or lost page)."""
    for clean in (False, True):
        work = copy_dir(source.directory, tmp_path / f"work-{clean}")
        size = (work / source.last_segment.name).stat().st_size
        with open(work / source.last_segment.name, "ab") as f:
            f.write(b"\0" * 5000)
        if clean:
            (work / "clean-shutdown").write_text("")
        log = PartitionLog(work, source.cfg)
        assert log.log_end_offset == len(source.expected)
        assert log.recovered_bytes == 5000
        assert (work / source.last_segment.name).stat().st_size == size
        leo = check_prefix_log(log, source)
        check_appends_after_recovery(log, source, leo)


def test_a_valid_batch_repeated_at_the_tail_is_cut(source: Source, tmp_path: Path) -> None:
    """Bytes that parse as a valid batch but go back in offsets (a stale copy) are not part of the log."""
    work = copy_dir(source.directory, tmp_path / "work")
    last = work / source.last_segment.name
    _, spans = batch_spans(last)
    data = last.read_bytes()
    position, end, _, _ = spans[1]
    with open(last, "ab") as f:
        f.write(data[position:end])
    log = PartitionLog(work, source.cfg)
    assert log.log_end_offset == len(source.expected)
    assert log.recovered_bytes == end - position
    leo = check_prefix_log(log, source)
    check_appends_after_recovery(log, source, leo)


def test_a_large_batch_whose_head_never_reached_the_disk_is_cut(tmp_path: Path) -> None:
    """A large batch's body is written while its CRC is computed, then its head (which holds the
    CRC): a crash in between leaves the body after a head of zeros. Whole, it verifies; headless,
    it is cut and the batches before it stay."""
    from sparklog.broker.log.segment import PARALLEL_CRC_BYTES

    rng = np.random.default_rng(5)
    values = [rng.bytes(1000) for _ in range(2 * PARALLEL_CRC_BYTES // 1000)]
    log = PartitionLog(tmp_path / "source", CFG_LARGE)
    log.append({"value": [b"small"] * 3})
    log.append({"value": values})
    abandon(log)
    whole = PartitionLog(copy_dir(tmp_path / "source", tmp_path / "whole"), CFG_LARGE)
    assert whole.recovered_bytes == 0 and whole.log_end_offset == 3 + len(values)
    assert [r.as_py() for b in whole.read(3, max_bytes=64 << 20) for r in b.column("value")] == values
    whole.close()

    work = copy_dir(tmp_path / "source", tmp_path / "headless")
    segment = segment_files(work)[-1]
    _, spans = batch_spans(segment)
    position, end, base, _ = spans[-1]
    data = bytearray(segment.read_bytes())
    head = 8 + int.from_bytes(data[position + 4 : position + 8], "little")
    assert end - position - head >= PARALLEL_CRC_BYTES  # the body went the parallel way
    data[position : position + head] = bytes(head)
    segment.write_bytes(bytes(data))
    log = PartitionLog(work, CFG_LARGE)
    assert log.log_end_offset == base == 3
    assert log.recovered_bytes == end - position
    assert [r.as_py() for b in log.read(0) for r in b.column("value")] == [b"small"] * 3
    assert log.append({"value": [b"after"]}).base_offset == 3
    log.close()


# ---------------------------------------------------------------------------------------- corruption


def batch_index_at(spans: list[tuple[int, int, int, int]], position: int) -> int:
    return next(i for i, s in enumerate(spans) if s[0] <= position < s[1])


@pytest.mark.parametrize("compression", ["none", "zstd"])
def test_random_byte_flips_in_the_batches_of_the_last_segment(tmp_path: Path, compression: str) -> None:
    src = build_source(tmp_path / "source", config(segment_bytes=8192, index_interval_bytes=0, compression=compression))
    last = src.last_segment
    first_position, spans = batch_spans(last)
    size = last.stat().st_size
    rng = random.Random(11)
    for trial in range(150):
        work = copy_dir(src.directory, tmp_path / "work")
        position = rng.randrange(first_position, size)
        flip_byte(work / last.name, position, rng.randint(1, 255))
        log = PartitionLog(work, src.cfg)
        # the CRC covers every byte of a batch message: the damaged batch and all after it are cut
        damaged = batch_index_at(spans, position)
        assert log.log_end_offset == spans[damaged][2], f"trial {trial}: flip at {position}"
        assert log.recovered_bytes == size - spans[damaged][0]
        leo = check_prefix_log(log, src)
        if trial % 10 == 0:
            check_appends_after_recovery(log, src, leo)
        else:
            abandon(log)


def test_byte_flips_in_the_schema_message_of_the_last_segment(source: Source, tmp_path: Path) -> None:
    """The schema message has no checksum of its own: a damaged one must still never make the log serve
    records other than those appended, nor leave it unable to append."""
    last = source.last_segment
    first_position, _ = batch_spans(last)
    base = int(last.name.split(".")[0])
    rng = random.Random(5)
    failures = []
    for position in range(first_position):
        work = copy_dir(source.directory, tmp_path / "work")
        flip_byte(work / last.name, position, 1 << rng.randrange(8))
        log = None
        try:
            log = PartitionLog(work, source.cfg)
            assert base <= log.log_end_offset
            leo = check_prefix_log(log, source)
            assert all(b.schema == record_schema() for b in log.read(0)), "read returns a foreign schema"
            check_appends_after_recovery(log, source, leo, reopen=position % 8 == 0)
        except Exception as exc:  # collect every position, report them together
            failures.append(f"flip at {position}: {type(exc).__name__}: {str(exc).replace(chr(10), ' ')[:90]}")
            if log is not None:
                abandon(log)
    kinds = collections.Counter(f.split(": ", 2)[1] for f in failures)
    assert not failures, f"{len(failures)} of {first_position} schema flips misbehave {dict(kinds)}:\n" + "\n".join(
        failures[:: max(1, len(failures) // 12)]
    )


# ---------------------------------------------------------------------------------------- indexes


def index_entries(path: Path) -> list[tuple[int, int]]:
    data = np.fromfile(path, dtype=np.dtype([("key", "<i8"), ("value", "<i8")])) if path.exists() else []
    return [(int(k), int(v)) for k, v in data]


def closed_source(tmp_path: Path, seed: int = 7) -> Source:
    """A cleanly closed log whose segments have several index entries each."""
    src = build_source(tmp_path / "source", config(segment_bytes=8192, index_interval_bytes=1), seed)
    log = PartitionLog(src.directory, src.cfg)
    log.close()
    return src


INDEX_DAMAGE = [
    "torn-index",
    "deleted-index",
    "deleted-both-indexes",
    "garbage-index",
    "garbage-timeindex",
    "torn-timeindex",
    "empty-index",
]


@pytest.mark.parametrize("clean", [True, False], ids=["clean", "unclean"])
@pytest.mark.parametrize("which", ["first", "last"])
@pytest.mark.parametrize("damage", INDEX_DAMAGE)
def test_damaged_indexes_are_rebuilt_on_open(tmp_path: Path, damage: str, which: str, clean: bool) -> None:
    src = closed_source(tmp_path)
    segment = segment_files(src.directory)[0 if which == "first" else -1]
    index = segment.with_suffix(".index")
    time_index = segment.with_suffix(".timeindex")
    original = {p.name: index_entries(p) for p in src.directory.glob("*index")}
    assert len(original[index.name]) >= 3
    _, spans = batch_spans(segment)

    if damage == "torn-index":
        truncate_file(index, index.stat().st_size - 5)
    elif damage == "torn-timeindex":
        truncate_file(time_index, time_index.stat().st_size - 9)
    elif damage == "deleted-index":
        index.unlink()
    elif damage == "deleted-both-indexes":
        index.unlink()
        time_index.unlink()
    elif damage == "empty-index":
        truncate_file(index, 0)
    elif damage == "garbage-index":
        with open(index, "ab") as f:
            f.write(random.Random(1).randbytes(32))
    elif damage == "garbage-timeindex":
        with open(time_index, "ab") as f:
            f.write(random.Random(2).randbytes(37))
    if not clean:
        (src.directory / "clean-shutdown").unlink()

    log = PartitionLog(src.directory, src.cfg)
    assert read_all(log) == src.expected
    for offset in range(0, len(src.expected), 3):
        assert read_from(log, offset) == src.expected[offset:]
    for ts in sorted({r[1] for r in src.expected})[::4]:
        assert log.offset_for_time(ts) == brute_offset_for_time(src.expected, ts)
    # the indexes are whole again: the same entries as written, each pointing at the batch it names
    repaired = {p.name: index_entries(p) for p in src.directory.glob("*index")}
    assert repaired == original
    starts = {s[0]: s[2] for s in spans}
    assert all(starts[position] == offset for offset, position in index_entries(index))
    expected = list(src.expected)
    append_and_expect(log, {"key": [b"k"], "value": [b"v"]}, expected)
    log.close()
    log = PartitionLog(src.directory, src.cfg)
    assert read_all(log) == expected
    log.close()


# ---------------------------------------------------------------------------------------- new segments


@pytest.mark.parametrize("size", ["empty", "3-bytes", "half-schema", "schema-only", "schema+7"])
def test_last_segment_torn_right_after_creation(source: Source, tmp_path: Path, size: str) -> None:
    """A crash just after a roll: the new segment holds a few bytes only (or its schema and a torn batch)."""
    work = copy_dir(source.directory, tmp_path / "work")
    segments = segment_files(work)
    base = int(segments[-1].name.split(".")[0])
    first_position, _ = batch_spans(segments[-1])
    cut = {
        "empty": 0,
        "3-bytes": 3,
        "half-schema": first_position // 2,
        "schema-only": first_position,
        "schema+7": first_position + 7,
    }[size]
    truncate_file(segments[-1], cut)
    log = PartitionLog(work, source.cfg)
    assert log.log_end_offset == base
    assert log.log_start_offset == 0
    check_prefix_log(log, source)
    check_appends_after_recovery(log, source, base)


def test_only_segment_torn_at_creation_keeps_the_log_start(tmp_path: Path) -> None:
    """Retention left just a fresh, empty active segment at offset N; a crash tore its file. Offsets
    must never go back: the log reopens empty at N, not at 0."""
    clock = Clock()
    cfg = config(segment_bytes=1024, retention_bytes=0)
    log = PartitionLog(tmp_path, cfg, clock=clock)
    for i in range(3):
        log.append({"key": [b"k"], "value": [b"v%d" % i]})
    log.roll()
    assert settled(log).apply_retention() == 3
    assert (log.log_start_offset, log.log_end_offset) == (3, 3)
    abandon(log)
    [only] = segment_files(tmp_path)
    assert only.name == f"{3:020d}.arrows"
    truncate_file(only, 0)
    log = PartitionLog(tmp_path, cfg, clock=clock)
    assert (log.log_start_offset, log.log_end_offset) == (3, 3)
    assert log.append({"key": [b"k"], "value": [b"new"]}).base_offset == 3
    log.close()


# ---------------------------------------------------------------------------------------- recovery point


def test_recovery_point_is_not_beyond_the_recovered_log_end(tmp_path: Path) -> None:
    """recovery-point names the offset below which everything is durable. After recovery cut the log to
    an earlier end, the offsets above it will be written anew and are not durable: the recovery point
    must come down to the log end (Kafka resets it after recovery), or a later crash is not verified."""
    src = closed_source(tmp_path)
    leo_before = len(src.expected)
    assert read_recovery_point(src.directory) == leo_before
    (src.directory / "clean-shutdown").unlink()
    _, spans = batch_spans(src.last_segment)
    truncate_file(src.last_segment, spans[1][1] + 10)
    log = PartitionLog(src.directory, src.cfg)
    leo = log.log_end_offset
    assert leo == spans[1][3] + 1 < leo_before
    rp = read_recovery_point(src.directory)
    assert rp is not None and rp <= leo, f"recovery point {rp} is past the recovered log end {leo}"
    log.close()


def test_recovery_only_verifies_from_the_recovery_point(source: Source, tmp_path: Path) -> None:
    """Segments wholly below the recovery point are trusted (not verified); the rest are checked."""
    work = copy_dir(source.directory, tmp_path / "work")
    rp = read_recovery_point(work)
    bases = [int(p.name.split(".")[0]) for p in segment_files(work)]
    assert rp == bases[-1]  # the background flush of the rolled segments moved it
    # a torn tail in the last segment is cut; earlier segments stay whole
    truncate_file(segment_files(work)[-1], segment_files(work)[-1].stat().st_size - 1)
    log = PartitionLog(work, source.cfg)
    assert log.log_end_offset == source.batches[-1][0]
    assert [s.base_offset for s in log.segments] == bases
    check_prefix_log(log, source)
    log.close()
    assert os.path.exists(work / "clean-shutdown")
