"""The log of one partition: a directory of segments with contiguous offsets, recovery, retention.

Directory contents: the segments (``<base>.arrows`` with ``.index`` and ``.timeindex``),
``recovery-point`` (the offset below which everything was fsynced), ``state-snapshot`` (leader
epochs and producer state as of an offset, see ``state_snapshot``) and, while the log is closed
cleanly, ``clean-shutdown``. On open without the marker, every segment from the one holding the
recovery point on is verified batch by batch and a torn or corrupt tail is cut off. The other
segments are opened lazily: their files are first read when they are used.
"""

from __future__ import annotations

import bisect
import concurrent.futures
import contextlib
import dataclasses
import functools
import os
import shutil
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa

from sparklog.broker.log.batch_codec import BatchHeader
from sparklog.broker.log.batch_validation import check_produced, check_replicated
from sparklog.broker.log.leader_epoch_cache import LeaderEpochCache
from sparklog.broker.log.producer_state import ProducerStateTable
from sparklog.broker.log.segment import SEGMENT_SUFFIX, LogSegment, delete_segment_files, header_for
from sparklog.broker.log.state_snapshot import LogStateSnapshot, read_snapshot, remove_snapshot, write_snapshot
from sparklog.config import TopicConfig
from sparklog.errors import CorruptRecord, InvalidRecord, InvalidTimestamp, LogClosed, OffsetOutOfRange, RecordTooLarge
from sparklog.records import TIMESTAMP_TYPE, column_max, int64_column, int64_values, to_record_batch, versioned_schema
from sparklog.records import now_ms as wall_clock_ms

CLEAN_SHUTDOWN_FILE = "clean-shutdown"
RECOVERY_POINT_FILE = "recovery-point"
CLEANING_DIR = ".cleaning"
DEFAULT_MAX_BYTES = 8 << 20


@functools.cache
def _flusher() -> concurrent.futures.ThreadPoolExecutor:
    """The one background thread that fsyncs rolled segments."""
    return concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="sparklog-flush")


@dataclasses.dataclass(frozen=True)
class AppendInfo:
    """Where an appended batch landed."""

    base_offset: int
    last_offset: int
    count: int
    max_timestamp: int
    leader_epoch: int  # the leader epoch the append was made in (for a duplicate: the retry's)
    duplicate: bool = False  # a producer's retry of a batch already stored: nothing was appended


