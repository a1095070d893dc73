"""Issue 15 at the storage layer: a malformed or oversized batch is refused before anything reads its
values, a follower refuses what it could not read back, a stored batch that fails validation is
reported as CorruptRecord (never handed to code that can crash on it), the log cleaner skips it,
and timestamps out of the topic's bounds are refused. Malformed arrays are built the way a hostile
client builds them (``pa.Array.from_buffers`` with impossible offsets), so each test fails on code
that only checks buffer lengths."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from log_helpers import Clock, config, read_all
from sparklog.broker.log import PartitionLog, compact
from sparklog.broker.log.batch_codec import BatchHeader
from sparklog.broker.log.batch_validation import MAX_BATCH_ROWS, check_produced
from sparklog.broker.log.segment import header_for
from sparklog.errors import CorruptRecord, InvalidRecord, InvalidTimestamp, RecordTooLarge
from sparklog.records import TIMESTAMP_TYPE, record_schema

NOW = 1_700_000_000_000


def bad_binary(n: int = 2) -> pa.Array:
    """A binary array whose first and last offsets are sane and whose middle one points 1 GiB away:
    it passes Arrow's cheap validation, and reading its values reads out of bounds."""
    offsets = np.array([0, *([1 << 30] * (n - 1)), 3], dtype=np.int32)
    return pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(offsets.tobytes()), pa.py_buffer(b"abc")])


def good_rows(n: int, tag: str = "v") -> dict[str, list[bytes]]:
    return {"key": [b"k%d" % (i % 3) for i in range(n)], "value": [f"{tag}{i}".encode() for i in range(n)]}


def test_the_malformed_batch_passes_arrows_cheap_check() -> None:
    """The premise of the other tests: ``validate()`` alone lets it through."""
    batch = pa.record_batch({"key": bad_binary(), "value": pa.array([b"a", b"b"])})
    batch.validate()
    with pytest.raises(pa.ArrowInvalid):
        batch.validate(full=True)


@pytest.mark.parametrize("column", ["key", "value"])
def test_a_batch_with_impossible_offsets_is_refused_and_nothing_is_stored(tmp_path: Path, column: str) -> None:
    log = PartitionLog(tmp_path, config(), clock=Clock(NOW))
    log.append(good_rows(3))
    before = read_all(log)
    good = pa.array([b"a", b"b"])
    batch = pa.record_batch(
        {"key": bad_binary() if column == "key" else good, "value": bad_binary() if column == "value" else good}
    )
    with pytest.raises(InvalidRecord, match="Arrow validation failed"):
        log.append(batch)
    with pytest.raises(InvalidRecord):
        log.append(pa.Table.from_batches([batch]))
    assert read_all(log) == before and log.log_end_offset == 3


def test_a_compacted_topic_refuses_the_batch_that_used_to_kill_the_cleaner(tmp_path: Path) -> None:
    log = PartitionLog(tmp_path, config(cleanup_policy="compact", segment_bytes=1024), clock=Clock(NOW))
    for i in range(5):
        log.append(good_rows(20, f"r{i}-"))
    with pytest.raises(InvalidRecord):
        log.append(pa.record_batch({"key": bad_binary(), "value": pa.array([b"a", b"b"])}))
    log.roll()
    compact(log)
    assert [r[3] for r in read_all(log)] == [b"r4-17", b"r4-18", b"r4-19"]  # the latest value of each key


def test_sizes_are_checked_before_the_values_are_read(tmp_path: Path) -> None:
    log = PartitionLog(tmp_path, config(max_message_bytes=4096), clock=Clock(NOW))
    # a null-typed column declares rows without buffers: 50M rows cost nothing to receive
    huge = pa.RecordBatch.from_arrays([pa.nulls(50_000_000)], names=["value"])
    allocated = pa.total_allocated_bytes()
    with pytest.raises(RecordTooLarge, match="records"):
        log.append(huge)
    assert pa.total_allocated_bytes() - allocated < 1 << 20, "the refusal allocated memory for the rows"
    with pytest.raises(RecordTooLarge, match="max.message.bytes=4096"):
        log.append({"value": [b"x" * 5000]})
    with pytest.raises(RecordTooLarge):
        check_produced(pa.record_batch({"value": pa.nulls(MAX_BATCH_ROWS + 1, pa.binary())}), 1 << 40)
    assert log.log_end_offset == 0


