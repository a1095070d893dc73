"""Property tests of PartitionLog: random appends over many small segments, then reads, offset_for_time
and AppendInfo compared with a plain Python model, before and after a clean and an unclean reopen."""

from __future__ import annotations

import random
import tempfile
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from log_helpers import (
    Clock,
    Record,
    abandon,
    append_and_expect,
    batch_records,
    brute_offset_for_time,
    config,
    expected_records,
    random_columns,
    read_all,
    read_from,
    records_of,
    segment_files,
)
from sparklog.broker.log import PartitionLog
from sparklog.errors import OffsetOutOfRange

# one append: (record count, seed of its content, has key column, has timestamp column, has headers,
# input kind, largest value size: 24 bytes or, now and then, 1000 (a batch over 64 KiB of buffers))
APPEND = st.tuples(
    st.integers(1, 300),
    st.integers(0, 2**32 - 1),
    st.booleans(),
    st.booleans(),
    st.booleans(),
    st.sampled_from(["dict", "batch", "table"]),
    st.sampled_from([24, 24, 24, 24, 1000]),
)

SETTINGS = settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
)


def as_input(columns: dict[str, list[Any]], kind: str) -> Any:
    if kind == "dict":
        return columns
    table = pa.table(columns)
    if kind == "batch":
        return table.combine_chunks().to_batches()[0]
    # a table of two chunks (or one, for a single record)
    cut = table.num_rows // 2
    return pa.concat_tables([table.slice(0, cut), table.slice(cut)]) if cut else table


def append_all(log: PartitionLog, appends: list[tuple[Any, ...]], clock: Clock) -> list[Record]:
    expected: list[Record] = []
    for count, seed, key, timestamp, headers, kind, max_value_size in appends:
        rng = random.Random(seed)
        columns = random_columns(
            rng, count, key=key, timestamp=timestamp, headers=headers, max_value_size=max_value_size
        )
        clock.advance(rng.randint(0, 50))
        base = log.log_end_offset
        info = log.append(as_input(columns, kind))
        new = expected_records(columns, base, clock.now)
        assert (info.base_offset, info.last_offset, info.count) == (base, base + count - 1, count)
        assert info.max_timestamp == max(r[1] for r in new)
        expected.extend(new)
        assert log.log_end_offset == len(expected)
    return expected


def check_log(log: PartitionLog, expected: list[Record], rng: random.Random, max_bytes: int) -> None:
    n = len(expected)
    assert log.log_start_offset == 0
    assert log.log_end_offset == n
    assert [r[0] for r in expected] == list(range(n))

    everything = read_all(log)
    assert everything == expected

    # every batch boundary, a random sample of offsets, the first and the last one
    boundaries = {0, n - 1}
    for batch in log.iter_batches():
        boundaries.add(batch.column(0)[0].as_py())
    boundaries = sorted(boundaries)
    sample = sorted(set(rng.sample(boundaries, min(len(boundaries), 12))) | set(rng.sample(range(n), min(n, 12))))
    for offset in sample:
        batches = log.read(offset, max_bytes)
        first = batch_records(batches[0])
        assert first[0][0] <= offset <= first[-1][0], f"read({offset}) must start with the batch holding it"
        got = [r for r in records_of(batches[:3]) if r[0] >= offset]
        assert got == expected[offset : offset + len(got)]
        if max_bytes >= 8 << 20:  # everything fits: the batches reach the log end
            assert batches[-1].column(0)[-1].as_py() == n - 1
        upto = rng.randint(offset + 1, min(n, offset + 400))
        got = [r for b in log.read(offset, 8 << 20, upto=upto) for r in batch_records(b) if r[0] >= offset]
        assert got == expected[offset:upto]
    # a few complete reads to the log end with the example's max_bytes (one batch per call if tiny)
    for offset in rng.sample(sample, min(len(sample), 3)):
        assert read_from(log, offset, max_bytes) == expected[offset:]

    assert log.read(n) == []
    with pytest.raises(OffsetOutOfRange):
        log.read(n + 1)
    with pytest.raises(OffsetOutOfRange):
        log.read(-1)

    timestamps = sorted({r[1] for r in expected})
    probes = {0, timestamps[-1], timestamps[-1] + 1, timestamps[0] - 1}
    for ts in rng.sample(timestamps, min(len(timestamps), 12)):
        probes.update((ts - 1, ts, ts + 1))
    for ts in sorted(probes):
        assert log.offset_for_time(ts) == brute_offset_for_time(expected, ts), f"offset_for_time({ts})"


