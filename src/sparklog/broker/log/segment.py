"""One segment of a partition log: an Arrow IPC stream file named by its base offset, plus its indexes.

Files of the segment with base offset 42:
``00000000000000000042.arrows`` (records), ``.index`` (offset index), ``.timeindex`` (time index).

Open files are bounded whatever the number of segments: only a segment being appended to (the
active one, "pinned") keeps its three descriptors open; any other opens a file only for the call
that writes or fsyncs it. Reads need no descriptor (a memory map outlives the descriptor it was
made from), and the memory maps and loaded indexes of non-active segments are kept for at most
:data:`SEGMENT_CACHE`'s limit of segments, least recently used dropped first (and after an idle
time, by the broker's maintenance pass), to be loaded again on the next read.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import errno
import functools
import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc as ipc

from sparklog.broker.log.batch_codec import (
    BatchEncoder,
    BatchHeader,
    EncodedBatch,
    StoredBatch,
    decode_message,
    extend_crc,
    read_batch_at,
    read_header_at,
    read_message_at,
    read_schema,
    scan_batches,
)
from sparklog.broker.log.batch_validation import check_stored
from sparklog.broker.log.index_file import fsync_path
from sparklog.broker.log.offset_index import OffsetIndex
from sparklog.broker.log.time_index import TimeIndex
from sparklog.errors import CorruptRecord
from sparklog.records import column_max

SEGMENT_SUFFIX = ".arrows"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
PARALLEL_CRC_BYTES = 512 << 10  # bodies this large get their CRC computed while they are written


@functools.cache
def _checksummer() -> concurrent.futures.ThreadPoolExecutor:
    """Threads that compute CRCs beside the writes (shared by every segment of the process)."""
    return concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 2, thread_name_prefix="sparklog-crc")


def segment_path(directory: Path, base_offset: int, suffix: str = SEGMENT_SUFFIX) -> Path:
    return directory / f"{base_offset:020d}{suffix}"


def delete_segment_files(directory: Path, base_offset: int) -> None:
    """Remove a segment's record file and indexes (the record file last would leave a valid log)."""
    for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX, SEGMENT_SUFFIX):
        segment_path(directory, base_offset, suffix).unlink(missing_ok=True)


DEFAULT_LOADED_SEGMENTS = 256
DEFAULT_SEGMENT_IDLE_S = 60.0
# what a segment opened lazily learns from its files on first use (see LogSegment.open)
_LAZY_FIELDS = frozenset({"schema", "first_position", "size", "next_offset", "max_timestamp", "first_batch_timestamp"})

log = logging.getLogger(__name__)


@functools.lru_cache(maxsize=1024)
def _schema_message(schema: pa.Schema, _metadata: tuple[tuple[bytes, bytes], ...]) -> bytes:
    """The stored schema message of ``schema`` (keyed by its metadata too: schemas compare without it)."""
    return BatchEncoder(schema).schema_message()


def schema_message(schema: pa.Schema) -> bytes:
    return _schema_message(schema, tuple(sorted((schema.metadata or {}).items())))


class SegmentCache:
    """The non-active segments of the process that hold a memory map or loaded indexes, least
    recently used first; past ``limit`` the oldest drop them (they load again when read).

    What a segment drops is only what it references: a reader that already holds a buffer or an
    index keeps it. A segment busy with a write or an fsync (its lock held) is skipped.
    """

    def __init__(self, limit: int = DEFAULT_LOADED_SEGMENTS) -> None:
        self.limit = limit
        self._lock = threading.Lock()
        self._segments: OrderedDict[LogSegment, None] = OrderedDict()

    def __len__(self) -> int:
        return len(self._segments)

    def __contains__(self, segment: object) -> bool:
        return segment in self._segments

    def touch(self, segment: LogSegment) -> None:
        """``segment`` was just used: the most recent now; drop the oldest past the limit."""
        segment._last_used = time.monotonic()
        victims: list[LogSegment] = []
        with self._lock:
            segments = self._segments
            segments[segment] = None
            segments.move_to_end(segment)
            while len(segments) > self.limit:
                victim = next(iter(segments))
                if victim is segment:
                    break
                del segments[victim]
                victims.append(victim)
        self._release(victims)

    def forget(self, segment: LogSegment) -> None:
        with self._lock:
            self._segments.pop(segment, None)

    def release_idle(self, idle_s: float, now: float | None = None) -> int:
        """Drop what the segments unused for ``idle_s`` seconds hold; returns how many did."""
        horizon = (time.monotonic() if now is None else now) - idle_s
        with self._lock:
            idle = [s for s in self._segments if s._last_used <= horizon]
            for segment in idle:
                del self._segments[segment]
        return self._release(idle)

    def release_all(self) -> int:
        return self.release_idle(0.0, now=float("inf"))

    def _release(self, segments: list[LogSegment]) -> int:
        busy = [s for s in segments if not s._release()]
        if busy:  # in use right now: keep them, as the most recently used
            with self._lock:
                for segment in busy:
                    self._segments[segment] = None
        return len(segments) - len(busy)