@pytest.mark.parametrize(
    "column",
    [
        pa.array([b"a"], pa.large_binary()),
        pa.array(["a"], pa.large_string()),
        pa.array([b"a"], pa.binary_view()),
    ],
    ids=["large_binary", "large_string", "binary_view"],
)
def test_large_and_view_types_are_refused(tmp_path: Path, column: pa.Array) -> None:
    log = PartitionLog(tmp_path, config(), clock=Clock(NOW))
    with pytest.raises(InvalidRecord, match="is not accepted"):
        log.append(pa.record_batch({"value": column}))
    headers = pa.array([[("k", b"v")]], pa.large_list(pa.struct([("key", pa.string()), ("value", pa.binary())])))
    with pytest.raises(InvalidRecord, match="large_list"):
        log.append(pa.record_batch({"value": pa.array([b"a"]), "headers": headers}))
    assert log.log_end_offset == 0


def test_timestamps_outside_the_topic_bounds_are_refused(tmp_path: Path) -> None:
    clock = Clock(NOW)
    log = PartitionLog(tmp_path, config(), clock=clock)
    year_9999 = 253_402_300_799_000
    with pytest.raises(InvalidTimestamp, match="message.timestamp.after.max.ms=3600000"):
        log.append({"value": [b"a", b"b"], "timestamp": pa.array([NOW, year_9999], pa.int64())})
    log.append({"value": [b"soon"], "timestamp": pa.array([NOW + 3_000_000], pa.int64())})  # within the hour
    log.append({"value": [b"old"], "timestamp": pa.array([0], pa.int64())})  # no bound before, as Kafka
    strict = PartitionLog(tmp_path / "strict", config(message_timestamp_before_max_ms=60_000), clock=clock)
    with pytest.raises(InvalidTimestamp, match="before the broker's clock"):
        strict.append({"value": [b"old"], "timestamp": pa.array([NOW - 61_000], pa.int64())})
    assert [r[3] for r in read_all(log)] == [b"soon", b"old"] and strict.log_end_offset == 0


def test_retention_is_not_held_by_a_future_record(tmp_path: Path) -> None:
    """Finding 6: a record dated year 9999 used to make its segment (and every later one) immortal."""
    clock = Clock(NOW)
    log = PartitionLog(tmp_path, config(segment_bytes=1024, retention_ms=1000), clock=clock)
    with pytest.raises(InvalidTimestamp):
        log.append({"value": [b"x"], "timestamp": pa.array([253_402_300_799_000], pa.int64())})
    for i in range(30):
        log.append({"value": [b"%d" % i * 50]})
    clock.advance(10_000)
    log.append({"value": [b"new"]})
    assert log.apply_retention() > 0 and log.log_start_offset > 0


def _forged(offsets: list[int], header: BatchHeader, value: pa.Array | None = None) -> pa.RecordBatch:
    n = len(offsets)
    return pa.RecordBatch.from_arrays(
        [
            pa.array(offsets, pa.int64()),
            pa.array([NOW] * n, TIMESTAMP_TYPE),
            pa.array([b"k"] * n),
            value if value is not None else pa.array([b"v"] * n),
            pa.nulls(n, record_schema().field("headers").type),
        ],
        schema=record_schema(),
    )


def test_a_follower_refuses_batches_it_could_not_read_back(tmp_path: Path) -> None:
    log = PartitionLog(tmp_path, config(), clock=Clock(NOW))
    log.append_replica(_forged([0, 1], BatchHeader(0, 1, 2, NOW)), BatchHeader(0, 1, 2, NOW))
    cases = {
        "malformed": (_forged([2, 3], BatchHeader(2, 3, 2, NOW), bad_binary()), BatchHeader(2, 3, 2, NOW)),
        "count": (_forged([2, 3], BatchHeader(2, 3, 2, NOW)), BatchHeader(2, 4, 3, NOW)),
        "last offset": (_forged([2, 3], BatchHeader(2, 3, 2, NOW)), BatchHeader(2, 5, 2, NOW)),
        "order": (_forged([3, 2], BatchHeader(2, 3, 2, NOW)), BatchHeader(2, 2, 2, NOW)),
    }
    for name, (batch, header) in cases.items():
        with pytest.raises(InvalidRecord):
            log.append_replica(batch, header)
        assert log.log_end_offset == 2, name
    with pytest.raises(InvalidRecord, match="not a schema of this topic"):
        log.append_replica(
            _forged([2], BatchHeader(2, 2, 1, NOW)).cast(
                pa.schema([f.with_type(pa.large_binary()) if f.name == "value" else f for f in record_schema()])
            ),
            BatchHeader(2, 2, 1, NOW),
        )


def _store_malformed(directory: Path) -> int:
    """A log whose middle batch is malformed though its CRC is right (what an older version, or a
    bit flip the CRC missed, leaves): written below the validation, as the old broker did."""
    log = PartitionLog(directory, config(cleanup_policy="compact", segment_bytes=1024), clock=Clock(NOW))
    log.append(good_rows(5, "a"))
    header = BatchHeader(5, 6, 2, NOW)
    log.active.append(_forged([5, 6], header, bad_binary()), header)  # the segment's own append does not validate
    log._remember(header, NOW)
    log.roll()
    log.append(good_rows(5, "b"))
    log.roll()
    log.append(good_rows(5, "c"))
    log.close()
    return 5


