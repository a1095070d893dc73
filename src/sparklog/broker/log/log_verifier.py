"""Read-only verification of a stopped broker's data (``sparklog log verify DIR``), like Kafka's
``kafka-dump-log --verify``: every segment's schema message, every batch's CRC, header and full
Arrow validation, offsets increasing within and across segments, and the indexes pointing at
batch starts. Nothing is repaired or written: a broker recovers what it can on open; this tells
an operator what is there first.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa

from sparklog.broker.log.batch_codec import read_batch_at, read_message_at, read_schema
from sparklog.broker.log.batch_validation import check_stored
from sparklog.broker.log.segment import INDEX_SUFFIX, SEGMENT_SUFFIX, TIME_INDEX_SUFFIX
from sparklog.errors import CorruptRecord

_ENTRY = np.dtype([("key", "<i8"), ("value", "<i8")])


@dataclasses.dataclass
class SegmentReport:
    """What one segment file holds and what is wrong with it."""

    path: Path
    base_offset: int
    batches: int = 0
    records: int = 0
    last_offset: int | None = None
    problems: list[str] = dataclasses.field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def verify_segment(path: Path, previous_last: int | None = None) -> SegmentReport:
    """Check one ``.arrows`` segment (and its indexes); ``previous_last`` is the last offset of the
    segment before it in the same partition (offsets must keep increasing across segments)."""
    base = int(path.name[: -len(SEGMENT_SUFFIX)])
    report = SegmentReport(path, base)
    if previous_last is not None and base <= previous_last:
        report.problems.append(f"base offset {base} is not after the previous segment's last offset {previous_last}")
    with pa.memory_map(str(path), "r") as source:
        data = source.read_buffer()
    try:
        schema, position = read_schema(data)
    except CorruptRecord as exc:
        report.problems.append(f"unreadable schema message: {exc}")
        return report
    starts: set[int] = set()
    last = base - 1
    while position < data.size:
        try:
            stored = read_batch_at(data, position, schema, verify=True)
            check_stored(stored.batch, stored.header)
        except CorruptRecord as exc:
            report.problems.append(f"batch at position {position}: {exc}")
            try:
                position = read_message_at(data, position)[2]
            except CorruptRecord:
                report.problems.append(f"no readable batch from position {position} to the end ({data.size} bytes)")
                break
            continue
        header = stored.header
        if header.base_offset <= last:
            report.problems.append(
                f"batch at position {position} starts at offset {header.base_offset}, not after {last}"
            )
        starts.add(position)
        last = header.last_offset
        report.batches += 1
        report.records += header.count
        report.last_offset = last
        position = stored.end
    report.problems.extend(_index_problems(path, base, starts))
    return report


def _index_problems(path: Path, base: int, starts: set[int]) -> Iterator[str]:
    """Problems of a segment's offset and time indexes (missing ones are rebuilt on open: fine)."""
    index = path.with_suffix(INDEX_SUFFIX)
    if index.exists():
        entries = np.fromfile(index, dtype=_ENTRY)
        if index.stat().st_size % _ENTRY.itemsize:
            yield f"{index.name} has a torn last entry"
        if len(entries) and (entries["key"][0] < base or bool(np.any(np.diff(entries["key"]) <= 0))):
            yield f"{index.name}: offsets do not increase from the base offset"
        stray = [int(p) for p in entries["value"] if int(p) not in starts]
        if stray:
            yield f"{index.name}: {len(stray)} entries point at no batch start (first: position {stray[0]})"
    times = path.with_suffix(TIME_INDEX_SUFFIX)
    if times.exists():
        entries = np.fromfile(times, dtype=_ENTRY)
        if len(entries) > 1 and bool(np.any(np.diff(entries["key"]) < 0)):
            yield f"{times.name}: timestamps go back"


def partition_dirs(root: Path) -> list[Path]:
    """``root`` if it is a partition directory (holds segments), else its partition subdirectories."""
    if any(root.glob(f"*{SEGMENT_SUFFIX}")):
        return [root]
    return sorted(d for d in root.iterdir() if d.is_dir() and any(d.glob(f"*{SEGMENT_SUFFIX}")))


def verify_partition(directory: Path) -> list[SegmentReport]:
    """Every segment of one partition directory, oldest first."""
    reports = []
    previous_last: int | None = None
    for path in sorted(directory.glob(f"*{SEGMENT_SUFFIX}"), key=lambda p: int(p.name[: -len(SEGMENT_SUFFIX)])):
        report = verify_segment(path, previous_last)
        reports.append(report)
        if report.last_offset is not None:
            previous_last = report.last_offset
    return reports
