"""Helpers shared by the storage-engine tests (``tests/broker/log/``).

Records are compared as plain tuples ``(offset, timestamp_ms, key, value, headers)`` where headers are
``None`` or a tuple of ``(key, value)`` pairs, so a failing assertion shows exactly which record differs.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import random
import shutil
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa

from sparklog.broker.log import PartitionLog
from sparklog.broker.log import partition_log as partition_log_module
from sparklog.broker.log.batch_codec import read_schema, scan_batches
from sparklog.config import TopicConfig

Record = tuple[int, int, bytes | None, Any, tuple[tuple[str, bytes | None], ...] | None]

SEGMENT_SUFFIX = ".arrows"


class Clock:
    """An injectable millisecond clock that only moves when told to."""

    def __init__(self, now: int = 1_000_000) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now

    def advance(self, ms: int) -> int:
        self.now += ms
        return self.now


def config(**settings: Any) -> TopicConfig:
    """A topic config from Kafka-style names written with ``_`` (``segment_bytes=1024``)."""
    return TopicConfig.from_dict({name.replace("_", "."): value for name, value in settings.items()})


def _headers(value: Any) -> tuple[tuple[str, bytes | None], ...] | None:
    if value is None:
        return None
    return tuple((h["key"], h["value"]) for h in value)


def batch_records(batch: pa.RecordBatch) -> list[Record]:
    """The records of a batch read from the log (columns offset, timestamp, key, value, headers)."""
    assert batch.schema.names == ["offset", "timestamp", "key", "value", "headers"], batch.schema
    offsets = batch.column(0).to_pylist()
    timestamps = batch.column(1).cast(pa.int64()).to_pylist()
    keys = batch.column(2).to_pylist()
    values = batch.column(3).to_pylist()
    headers = [_headers(h) for h in batch.column(4).to_pylist()]
    return list(zip(offsets, timestamps, keys, values, headers, strict=True))


def records_of(batches: Iterable[pa.RecordBatch]) -> list[Record]:
    out: list[Record] = []
    for batch in batches:
        out.extend(batch_records(batch))
    return out


def read_from(log: PartitionLog, offset: int, max_bytes: int = 8 << 20) -> list[Record]:
    """Every record at or after ``offset`` up to the log end, by repeated ``read`` calls.

    Checks what ``read`` promises on the way: offsets increase, each call returns records at or after the
    requested offset, and every call makes progress.
    """
    out: list[Record] = []
    position = offset
    end = log.log_end_offset
    while position < end:
        batches = log.read(position, max_bytes)
        if not batches:  # only a compaction gap is left below the log end (callers compare with a model)
            break
        got = records_of(batches)
        first_batch = batch_records(batches[0])
        assert first_batch[-1][0] >= position, f"first batch of read({position}) ends before it"
        fresh = [r for r in got if r[0] >= position]
        assert fresh, f"read({position}) made no progress"
        out.extend(fresh)
        position = fresh[-1][0] + 1
    offsets = [r[0] for r in out]
    assert offsets == sorted(set(offsets)), "offsets must strictly increase"
    return out


def read_all(log: PartitionLog) -> list[Record]:
    return read_from(log, log.log_start_offset)


def segment_files(directory: Path) -> list[Path]:
    return sorted(Path(directory).glob(f"*{SEGMENT_SUFFIX}"))


def segment_base(path: Path) -> int:
    return int(path.name[: -len(SEGMENT_SUFFIX)])


def batch_spans(path: Path) -> tuple[int, list[tuple[int, int, int, int]]]:
    """Where the schema message of a segment ends and ``(position, end, base, last)`` of every valid batch."""
    with pa.memory_map(str(path)) as source:
        data = source.read_buffer()
    schema, first = read_schema(data)
    spans = [(s.position, s.end, s.header.base_offset, s.header.last_offset) for s in scan_batches(data, schema, first)]
    return first, spans


def wait_for_background_flushes(log: PartitionLog) -> None:
    """Let the flusher thread finish with the rolled segments of ``log`` (keeps crash tests deterministic)."""
    concurrent.futures.wait(list(log._pending_flushes))


def settled(log: PartitionLog) -> PartitionLog:
    """``log`` once its rolled segments have had their background fsync (keeps retention, compaction and
    truncation tests independent of the flusher thread's timing)."""
    wait_for_background_flushes(log)
    return log


@contextlib.contextmanager
def blocked_background_flusher() -> Iterator[threading.Event]:
    """Holds the (single, shared) background flush thread until the event is set: a slow disk."""
    gate = threading.Event()
    blocker = partition_log_module._flusher().submit(gate.wait)
    try:
        yield gate
    finally:
        gate.set()
        blocker.result()


def abandon(log: PartitionLog) -> None:
    """Simulate a crash of the process owning ``log``: no flush, no clean-shutdown marker.

    The background fsync of rolled segments is awaited first (so nothing of the old object writes to the
    directory later) and the file descriptors are released, which writes nothing to disk.
    """
    wait_for_background_flushes(log)
    for segment in log.segments:
        segment.close()


def copy_dir(source: Path, target: Path) -> Path:
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(source, target)
    return target


def random_value(rng: random.Random, max_size: int = 24) -> bytes | None:
    roll = rng.random()
    if roll < 0.1:
        return None
    if roll < 0.2:
        return b""
    return rng.randbytes(rng.randint(1, max_size))


def random_key(rng: random.Random) -> bytes | None:
    return None if rng.random() < 0.2 else f"k{rng.randint(0, 30)}".encode()


def random_headers(rng: random.Random) -> list[dict[str, Any]] | None:
    roll = rng.random()
    if roll < 0.3:
        return None
    if roll < 0.4:
        return []
    return [
        {"key": f"h{rng.randint(0, 5)}", "value": None if rng.random() < 0.2 else rng.randbytes(rng.randint(0, 6))}
        for _ in range(rng.randint(1, 3))
    ]


def random_columns(
    rng: random.Random,
    count: int,
    *,
    key: bool = True,
    timestamp: bool = True,
    headers: bool = True,
    max_value_size: int = 24,
) -> dict[str, list[Any]]:
    """Columns for one append of ``count`` random records (each optional column present or not)."""
    columns: dict[str, list[Any]] = {"value": [random_value(rng, max_value_size) for _ in range(count)]}
    if key:
        columns["key"] = [random_key(rng) for _ in range(count)]
    if timestamp:
        columns["timestamp"] = [rng.randint(0, 5_000) for _ in range(count)]
    if headers:
        columns["headers"] = [random_headers(rng) for _ in range(count)]
    return columns


def expected_records(columns: dict[str, list[Any]], base_offset: int, now: int) -> list[Record]:
    """The records an append of ``columns`` must store when it lands at ``base_offset`` at time ``now``."""
    count = len(columns["value"])
    keys = columns.get("key", [None] * count)
    timestamps = columns.get("timestamp", [None] * count)
    headers = columns.get("headers", [None] * count)
    return [
        (
            base_offset + i,
            now if timestamps[i] is None else timestamps[i],
            keys[i],
            columns["value"][i],
            _headers(headers[i]),
        )
        for i in range(count)
    ]


def append_and_expect(log: PartitionLog, columns: dict[str, list[Any]], expected: list[Record]) -> None:
    """Append ``columns``, check the returned AppendInfo and extend ``expected`` with the new records."""
    base = log.log_end_offset
    before = log.clock()
    info = log.append(columns)
    after = log.clock()
    now = before
    missing = [i for i, ts in enumerate(columns.get("timestamp", [None] * len(columns["value"]))) if ts is None]
    if missing and after != before:
        # a wall clock ticked during the append: its "now" is what it stored for rows without a timestamp
        now = read_from(log, base)[missing[0]][1]
        assert before <= now <= after
    new = expected_records(columns, base, now)
    assert (info.base_offset, info.last_offset, info.count) == (base, base + len(new) - 1, len(new))
    assert info.max_timestamp == max(r[1] for r in new)
    assert log.log_end_offset == base + len(new)
    expected.extend(new)


def file_bytes(directory: Path, log: PartitionLog | None = None) -> dict[str, bytes]:
    """Every file of a log directory and its content (to check that a refused append changed nothing),
    after the background fsync of ``log``'s rolled segments (it writes ``recovery-point``)."""
    if log is not None:
        wait_for_background_flushes(log)
    return {p.name: p.read_bytes() for p in sorted(Path(directory).iterdir()) if p.is_file()}


def read_recovery_point(directory: Path) -> int | None:
    path = Path(directory) / "recovery-point"
    return int(path.read_text().strip()) if path.exists() else None


def brute_offset_for_time(records: list[Record], timestamp: int) -> int | None:
    return next((r[0] for r in records if r[1] >= timestamp), None)


def flip_byte(path: Path, position: int, mask: int) -> None:
    with open(path, "r+b") as f:
        f.seek(position)
        old = f.read(1)[0]
        f.seek(position)
        f.write(bytes([old ^ mask]))


def truncate_file(path: Path, size: int) -> None:
    os.truncate(path, size)