def test_a_stored_malformed_batch_is_reported_as_corrupt_with_its_offsets(tmp_path: Path) -> None:
    bad_offset = _store_malformed(tmp_path)
    log = PartitionLog(tmp_path, config(cleanup_policy="compact", segment_bytes=1024), clock=Clock(NOW))
    assert [b.num_rows for b in log.read(0, max_bytes=1)] == [5]  # the batch before it reads fine
    with pytest.raises(CorruptRecord, match=f"offsets {bad_offset}..{bad_offset + 1}"):
        log.read(bad_offset)
    with pytest.raises(CorruptRecord):
        log.read(0, max_bytes=1 << 20)
    assert [b.num_rows for b in log.read(bad_offset + 2)] == [5, 5]  # and everything after it
    result = compact(log)  # used to be a segmentation fault, in every replica, after every restart
    assert result.segments_skipped == 1
    # the damaged segment is left whole; the others are compacted (b's keys all recur in c)
    assert log.read(0, max_bytes=1)[0].column("value").to_pylist() == [b"a0", b"a1", b"a2", b"a3", b"a4"]
    assert log.read(bad_offset + 2)[0].column("value").to_pylist()[0] == b"c0"


def test_reading_a_stored_malformed_batch_cannot_crash_the_process(tmp_path: Path) -> None:
    """In a separate process, as a consumer or the cleaner would: it must end with the typed error,
    not a signal (the old code died with SIGSEGV here)."""
    _store_malformed(tmp_path)
    program = textwrap.dedent(
        f"""
        import pyarrow as pa
        from sparklog.broker.log import PartitionLog, compact
        from sparklog.config import TopicConfig
        from sparklog.errors import CorruptRecord
        log = PartitionLog({str(tmp_path)!r}, TopicConfig.from_dict({{"cleanup.policy": "compact"}}))
        compact(log)
        try:
            for batch in log.read(0, max_bytes=1 << 20):
                pa.Table.from_batches([batch]).column("key").to_pylist()
        except CorruptRecord as exc:
            print("corrupt:", exc)
        """
    )
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "corrupt: stored batch at offsets 5..6" in done.stdout


def test_header_for_still_describes_a_valid_batch(tmp_path: Path) -> None:
    batch = _forged([7, 9], BatchHeader(7, 9, 2, NOW))
    assert header_for(batch, 1, -1, -1) == BatchHeader(7, 9, 2, NOW, 1, -1, -1)


def _files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.is_file()}


def test_log_verify_reports_every_problem_and_changes_nothing(tmp_path: Path) -> None:
    good = tmp_path / "data" / "good-0"
    log = PartitionLog(good, config(segment_bytes=1024), clock=Clock(NOW))
    for i in range(6):
        log.append(good_rows(10, f"g{i}-"))
    log.close()
    _store_malformed(tmp_path / "data" / "bad-0")
    torn = next(iter(sorted((tmp_path / "data" / "bad-0").glob("*.arrows"))))
    with open(torn, "ab") as out:
        out.write(b"\xff\xff\xff\xff\x40\x00\x00\x00torn")  # a message prefix, then nothing
    before = {d.name: _files(d) for d in (tmp_path / "data").iterdir()}

    def verify(path: Path) -> subprocess.CompletedProcess[str]:
        cmd = [sys.executable, "-m", "sparklog.cli.main", "log", "verify", str(path)]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=120)

    ok = verify(good)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "1 partition(s), 6 batches checked, 0 problem(s)" in ok.stdout
    both = verify(tmp_path / "data")
    assert both.returncode == 1, both.stdout + both.stderr
    problems = [line for line in both.stdout.splitlines() if line.startswith("PROBLEM")]
    assert any("bad-0/00000000000000000000.arrows: batch at position" in p and "offsets 5..6" in p for p in problems)
    assert any("no readable batch from position" in p for p in problems), problems
    assert {d.name: _files(d) for d in (tmp_path / "data").iterdir()} == before  # read-only


def test_a_topic_stored_with_a_segment_ms_below_the_new_minimum_stays_readable() -> None:
    from sparklog.config import TopicConfig
    from sparklog.coordination.cluster import TopicMetadata
    from sparklog.errors import InvalidConfig

    with pytest.raises(InvalidConfig, match="segment.ms must be >= 1000"):
        TopicConfig.from_dict({"segment.ms": "1"})  # new settings are refused
    old = TopicMetadata("old", [[1]], {"segment.ms": "1", "retention.ms": "5000"})  # as ZooKeeper holds it
    assert (old.config.segment_ms, old.config.retention_ms) == (1000, 5000)