class PartitionLog:
    """An append-only, ordered, durable log of record batches for one topic partition.

    Thread-safe: appends, rolls, retention and compaction take the log's lock; reads work on a
    snapshot of the segment list and never block appends.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        config: TopicConfig | None = None,
        value_type: pa.DataType = pa.binary(),
        clock: Callable[[], int] = wall_clock_ms,
        schema_version: int | None = None,
        older_schemas: Sequence[pa.Schema] = (),
        on_flush: Callable[[float], None] | None = None,
    ) -> None:
        """``on_flush(seconds)``: told how long each :meth:`flush` (its fsyncs) took (the broker's metrics)."""
        self.on_flush = on_flush
        self.directory = Path(directory)
        self.config = config or TopicConfig()
        self.value_type = value_type
        self.schema = versioned_schema(value_type, schema_version)
        self.known_schemas = [*older_schemas, self.schema]  # what segments may hold (typed topics evolve)
        self.clock = clock
        self.lock = threading.RLock()
        self.closed = False
        self.recovered_bytes = 0
        self._unflushed_messages = 0
        self.last_flush_ms = clock()
        self._active_created_ms = clock()
        self._pending_flushes: list[concurrent.futures.Future[None]] = []
        self._unsynced: list[LogSegment] = []  # rolled segments whose background fsync is pending
        self.directory.mkdir(parents=True, exist_ok=True)
        self.segments: list[LogSegment] = []
        # lake tiering (lake.enabled): every offset below this is in the topic's Delta table; None
        # until the tierer (leader) or the lake offset in ZooKeeper (follower) says
        self.tiered_offset: int | None = None
        self.epochs = LeaderEpochCache()
        self.producers = ProducerStateTable()
        self._load()
        self._rebuild_derived_state()

    # ----------------------------------------------------------------- opening and recovery
    def _load(self) -> None:
        with os.scandir(self.directory) as entries:
            names = [e.name for e in entries]
        if CLEANING_DIR in names:
            shutil.rmtree(self.directory / CLEANING_DIR, ignore_errors=True)  # an interrupted compaction
        marker = self.directory / CLEAN_SHUTDOWN_FILE
        clean = CLEAN_SHUTDOWN_FILE in names
        # only a crash needs it (a clean close moved it to the log end): one file read less per log
        recovery_point = 0 if clean else self._read_recovery_point()
        bases = sorted(
            int(name[: -len(SEGMENT_SUFFIX)])
            for name in names
            if name.endswith(SEGMENT_SUFFIX) and name[: -len(SEGMENT_SUFFIX)].isdigit()
        )
        interval = self.config.index_interval_bytes
        for i, base in enumerate(bases):
            next_base = bases[i + 1] if i + 1 < len(bases) else None
            must_verify = not clean and (next_base is None or next_base > recovery_point)
            if next_base is not None and not must_verify:
                # trusted (a clean shutdown, or below the recovery point): read on first use
                self.segments.append(
                    LogSegment.open(self.directory, base, interval, expected_schemas=self.known_schemas, lazy=True)
                )
                continue
            try:
                segment = LogSegment.open(
                    self.directory, base, interval, recover=must_verify, expected_schemas=self.known_schemas
                )
            except CorruptRecord:
                # the schema message itself is unreadable: the segment was torn right at creation
                self._drop_from(bases[i:])
                if not self.segments:
                    self.segments.append(self._new_segment(base))  # offsets never go back
                break
            self.recovered_bytes += segment.recovered_bytes
            self.segments.append(segment)
            if segment.recovered_bytes and next_base is not None:
                self._drop_from(bases[i + 1 :])  # a cut in the middle: keep the log a prefix
                break
        if not self.segments:
            self.segments.append(self._new_segment(0))
        if recovery_point > self.log_end_offset:  # recovery cut the log: never claim more than is there
            self._write_recovery_point(self.log_end_offset)
        if clean:
            marker.unlink(missing_ok=True)

    def set_value_type(self, value_type: pa.DataType, schema_version: int | None) -> None:
        """A typed topic got a new schema version: appends from now on go to segments of it (a
        segment never mixes schemas)."""
        with self.lock:
            self.value_type = value_type
            self.schema = versioned_schema(value_type, schema_version)
            if not any(self.schema.equals(s, check_metadata=True) for s in self.known_schemas):
                self.known_schemas.append(self.schema)

    def _rebuild_derived_state(self) -> None:
        """Leader epochs and producer state come from the batch headers (headers only, no decoding),
        or from the state snapshot and the headers after it (see ``state_snapshot``). A producer's
        last write is taken as its batch's max timestamp (as Kafka does), never later than now."""
        self.epochs.clear()
        self.producers.clear()
        now = self.clock()
        start = 0
        snapshot = read_snapshot(self.directory)
        if snapshot is not None and snapshot.end <= self.log_end_offset:
            self.epochs.entries = list(snapshot.epochs)
            self.producers.restore(snapshot.producers, now)
            start = snapshot.end
        first = max(0, bisect.bisect_right([s.base_offset for s in self.segments], start) - 1)
        for segment in self.segments[first:]:
            for header in segment.headers(start if segment is self.segments[first] else None):
                if header.base_offset >= start:
                    self._remember(header, min(header.max_timestamp, now))

    def _remember(self, header: BatchHeader, written_ms: int) -> None:
        self.epochs.assign(header.leader_epoch, header.base_offset)
        self.producers.record(
            header.producer_id,
            header.producer_seq,
            header.count,
            header.base_offset,
            header.last_offset,
            last_write_ms=written_ms,
            max_timestamp=header.max_timestamp,
        )

    def _save_state(self) -> None:
        """Write the state snapshot as of the log end (on roll and close)."""
        write_snapshot(
            self.directory, LogStateSnapshot(self.log_end_offset, list(self.epochs.entries), self.producers.entries())
        )

    def _drop_from(self, bases: list[int]) -> None:
        for base in bases:
            delete_segment_files(self.directory, base)

    def _read_recovery_point(self) -> int:
        try:
            return int((self.directory / RECOVERY_POINT_FILE).read_text().strip())
        except (OSError, ValueError):
            return 0

    def _write_recovery_point(self, offset: int) -> None:
        tmp = self.directory / (RECOVERY_POINT_FILE + ".tmp")
        tmp.write_text(str(offset))
        os.replace(tmp, self.directory / RECOVERY_POINT_FILE)

    # ----------------------------------------------------------------- properties
    @property
    def active(self) -> LogSegment:
        return self.segments[-1]

    @property
    def log_start_offset(self) -> int:
        """The first offset still in the log (retention moves it forward)."""
        return self.segments[0].base_offset

    @property
    def log_end_offset(self) -> int:
        """The offset the next appended record will get."""
        return self.segments[-1].next_offset

    @property
    def size_bytes(self) -> int:
        return sum(s.size for s in self.segments)

    # ----------------------------------------------------------------- appending
    def append(
        self,
        data: pa.RecordBatch | pa.Table,
        *,
        leader_epoch: int = 0,
        producer_id: int = -1,
        producer_seq: int = -1,
    ) -> AppendInfo:
        """Append records (columns ``key``, ``value``, optional ``timestamp`` and ``headers``) as one
        batch with the next contiguous offsets; returns where they landed.

        Bad input raises :class:`InvalidRecord` (:class:`InvalidTimestamp` for a timestamp out of the
        topic's bounds) or :class:`RecordTooLarge` and stores nothing. A batch or table is fully
        validated (:func:`check_produced`) before anything reads its values.
        """
        now = self.clock()
        schema = self.schema
        if isinstance(data, pa.RecordBatch | pa.Table):
            check_produced(data, self.config.max_message_bytes)
        batch = to_record_batch(data, self.value_type, now)
        if schema.metadata:
            batch = batch.replace_schema_metadata(schema.metadata)
        self._validate(batch)
        if self.config.message_timestamp_type == "LogAppendTime":
            batch = batch.set_column(
                1, self.schema.field(1), int64_column(np.full(batch.num_rows, now), TIMESTAMP_TYPE)
            )
        else:
            self._check_timestamps(batch.column(1), now)
        max_ts = column_max(batch.column(1))
        with self.lock:
            self._check_open()
            dup = self.producers.duplicate_of(producer_id, producer_seq, batch.num_rows)
            if dup is not None:
                return AppendInfo(
                    dup.base_offset, dup.last_offset, batch.num_rows, max_ts, leader_epoch, duplicate=True
                )
            base = self.log_end_offset
            batch = batch.set_column(
                0, self.schema.field(0), int64_column(np.arange(base, base + batch.num_rows, dtype=np.int64))
            )
            header = BatchHeader(
                base,
                base + batch.num_rows - 1,
                batch.num_rows,
                max_ts,
                leader_epoch,
                producer_id,
                producer_seq,
            )
            self._write(batch, header, now)
        return AppendInfo(base, header.last_offset, batch.num_rows, max_ts, leader_epoch)

    def append_replica(self, batch: pa.RecordBatch, header: BatchHeader) -> None:
        """Append a batch that already has offsets (a follower copying its leader's log); refused
        (:class:`InvalidRecord`) unless it is one of the topic's schemas, valid, and agrees with
        its header: a follower never stores what it could not read back."""
        check_replicated(batch, header, self.known_schemas)
        now = self.clock()
        with self.lock:
            self._check_open()
            if header.base_offset < self.log_end_offset:
                raise InvalidRecord(
                    f"replicated batch at offset {header.base_offset} is below the log end {self.log_end_offset}"
                )
            self._write(batch, header, now)

    def _write(self, batch: pa.RecordBatch, header: BatchHeader, now: int) -> None:
        """Encode, roll if the stored batch would overflow the segment (or is not contiguous, or of
        another schema), write."""
        if not self.active.schema.equals(batch.schema, check_metadata=True):
            self._start_segment_for(batch.schema, header.base_offset)
        encoded = self.active.encode(batch, header, self.config.compression)
        self._maybe_roll(encoded.size, now, base=header.base_offset)
        self.active.write(encoded, header)
        self._remember(header, now)
        self._after_append(batch.num_rows, now)

    def _validate(self, batch: pa.RecordBatch) -> None:
        if batch.num_rows == 0:
            raise InvalidRecord("a record batch must hold at least one record")
        size = batch.get_total_buffer_size()
        if size > self.config.max_message_bytes:
            raise RecordTooLarge(
                f"record batch of {size} bytes is larger than max.message.bytes={self.config.max_message_bytes}"
            )
        if self.config.compacted and batch.column(2).null_count:
            raise InvalidRecord("records of a compacted topic (cleanup.policy=compact) must have a key")

    def _check_timestamps(self, timestamps: pa.Array, now: int) -> None:
        """KIP-937: refuse CreateTime timestamps further than the topic allows from ``now``."""
        cfg = self.config
        values = int64_values(timestamps)
        early, late = int(values.min()), int(values.max())
        if late - now > cfg.message_timestamp_after_max_ms:
            raise InvalidTimestamp(
                f"timestamp {late} is {late - now} ms after the broker's clock; "
                f"message.timestamp.after.max.ms={cfg.message_timestamp_after_max_ms}"
            )
        if now - early > cfg.message_timestamp_before_max_ms:
            raise InvalidTimestamp(
                f"timestamp {early} is {now - early} ms before the broker's clock; "
                f"message.timestamp.before.max.ms={cfg.message_timestamp_before_max_ms}"
            )

    def _check_open(self) -> None:
        if self.closed:
            raise LogClosed(f"partition log {self.directory} is closed")

    def _maybe_roll(self, incoming_bytes: int, now: int, base: int | None = None) -> None:
        active = self.active
        if active.is_empty:
            if base is not None and base != active.base_offset:
                self._replace_empty_active(base)
            return
        if (
            active.size + incoming_bytes > self.config.segment_bytes
            or now - self._active_created_ms >= self.config.segment_ms
            or base is not None
            and base != active.next_offset
        ):
            self._roll(self.log_end_offset if base is None else base)

    def _new_segment(self, base: int, schema: pa.Schema | None = None) -> LogSegment:
        return LogSegment.create(self.directory, base, schema or self.schema, self.config.index_interval_bytes)

    def _start_segment_for(self, schema: pa.Schema, base: int) -> None:
        """A new active segment for batches of another schema (a new schema version)."""
        if not any(schema.equals(s, check_metadata=True) for s in self.known_schemas):
            self.known_schemas.append(schema)
        if self.active.is_empty:
            self.segments.pop().delete()
            self.segments.append(self._new_segment(base, schema))
            self._active_created_ms = self.clock()
        else:
            self._roll(base, schema)

    def _roll(self, base: int, schema: pa.Schema | None = None) -> None:
        old = self.active
        self._save_state()
        self.segments.append(self._new_segment(base, schema or old.schema))
        old.unpin()  # no longer appended to: its files close (reads need none)
        self._active_created_ms = self.clock()
        # fsync the finished segment off the append path (as Kafka's scheduler does)
        self._pending_flushes = [f for f in self._pending_flushes if not f.done()]
        self._unsynced.append(old)
        self._pending_flushes.append(_flusher().submit(self._flush_rolled, old))

    def _flush_rolled(self, segment: LogSegment) -> None:
        # closed, deleted or replaced meanwhile: nothing of it is left to make durable
        with contextlib.suppress(OSError, ValueError):
            segment.flush()
        with self.lock:
            self._unsynced = [s for s in self._unsynced if s is not segment]
            if not self.closed and not self._unsynced and segment.next_offset > self._read_recovery_point():
                self._write_recovery_point(min(segment.next_offset, self.active.base_offset))

    def _replace_empty_active(self, base: int) -> None:
        """An empty active segment at the wrong base offset (a follower's first fetch) is recreated."""
        schema = self.active.schema
        self.segments.pop().delete()
        self.segments.append(self._new_segment(base, schema))
        self._active_created_ms = self.clock()

    def roll(self) -> None:
        """Start a new active segment now (if the current one holds anything)."""
        with self.lock:
            if not self.active.is_empty:
                self._roll(self.log_end_offset)

    def roll_if_aged(self) -> bool:
        """Roll the active segment if it holds records and is ``segment.ms`` old: the roll its next
        append would make, made without waiting for one (a lake-enabled topic's tierer, which tiers
        closed segments only). True if it rolled."""
        with self.lock:
            self._check_open()
            if self.active.is_empty or self.clock() - self._active_created_ms < self.config.segment_ms:
                return False
            self._roll(self.log_end_offset)
            return True

    def _after_append(self, count: int, now: int) -> None:
        self._unflushed_messages += count
        cfg = self.config
        if (cfg.flush_messages >= 0 and self._unflushed_messages >= cfg.flush_messages) or (
            cfg.flush_ms >= 0 and now - self.last_flush_ms >= cfg.flush_ms
        ):
            self.flush()

    def flush(self) -> None:
        """fsync everything appended so far and move the recovery point to the log end."""
        began = time.monotonic()
        with self.lock:
            if self.closed:
                return
            for segment in self._unsynced:  # rolled segments not fsynced yet come first
                with contextlib.suppress(OSError, ValueError):
                    segment.flush()
            self._unsynced = []
            self.active.flush()
            self._unflushed_messages = 0
            self.last_flush_ms = self.clock()
            self._write_recovery_point(self.log_end_offset)
        if self.on_flush is not None:
            self.on_flush(time.monotonic() - began)

    # ----------------------------------------------------------------- reading
    def read(self, offset: int, max_bytes: int = DEFAULT_MAX_BYTES, upto: int | None = None) -> list[pa.RecordBatch]:
        """Record batches from the one holding ``offset`` on (see :meth:`read_stored`)."""
        return [batch for batch, _header in self.read_stored(offset, max_bytes, upto)]

    def read_stored(
        self, offset: int, max_bytes: int = DEFAULT_MAX_BYTES, upto: int | None = None
    ) -> list[tuple[pa.RecordBatch, BatchHeader]]:
        """Record batches from the one holding ``offset`` on, about ``max_bytes`` of them (at least one
        batch if any record is there), zero-copy from memory-mapped segments; none at or past ``upto``
        (the high watermark, for consumers). Reading at the log end returns ``[]``."""
        segments = self.segments
        start, end = segments[0].base_offset, segments[-1].next_offset
        if offset < 0 or offset < start or offset > end:
            raise OffsetOutOfRange(f"offset {offset} is outside the log [{start}, {end}]")
        if upto is not None and offset >= upto:
            return []
        out: list[tuple[pa.RecordBatch, BatchHeader]] = []
        budget = max_bytes
        i = max(0, bisect.bisect_right([s.base_offset for s in segments], offset) - 1)
        for segment in segments[i:]:
            if segment.next_offset <= offset:
                continue
            try:
                batches, taken, exhausted = segment.read(offset, budget, upto, at_least_one=not out)
            except FileNotFoundError as exc:
                raise OffsetOutOfRange(f"offset {offset} was just deleted by retention") from exc
            out.extend(batches)
            budget -= taken
            if not exhausted or (upto is not None and segment.next_offset >= upto):
                break
        return out

    def offset_for_time(self, timestamp: int) -> int | None:
        """The first offset whose timestamp is >= ``timestamp`` (ms), or None if every record is older."""
        for segment in list(self.segments):
            found = segment.offset_for_time(timestamp)
            if found is not None:
                return found
        return None

    def iter_batches(self) -> Iterator[pa.RecordBatch]:
        """Every batch of the log, oldest first."""
        for segment in list(self.segments):
            for stored in segment.batches():
                yield stored.batch

    # ----------------------------------------------------------------- retention and truncation
    def apply_retention(self) -> int:
        """Delete whole old segments by ``retention.ms`` (largest timestamp) and ``retention.bytes``;
        never the active segment. Returns how many segments were deleted."""
        if not self.config.deletes:
            return 0
        now = self.clock()
        cfg = self.config
        with self.lock:
            doomed: list[LogSegment] = []
            candidates = self.segments[:-1]
            if cfg.retention_ms >= 0:
                for segment in candidates:
                    if segment.max_timestamp >= now - cfg.retention_ms:
                        break
                    doomed.append(segment)
            if cfg.retention_bytes >= 0:
                excess = self.size_bytes - cfg.retention_bytes
                for segment in candidates:
                    if excess - segment.size < 0:
                        break
                    excess -= segment.size
                    if segment not in doomed:
                        doomed.append(segment)
            doomed.extend(s for s in self._past_local_retention(candidates, now) if s not in doomed)
            return self.delete_segments(doomed)

    def _past_local_retention(self, candidates: list[LogSegment], now: int) -> list[LogSegment]:
        """Lake-enabled topics: the oldest segments whose records are all tiered and which are past
        ``local.retention.ms`` or over ``local.retention.bytes`` (KIP-405). A segment not yet in the
        table is never deleted by these (only by ``retention.*``, as before)."""
        tiered = self.tiered_offset
        if not self.config.lake_enabled or tiered is None:
            return []
        local_ms, local_bytes = self.config.local_retention
        in_lake = []
        for segment in candidates:
            if segment.next_offset > tiered:
                break
            in_lake.append(segment)
        doomed: list[LogSegment] = []
        if local_ms >= 0:
            for segment in in_lake:
                if segment.max_timestamp >= now - local_ms:
                    break
                doomed.append(segment)
        if local_bytes >= 0:
            excess = self.size_bytes - local_bytes
            for segment in in_lake:
                if excess - segment.size < 0:
                    break
                excess -= segment.size
                if segment not in doomed:
                    doomed.append(segment)
        return doomed

    def delete_segments(self, doomed: list[LogSegment]) -> int:
        """Remove the given (non-active) segments; the log start moves to the first one left."""
        with self.lock:
            doomed = [s for s in doomed if s is not self.active]
            self.segments = [s for s in self.segments if s not in doomed]
            for segment in doomed:
                segment.delete()
            return len(doomed)

    def replace_segment(self, old: LogSegment, new: LogSegment | None) -> None:
        """Swap a segment object (after compaction rewrote its file); None drops it."""
        with self.lock:
            i = self.segments.index(old)
            if new is None:
                del self.segments[i]
            else:
                self.segments[i] = new

    def truncate_to(self, offset: int) -> None:
        """Remove every record at or after ``offset`` (a follower diverged from its leader)."""
        with self.lock:
            self._check_open()
            if offset >= self.log_end_offset:
                return
            if offset <= self.log_start_offset:
                self.truncate_fully(offset)
                return
            remove_snapshot(self.directory)  # it may describe batches about to go
            while len(self.segments) > 1 and self.active.base_offset >= offset:
                self.segments.pop().delete()
            self.epochs.truncate_from_end(offset)
            self.producers.truncate(offset)
            kept = self.active.truncate_to(offset)
            self._write_recovery_point(min(self._read_recovery_point(), offset))
            if kept is not None and kept.num_rows:
                self.append_replica(kept, header_for(kept, self._epoch_at(offset - 1), -1, -1))
            if self.log_end_offset < offset:  # compaction left a gap at the end: offsets never go back
                self._maybe_roll(0, self.clock(), base=offset)

    def _epoch_at(self, offset: int) -> int:
        epoch = -1
        for e, start in self.epochs.entries:
            if start <= offset:
                epoch = e
        return max(epoch, 0)

    def truncate_fully(self, new_start: int) -> None:
        """Delete everything and restart the log, empty, at ``new_start``."""
        with self.lock:
            remove_snapshot(self.directory)
            self.epochs.clear()
            self.producers.clear()
            for segment in self.segments:
                segment.delete()
            self.segments = [self._new_segment(new_start)]
            self._write_recovery_point(new_start)

    # ----------------------------------------------------------------- lifecycle
    def close(self) -> None:
        """Flush, close every segment and mark the shutdown clean (the next open skips recovery)."""
        for pending in self._pending_flushes:
            with contextlib.suppress(Exception):
                pending.result()
        with self.lock:
            if self.closed:
                return
            self.flush()
            self._save_state()
            for segment in self.segments:
                segment.close()
            self.closed = True
            (self.directory / CLEAN_SHUTDOWN_FILE).write_text("")

    def __enter__(self) -> PartitionLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"PartitionLog({self.directory}, start={self.log_start_offset}, end={self.log_end_offset})"


__all__ = ["AppendInfo", "PartitionLog", "header_for"]