@SETTINGS
@given(
    appends=st.lists(APPEND, min_size=1, max_size=12),
    compression=st.sampled_from(["none", "lz4", "zstd"]),
    segment_bytes=st.sampled_from([1024, 2048, 8192]),
    index_interval=st.sampled_from([0, 200, 1000, 4096]),
    max_bytes=st.sampled_from([1, 2500, 8 << 20]),
    seed=st.integers(0, 2**32 - 1),
)
def test_random_appends_read_back_exactly(
    tmp_path: Path,
    appends: list[tuple[Any, ...]],
    compression: str,
    segment_bytes: int,
    index_interval: int,
    max_bytes: int,
    seed: int,
) -> None:
    directory = Path(tempfile.mkdtemp(dir=tmp_path))
    cfg = config(segment_bytes=segment_bytes, compression=compression, index_interval_bytes=index_interval)
    clock = Clock()
    rng = random.Random(seed)

    log = PartitionLog(directory, cfg, clock=clock)
    expected = append_all(log, appends, clock)
    check_log(log, expected, rng, max_bytes)
    if len(appends) > 1 and segment_bytes == 1024:
        assert len(segment_files(directory)) > 1, "small segments must roll"

    # a crash: the object is dropped without close(); the next open verifies and must keep everything
    abandon(log)
    log = PartitionLog(directory, cfg, clock=clock)
    assert log.recovered_bytes == 0
    check_log(log, expected, rng, max_bytes)
    append_and_expect(log, random_columns(rng, rng.randint(1, 20)), expected)
    check_log(log, expected, rng, max_bytes)

    # a clean shutdown and reopen
    log.close()
    assert (directory / "clean-shutdown").exists()
    log = PartitionLog(directory, cfg, clock=clock)
    assert not (directory / "clean-shutdown").exists()
    check_log(log, expected, rng, max_bytes)
    append_and_expect(log, random_columns(rng, rng.randint(1, 20)), expected)
    check_log(log, expected, rng, max_bytes)
    log.close()

    # reopened once more (cleanly) after the appends that followed the reopen
    log = PartitionLog(directory, cfg, clock=clock)
    check_log(log, expected, rng, max_bytes)
    log.close()


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    counts=st.lists(st.integers(1, 40), min_size=2, max_size=25),
    seed=st.integers(0, 2**32 - 1),
)
def test_interleaved_reads_and_reopens(tmp_path: Path, counts: list[int], seed: int) -> None:
    """Reads interleaved with appends see every record appended so far, also across unclean reopens."""
    directory = Path(tempfile.mkdtemp(dir=tmp_path))
    cfg = config(segment_bytes=1024, index_interval_bytes=300)
    clock = Clock()
    rng = random.Random(seed)
    log = PartitionLog(directory, cfg, clock=clock)
    expected: list[Record] = []
    for count in counts:
        append_and_expect(log, random_columns(rng, count), expected)
        offset = rng.randrange(len(expected))
        assert read_from(log, offset, rng.choice([1, 4000])) == expected[offset:]
        if rng.random() < 0.25:
            abandon(log)
            log = PartitionLog(directory, cfg, clock=clock)
            assert log.recovered_bytes == 0
            assert log.log_end_offset == len(expected)
    assert read_all(log) == expected
    log.close()