SEGMENT_CACHE = SegmentCache()


class LogSegment:
    """An append-only Arrow IPC stream of record batches with increasing offsets.

    Appends: a :class:`BatchEncoder` turns the batch into its IPC message as buffer references,
    written with ``pwritev`` at the end of the file (a large body while its CRC is computed on
    another thread, then the head that holds the CRC). Reads come zero-copy from a
    memory map renewed when the file has grown past it. The caller (``PartitionLog``) serializes
    appends.

    A new segment, or one written to, is *pinned*: it keeps its files open for the appends until
    :meth:`unpin` (the log rolled). Any other segment opens its files only for the call that needs
    them (recovery, fsync, truncation) and maps and loads its indexes on demand, within
    :data:`SEGMENT_CACHE`. After :meth:`close` the object stays readable as it was (its memory map
    is kept even if the file is then replaced or removed), for readers that still hold it.
    """

    def __init__(self, directory: Path, base_offset: int, index_interval_bytes: int = 4096) -> None:
        self.directory = Path(directory)
        self.base_offset = base_offset
        self.path = segment_path(self.directory, base_offset)
        self.index_interval_bytes = index_interval_bytes
        self.schema: pa.Schema
        self.first_position = 0
        self.size = 0
        self.next_offset = base_offset
        self.max_timestamp = -1
        self.first_batch_timestamp: int | None = None
        self.recovered_bytes = 0
        # batches known to pass full validation: everything below ``_valid_end`` (appended by this
        # process, or validated when first read), and further ones read out of order (start -> end)
        self._valid_end = 0
        self._valid_ahead: dict[int, int] = {}
        self._encoder: BatchEncoder | None = None
        self._bytes_since_index = 0
        self._fd = -1
        self._data: pa.Buffer | None = None
        self._offset_index: OffsetIndex | None = None
        self._time_index: TimeIndex | None = None
        self.pinned = False  # appended to: files stay open (see the class docstring)
        self._closed = False
        self._loaded = True  # False until a segment opened lazily has read its files
        self._expected_schemas: Sequence[pa.Schema] = ()
        self._lock = threading.RLock()  # held while a descriptor is in use or the indexes change
        self._last_used = 0.0  # time.monotonic() of the last read (SegmentCache)

    # ----------------------------------------------------------------- creation and opening
    @classmethod
    def create(
        cls,
        directory: Path,
        base_offset: int,
        schema: pa.Schema,
        index_interval_bytes: int = 4096,
    ) -> LogSegment:
        """A new, empty segment (its file holds just the schema message)."""
        seg = cls(directory, base_offset, index_interval_bytes)
        for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX):
            segment_path(seg.directory, base_offset, suffix).unlink(missing_ok=True)
        seg._encoder = BatchEncoder(schema)
        head = seg._encoder.schema_message()
        seg._fd = os.open(seg.path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        seg.pinned = True
        try:
            os.write(seg._fd, head)
            seg.schema = schema
            seg.first_position = seg.size = len(head)
            seg._open_indexes()
            seg._offset_index.open_file()  # type: ignore[union-attr]
            seg._time_index.open_file()  # type: ignore[union-attr]
        except BaseException:
            seg._shut(keep_readable=False)
            raise
        return seg

    @classmethod
    def open(
        cls,
        directory: Path,
        base_offset: int,
        index_interval_bytes: int = 4096,
        recover: bool = False,
        expected_schemas: Sequence[pa.Schema] = (),
        lazy: bool = False,
    ) -> LogSegment:
        """Open an existing segment. With ``recover`` every batch is verified, a torn or corrupt tail is
        truncated and the indexes are rebuilt; otherwise indexes are trusted if they look sane.

        The schema message has no checksum of its own: with ``expected_schemas`` (every schema the
        log's segments may have) a damaged one is rewritten as the closest expected schema of the
        same length (the batches' checksums then decide what is valid); one that resembles none
        raises :class:`CorruptRecord`.

        ``lazy`` (not with ``recover``; Kafka's ``LazyIndex``): nothing is read now. The first use
        of what the files tell (schema, size, next offset, timestamps; any read) opens the segment
        as above, checks its indexes and rebuilds them if they fail (a scan that also cuts a torn
        or corrupt tail, logged: the log keeps the later segments). A closed segment that never
        loaded does not load any more (:class:`FileNotFoundError`, as a deleted one).
        ``expected_schemas`` is read then, so it may be a list the log still extends.
        """
        if lazy and not recover:
            seg = cls(directory, base_offset, index_interval_bytes)
            for name in _LAZY_FIELDS - {"schema"}:
                delattr(seg, name)
            seg._loaded = False
            seg._expected_schemas = expected_schemas
            return seg
        seg = cls(directory, base_offset, index_interval_bytes)
        with seg._lock:
            seg._fd = os.open(seg.path, os.O_RDWR)
            try:
                seg.size = os.fstat(seg._fd).st_size
                if expected_schemas and seg._repair_schema(expected_schemas):
                    recover = True
                seg.schema, seg.first_position = read_schema(seg._map())
                indexes_exist = all(
                    segment_path(seg.directory, base_offset, s).exists() for s in (INDEX_SUFFIX, TIME_INDEX_SUFFIX)
                )
                seg._open_indexes()
                if recover or not indexes_exist or not seg._indexes_usable():
                    seg.recover()
                else:
                    seg._load_tail()
            except BaseException:
                seg._shut(keep_readable=False)
                raise
            seg._close_files()  # not pinned: the first append (if it becomes active) opens them again
        return seg

    def __getattr__(self, name: str) -> Any:
        """Only for the fields a lazily opened segment has not read yet (normal attribute lookup
        finds them once it has, so this costs nothing after the first use)."""
        if name not in _LAZY_FIELDS or "_loaded" not in self.__dict__:
            raise AttributeError(name)
        self._load()
        return object.__getattribute__(self, name)

    def _load(self) -> None:
        """Read a lazily opened segment's files: opened by :meth:`open` on a new object, whose
        state is then taken over (so that another thread never sees half of it)."""
        with self._lock:
            if self._loaded:
                return
            if self._closed:
                raise FileNotFoundError(errno.ENOENT, f"segment {self.path.name} is closed")
            opened = LogSegment.open(
                self.directory, self.base_offset, self.index_interval_bytes, expected_schemas=self._expected_schemas
            )
            SEGMENT_CACHE.forget(opened)
            if opened.recovered_bytes:
                log.warning(
                    "%s: %d bytes after offset %d failed verification when first read, and were cut",
                    self.path,
                    opened.recovered_bytes,
                    opened.next_offset - 1,
                )
            for name in (
                "_valid_end",
                "_valid_ahead",
                "_data",
                "_offset_index",
                "_time_index",
                "recovered_bytes",
                *sorted(_LAZY_FIELDS),
            ):
                setattr(self, name, getattr(opened, name))
            self._loaded = True
        self._touch()

    @property
    def loaded(self) -> bool:
        """Whether the segment has read its files (always, unless opened lazily and never used)."""
        return self._loaded

    def _repair_schema(self, expected: Sequence[pa.Schema]) -> bool:
        """Rewrite a damaged schema message; True if it was rewritten."""
        wants = [schema_message(schema) for schema in expected]
        head = os.pread(self._fd, max(len(w) for w in wants), 0)
        if any(head[: len(w)] == w for w in wants):
            return False
        fits = [w for w in wants if len(head) >= len(w)]
        if not fits:
            raise CorruptRecord(f"{self.path.name} is shorter than its schema message")
        distance, want = min((sum(a != b for a, b in zip(w, head, strict=False)), w) for w in fits)
        if distance > len(want) // 8:
            raise CorruptRecord(f"{self.path.name} does not start with any schema of its topic")
        os.pwrite(self._fd, want, 0)
        self._data = None
        return True

    def _open_indexes(self) -> None:
        self._offset_index = OffsetIndex(segment_path(self.directory, self.base_offset, INDEX_SUFFIX))
        self._time_index = TimeIndex(segment_path(self.directory, self.base_offset, TIME_INDEX_SUFFIX))

    @property
    def offset_index(self) -> OffsetIndex:
        index = self._offset_index
        if index is None:
            index = self._offset_index = OffsetIndex(segment_path(self.directory, self.base_offset, INDEX_SUFFIX))
        if not self.pinned:
            self._touch()
        return index

    @property
    def time_index(self) -> TimeIndex:
        index = self._time_index
        if index is None:
            index = self._time_index = TimeIndex(segment_path(self.directory, self.base_offset, TIME_INDEX_SUFFIX))
        if not self.pinned:
            self._touch()
        return index

    def _indexes_usable(self) -> bool:
        return self.offset_index.sane(self.base_offset, self.size) and len(self.time_index) == len(self.offset_index)

    def _load_tail(self) -> None:
        """Learn next offset and max timestamp from the last indexed batch onwards (headers only)."""
        entry = self.offset_index.lookup(2**62)
        position = entry[1] if entry else self.first_position
        self.max_timestamp = self.time_index.max_timestamp or -1
        data = self._map()
        try:
            for header, _position, end, _message in self._messages(data, position):
                self.next_offset = header.last_offset + 1
                self.max_timestamp = max(self.max_timestamp, header.max_timestamp)
                position = end
        except CorruptRecord:
            self.recover()
            return
        if position != self.size:
            self.recover()
            return
        self._set_first_batch_timestamp(data)

    def _set_first_batch_timestamp(self, data: pa.Buffer) -> None:
        if self.size > self.first_position:
            self.first_batch_timestamp = read_header_at(data, self.first_position)[0].max_timestamp

    def recover(self) -> int:
        """Verify every batch, truncate after the last valid one, rebuild both indexes.

        Returns the number of bytes cut off.
        """
        data = self._map()
        self.offset_index.truncate(0)
        self.time_index.truncate(0)
        self._bytes_since_index = 0
        self.first_batch_timestamp = None
        self.next_offset = self.base_offset
        self.max_timestamp = -1
        self._valid_end, self._valid_ahead = self.first_position, {}
        end = self.first_position
        for stored in scan_batches(data, self.schema, self.first_position, verify=True):
            if stored.header.base_offset < self.next_offset:
                break  # offsets must increase: anything else is garbage that happens to parse
            self._index(stored.header, stored.position, stored.size)
            end = stored.end
        cut = self.size - end
        self.recovered_bytes += cut
        if cut:
            with self._file() as fd:
                os.ftruncate(fd, end)
            self.size = end
            self._data = None
        return cut

    # ----------------------------------------------------------------- writing
    def encode(self, batch: pa.RecordBatch, header: BatchHeader, compression: str = "none") -> EncodedBatch:
        """The batch's stored message, not yet sealed (valid for any segment of this schema)."""
        encoder = self._encoder
        if encoder is None or encoder.compression != compression:
            encoder = self._encoder = BatchEncoder(self.schema, compression)
        return encoder.encode(batch, header)

    def write(self, encoded: EncodedBatch, header: BatchHeader) -> int:
        """Seal and append an encoded batch at the end of the file; returns the stored size.

        A large body is written while another thread computes its CRC; the head (which holds the
        CRC) goes last, so a crash in between leaves a head of zeros that recovery cuts off."""
        if not self.pinned:
            self._pin()
        position = self.size
        head, body = len(encoded.head), encoded.body_size
        if body >= PARALLEL_CRC_BYTES:
            body_crc = _checksummer().submit(extend_crc, encoded.head_crc(), encoded.body)
            self._write_at(encoded.body, body, position + head)
            encoded.seal(body_crc.result())
            self._write_at([encoded.head], head, position)
        else:
            encoded.seal()
            self._write_at(encoded.pieces(), head + body, position)
        self.size = position + head + body
        self._mark_valid(position, self.size)  # the log validated it before encoding
        self._index(header, position, head + body)
        return head + body

    def _write_at(self, pieces: list[Any], total: int, position: int) -> None:
        """Write ``pieces`` (``total`` bytes) at ``position``, finishing a short write."""
        written = os.pwritev(self._fd, pieces, position)
        while written < total:  # a short write of a huge batch: write the rest
            rest = b"".join(bytes(p) for p in pieces)[written:]
            written += os.pwrite(self._fd, rest, position + written)

    def append(self, batch: pa.RecordBatch, header: BatchHeader, compression: str = "none") -> int:
        """Append one batch whose ``offset`` column is already assigned; returns its stored size."""
        return self.write(self.encode(batch, header, compression), header)

    def _index(self, header: BatchHeader, position: int, size: int) -> None:
        if self.first_batch_timestamp is None:
            self.first_batch_timestamp = header.max_timestamp
        self.max_timestamp = max(self.max_timestamp, header.max_timestamp)
        if self._bytes_since_index >= self.index_interval_bytes:
            self.offset_index.append(header.base_offset, position)
            self.time_index.append(self.max_timestamp, header.base_offset)
            self._bytes_since_index = 0
        self._bytes_since_index += size
        self.next_offset = header.last_offset + 1

    def flush(self) -> None:
        """fsync the records and the indexes (a segment that is not pinned opens its files for it;
        fsync covers what was written through a descriptor closed since)."""
        with self._lock:
            if self._closed:
                raise OSError(errno.EBADF, f"segment {self.path.name} is closed")
            with self._file() as fd:
                os.fsync(fd)
            for index, suffix in ((self._offset_index, INDEX_SUFFIX), (self._time_index, TIME_INDEX_SUFFIX)):
                if index is not None:
                    index.flush()
                else:
                    fsync_path(segment_path(self.directory, self.base_offset, suffix))

    def truncate_to(self, offset: int) -> pa.RecordBatch | None:
        """Remove every record at or after ``offset``. A batch that straddles ``offset`` is removed
        whole and its records below ``offset`` are returned for the caller to append again."""
        if offset >= self.next_offset:
            return None
        self._pin()  # the log's active segment from now on: appended to next
        data = self._map()
        keep_end = self._start_position(offset)
        straddler: pa.RecordBatch | None = None
        for header, position, end, message in self._messages(data, keep_end):
            if header.last_offset < offset:
                keep_end = end
                continue
            if header.base_offset < offset:
                batch = self._decode(message, header, position, end)
                straddler = batch.filter(pc.less(batch.column(0), offset))
            break
        self._replace_with_prefix(keep_end)
        self.recover()
        return straddler

    def _replace_with_prefix(self, length: int) -> None:
        """Keep the first ``length`` bytes: copied to a new file renamed over this one, never an
        in-place truncation, because batches already handed to readers map the old file."""
        tmp = self.path.with_name(self.path.name + ".truncating")
        with open(tmp, "wb") as out:
            os.sendfile(out.fileno(), self._fd, 0, length) if length else None
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, self.path)
        os.close(self._fd)
        self._fd = os.open(self.path, os.O_RDWR)
        self.size = length
        self._data = None

    def _decode(self, message: ipc.Message, header: BatchHeader, position: int, end: int) -> pa.RecordBatch:
        """A stored batch's records, fully validated the first time this process decodes it
        (:class:`CorruptRecord` if it fails: never handed on to code that could crash on it)."""
        batch = decode_message(message, self.schema, position)
        if not self._known_valid(position):
            check_stored(batch, header)
            self._mark_valid(position, end)
        return batch

    def _known_valid(self, position: int) -> bool:
        return self.first_position <= position < self._valid_end or position in self._valid_ahead

    def _mark_valid(self, position: int, end: int) -> None:
        if position == self._valid_end or (position == self.first_position and self._valid_end < position):
            self._valid_end = end
            while (following := self._valid_ahead.pop(self._valid_end, None)) is not None:
                self._valid_end = following
        elif position > self._valid_end and len(self._valid_ahead) < 65_536:
            self._valid_ahead[position] = end

    def _start_position(self, offset: int) -> int:
        entry = self.offset_index.lookup(offset)
        return entry[1] if entry else self.first_position

    # ----------------------------------------------------------------- reading
    def _map(self, size: int | None = None) -> pa.Buffer:
        """The segment's bytes up to ``size`` (default: the committed size), memory-mapped (the
        descriptor is closed at once; the map lives as long as a buffer refers to it). A closed
        segment never maps its path again: the file there may be another one now."""
        size = self.size if size is None else size
        data = self._data
        if data is None or data.size < size:
            if self._closed:
                if data is None:
                    raise FileNotFoundError(errno.ENOENT, f"segment {self.path.name} is closed")
                return data
            with pa.memory_map(str(self.path), "r") as mapped:
                data = mapped.read_buffer()
            self._data = data
        if not self.pinned:
            self._touch()
        return data.slice(0, size) if data.size > size else data

    def _messages(self, data: pa.Buffer, position: int) -> Iterator[tuple[BatchHeader, int, int, ipc.Message]]:
        """Each batch message from ``position`` on: its header, start, end, and the message itself
        (decoded only if the caller wants the batch)."""
        while position < data.size:
            message, header, end = read_message_at(data, position)
            yield header, position, end, message
            position = end

    def read(
        self, offset: int, max_bytes: int, upto: int | None = None, at_least_one: bool = True
    ) -> tuple[list[tuple[pa.RecordBatch, BatchHeader]], int, bool]:
        """Whole batches holding records at or after ``offset`` (the first one may start before it),
        at most ``max_bytes`` of them (but one batch if ``at_least_one``), none at or past ``upto``; a
        batch that straddles ``upto`` is sliced. Returns the batches with their stored headers, the
        bytes they take (stored size, or decompressed size if larger) and whether the segment was
        read to its end."""
        data = self._map()
        out: list[tuple[pa.RecordBatch, BatchHeader]] = []
        taken = 0
        for header, position, end, message in self._messages(data, self._start_position(offset)):
            if header.last_offset < offset:
                continue
            if upto is not None and header.base_offset >= upto:
                return out, taken, True
            if taken + (end - position) > max_bytes and (out or not at_least_one):
                return out, taken, False
            batch = self._decode(message, header, position, end)
            if upto is not None and header.last_offset >= upto:
                batch = batch.filter(pc.less(batch.column(0), upto))
                header = header_for(batch, header.leader_epoch, header.producer_id, header.producer_seq)
            out.append((batch, header))
            # a compressed batch takes its decompressed size in memory: count that against max_bytes
            taken += max(end - position, batch.get_total_buffer_size())
        return out, taken, True

    def offset_for_time(self, timestamp: int) -> int | None:
        """The first offset whose record has a timestamp >= ``timestamp``, or None if none here."""
        if self.max_timestamp < timestamp:
            return None
        start = self.time_index.search_start(timestamp)
        position = self._start_position(start) if start is not None else self.first_position
        data = self._map()
        for header, pos, end, message in self._messages(data, position):
            if header.max_timestamp < timestamp:
                continue
            batch = self._decode(message, header, pos, end)
            ts = batch.column(1).cast(pa.int64())
            hits = pc.indices_nonzero(pc.greater_equal(ts, timestamp))
            if len(hits):
                return batch.column(0)[hits[0].as_py()].as_py()
        return None

    def headers(self, from_offset: int | None = None) -> Iterator[BatchHeader]:
        """Every batch's header, in order, without decoding the batches (from the indexed batch at
        or before ``from_offset`` on, if given)."""
        data = self._map()
        position = self.first_position if from_offset is None else self._start_position(from_offset)
        for header, _position, _end, _message in self._messages(data, position):
            yield header

    def batches(
        self, verify: bool = False, on_corrupt: Callable[[int, CorruptRecord], None] | None = None
    ) -> Iterator[StoredBatch]:
        """Every batch of the segment, in order. A batch that cannot be decoded or fails validation
        raises :class:`CorruptRecord`, or with ``on_corrupt`` is reported there (with its file
        position) and skipped, as long as the message framing still says where the next one starts."""
        data = self._map()
        position = self.first_position
        while position < data.size:
            try:
                stored = read_batch_at(data, position, self.schema, verify=verify)
                if not self._known_valid(position):
                    check_stored(stored.batch, stored.header)
                    self._mark_valid(position, stored.end)
            except CorruptRecord as exc:
                if on_corrupt is None:
                    raise
                on_corrupt(position, exc)
                try:
                    position = read_message_at(data, position)[2]
                except CorruptRecord:
                    return  # no framing left to find the next batch by
                continue
            yield stored
            position = stored.end

    # ----------------------------------------------------------------- lifecycle
    @property
    def is_empty(self) -> bool:
        return self.size <= self.first_position

    def close(self) -> None:
        """Close the files for good. The object stays readable as it is now, for readers that
        still hold it: its memory map is kept (made if the segment had dropped it), so a file
        replaced or removed after this (compaction, retention) does not change what they read."""
        self._shut(keep_readable=True)

    def delete(self) -> None:
        """Close and remove the segment's files."""
        self._shut(keep_readable=False)
        delete_segment_files(self.directory, self.base_offset)

    def _shut(self, keep_readable: bool) -> None:
        with self._lock:
            self._encoder = None
            self._close_files()
            if (
                keep_readable
                and self._loaded
                and not self._closed
                and (self._data is None or self._data.size < self.size)
            ):
                with (
                    contextlib.suppress(OSError, ValueError, pa.ArrowException),
                    pa.memory_map(str(self.path), "r") as mapped,
                ):
                    self._data = mapped.read_buffer()
            # an index dropped meanwhile is not loaded again (the file may change): reads scan instead
            if self._offset_index is None:
                self._offset_index = OffsetIndex(
                    segment_path(self.directory, self.base_offset, INDEX_SUFFIX), load=False
                )
            if self._time_index is None:
                self._time_index = TimeIndex(
                    segment_path(self.directory, self.base_offset, TIME_INDEX_SUFFIX), load=False
                )
            self.pinned = False
            self._closed = True
        SEGMENT_CACHE.forget(self)

    @property
    def closed(self) -> bool:
        return self._closed

    # ----------------------------------------------------------------- open files and the cache
    @contextlib.contextmanager
    def _file(self) -> Iterator[int]:
        """The record file's descriptor for one write or fsync: a pinned segment's own, otherwise
        one opened for the call (under the segment's lock, so the cache never closes it meanwhile)."""
        with self._lock:
            if self._fd >= 0:
                yield self._fd
                return
            if self._closed:
                raise OSError(errno.EBADF, f"segment {self.path.name} is closed")
            self._fd = os.open(self.path, os.O_RDWR)
            try:
                yield self._fd
            finally:
                if not self.pinned:
                    self._close_files()

    def _pin(self) -> None:
        """Keep the files open for appends (this is the log's active segment)."""
        with self._lock:
            if self.pinned:
                return
            if self._closed:
                raise OSError(errno.EBADF, f"segment {self.path.name} is closed")
            if self._fd < 0:
                self._fd = os.open(self.path, os.O_RDWR)
            for index in (self.offset_index, self.time_index):
                index.open_file()
            self.pinned = True
        SEGMENT_CACHE.forget(self)

    def unpin(self) -> None:
        """The log rolled past this segment: close its files (a pending fsync opens them for itself);
        its map and indexes stay loaded, within :data:`SEGMENT_CACHE`."""
        with self._lock:
            if not self.pinned:
                return
            self.pinned = False
            self._encoder = None
            self._close_files()
        self._touch()

    def _touch(self) -> None:
        if not self._closed:
            SEGMENT_CACHE.touch(self)

    def _close_files(self) -> None:
        fd, self._fd = self._fd, -1
        if fd >= 0:
            with contextlib.suppress(OSError):
                os.close(fd)
        for index in (self._offset_index, self._time_index):
            if index is not None:
                index.close()

    def _release(self) -> bool:
        """Drop the memory map and the loaded indexes (what readers already hold stays valid); False
        if the segment is busy (a write or an fsync holds its lock). Pinned and closed ones keep theirs."""
        if not self._lock.acquire(blocking=False):
            return False
        try:
            if not self.pinned and not self._closed:
                self._close_files()
                self._data = None
                self._offset_index = self._time_index = None
            return True
        finally:
            self._lock.release()

    @property
    def holds_files(self) -> bool:
        """Whether a descriptor of the segment is open (a pinned one's are)."""
        return self._fd >= 0 or any(i is not None and i.is_open for i in (self._offset_index, self._time_index))

    def __repr__(self) -> str:
        return f"LogSegment(base={self.base_offset}, next={self.next_offset}, size={self.size})"


def header_for(batch: pa.RecordBatch, leader_epoch: int, producer_id: int, producer_seq: int) -> BatchHeader:
    offsets = batch.column(0)
    ts = column_max(batch.column(1))
    return BatchHeader(
        base_offset=offsets[0].as_py(),
        last_offset=offsets[-1].as_py(),
        count=batch.num_rows,
        max_timestamp=-1 if ts is None else ts,
        leader_epoch=leader_epoch,
        producer_id=producer_id,
        producer_seq=producer_seq,
    )
