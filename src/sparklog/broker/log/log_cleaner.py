"""Log compaction: keep the latest record per key, drop old tombstones, never change an offset.

Each non-active segment is rewritten into ``.cleaning/`` and swapped in with one atomic rename;
its index files are removed just before the swap and rebuilt right after. A crash at any point
leaves either the old or the new segment file, both valid; missing indexes are rebuilt on open.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Callable

import pyarrow as pa
import pyarrow.compute as pc

from sparklog.broker.log.partition_log import CLEANING_DIR, PartitionLog
from sparklog.broker.log.segment import (
    INDEX_SUFFIX,
    TIME_INDEX_SUFFIX,
    LogSegment,
    header_for,
    segment_path,
)
from sparklog.errors import CorruptRecord

log_ = logging.getLogger(__name__)


@dataclasses.dataclass
class CleanResult:
    """What one compaction pass did."""

    segments_cleaned: int = 0
    records_before: int = 0
    records_after: int = 0
    segments_skipped: int = 0  # left alone: they hold a batch that cannot be read
    # when the oldest tombstone kept in a non-active segment may be removed (None: none kept);
    # until then, and while nothing is appended, another pass would find nothing to do
    tombstones_due_ms: int | None = None


def _latest_offsets(log: PartitionLog, damaged: set[int]) -> pa.Array:
    """The offset of the last record of every key in the whole log (active segment included).
    Segments holding a batch that cannot be read are added to ``damaged`` (by base offset); their
    readable batches still count (a key whose latest record is unreadable keeps older ones: safe)."""
    tables = []
    for segment in list(log.segments):

        def report(position: int, exc: CorruptRecord, segment: LogSegment = segment) -> None:
            damaged.add(segment.base_offset)
            log_.error(
                "%s: segment %s, batch at position %s is corrupt: %s", log.directory, segment.base_offset, position, exc
            )

        for stored in segment.batches(on_corrupt=report):
            if stored.batch.num_rows:
                tables.append(pa.table({"key": stored.batch.column(2), "offset": stored.batch.column(0)}))
    if not tables:
        return pa.array([], pa.int64())
    latest = pa.concat_tables(tables).group_by("key").aggregate([("offset", "max")])
    return latest.column("offset_max").combine_chunks()


def compact(log: PartitionLog, crash_hook: Callable[[str], None] | None = None) -> CleanResult:
    """Compact every non-active segment of ``log``.

    ``crash_hook(step)`` is called between the steps of each swap (``"written"``,
    ``"indexes-removed"``, ``"swapped"``): tests raise from it to simulate a crash there.
    A segment holding a batch that cannot be read (:class:`CorruptRecord`) is left as it is and
    reported in the broker's log; ``CleanResult.segments_skipped`` counts them.
    """
    result = CleanResult()
    if not log.config.compacted:
        return result
    hook = crash_hook or (lambda step: None)
    with log.lock:
        damaged: set[int] = set()
        latest = _latest_offsets(log, damaged)
        tombstone_horizon = log.clock() - log.config.delete_retention_ms
        work = log.directory / CLEANING_DIR
        work.mkdir(exist_ok=True)
        for segment in list(log.segments[:-1]):
            if segment.base_offset in damaged:
                result.segments_skipped += 1
                continue
            kept_batches = []
            before = 0
            for stored in segment.batches():
                batch = stored.batch
                before += batch.num_rows
                keep = pc.is_in(batch.column(0), value_set=latest)
                expired_tombstone = pc.and_(
                    batch.column(3).is_null(), pc.less(batch.column(1).cast(pa.int64()), tombstone_horizon)
                )
                keep = pc.and_(keep, pc.invert(expired_tombstone))
                kept = batch.filter(keep)
                tombstones = kept.column(3).is_null()
                if tombstones.true_count:
                    oldest = pc.min(pc.filter(kept.column(1).cast(pa.int64()), tombstones)).as_py()
                    due = oldest + log.config.delete_retention_ms
                    if result.tombstones_due_ms is None or due < result.tombstones_due_ms:
                        result.tombstones_due_ms = due
                if kept.num_rows:
                    h = stored.header
                    kept_batches.append((kept, header_for(kept, h.leader_epoch, h.producer_id, h.producer_seq)))
            after = sum(b.num_rows for b, _ in kept_batches)
            result.records_before += before
            result.records_after += after
            if after == before:
                continue  # nothing to remove here
            cleaned = LogSegment.create(work, segment.base_offset, segment.schema, log.config.index_interval_bytes)
            for batch, header in kept_batches:
                cleaned.append(batch, header, log.config.compression)
            cleaned.flush()
            cleaned.close()
            hook("written")
            segment.close()
            for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX):
                segment_path(log.directory, segment.base_offset, suffix).unlink(missing_ok=True)
            hook("indexes-removed")
            os.replace(segment_path(work, segment.base_offset), segment.path)
            _fsync_dir(log.directory)
            hook("swapped")
            for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX):
                segment_path(work, segment.base_offset, suffix).unlink(missing_ok=True)
            log.replace_segment(
                segment, LogSegment.open(log.directory, segment.base_offset, log.config.index_interval_bytes)
            )
            result.segments_cleaned += 1
        os.rmdir(work)
    return result


def _fsync_dir(path: os.PathLike[str]) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
