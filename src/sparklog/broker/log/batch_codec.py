"""How one record batch is stored: an Arrow IPC record batch message with a small checksummed header.

A segment file is a plain Arrow IPC *stream* (``pyarrow.ipc.open_stream`` reads it): the schema
message, then one record batch message per appended batch, and no end-of-stream marker while the
segment may still grow (pyarrow reads to end of file). Each batch message carries custom metadata
``{"sparklog": "SLB1|crc=…|base=…|last=…|count=…|maxts=…|epoch=…|pid=…|seq=…"}``: the offset range,
the largest timestamp, the leader epoch and producer id/sequence of the write, and a CRC-32C (as
Kafka's) of the whole message as stored, its 8 CRC characters read as ``-``: a batch torn or
corrupted anywhere (prefix, flatbuffer metadata, body) fails verification.
"""

from __future__ import annotations

import dataclasses
import io
from collections.abc import Iterator
from typing import Any

import google_crc32c
import pyarrow as pa
import pyarrow.ipc as ipc

from sparklog.errors import CorruptRecord

METADATA_KEY = "sparklog"
_MARKER = b"SLB1|crc="
_CRC_WIDTH = 8
_CRC_PLACEHOLDER = b"-" * _CRC_WIDTH
_PREFIX_BYTES = 8  # an IPC message starts with 0xFFFFFFFF and the int32 length of its metadata


@dataclasses.dataclass(frozen=True)
class BatchHeader:
    """What every stored batch says about itself (besides its columns)."""

    base_offset: int
    last_offset: int
    count: int
    max_timestamp: int
    leader_epoch: int = 0
    producer_id: int = -1
    producer_seq: int = -1

    def encode(self, crc: bytes = _CRC_PLACEHOLDER) -> str:
        return (
            f"{_MARKER.decode()}{crc.decode()}|base={self.base_offset}|last={self.last_offset}"
            f"|count={self.count}|maxts={self.max_timestamp}|epoch={self.leader_epoch}"
            f"|pid={self.producer_id}|seq={self.producer_seq}"
        )

    @classmethod
    def decode(cls, text: str) -> tuple[BatchHeader, int]:
        """Parse a header string; returns the header and the CRC it states."""
        try:
            parts = dict(p.split("=", 1) for p in text.split("|")[1:])
            crc = int(parts["crc"], 16)
            return (
                cls(
                    base_offset=int(parts["base"]),
                    last_offset=int(parts["last"]),
                    count=int(parts["count"]),
                    max_timestamp=int(parts["maxts"]),
                    leader_epoch=int(parts["epoch"]),
                    producer_id=int(parts["pid"]),
                    producer_seq=int(parts["seq"]),
                ),
                crc,
            )
        except (KeyError, ValueError) as exc:
            raise CorruptRecord(f"unreadable batch header {text[:120]!r}") from exc


@dataclasses.dataclass(frozen=True)
class StoredBatch:
    """A batch as found in a segment: where it lies and what it holds."""

    position: int
    end: int
    header: BatchHeader
    batch: pa.RecordBatch

    @property
    def size(self) -> int:
        return self.end - self.position


def write_options(compression: str) -> ipc.IpcWriteOptions:
    """IPC write options for a topic's ``compression`` (``none``, ``lz4``, ``zstd``)."""
    return ipc.IpcWriteOptions(compression=None if compression == "none" else compression)


class _Capture(io.RawIOBase):
    """A sink that keeps what an Arrow IPC writer writes (zero-copy buffer references)."""

    def __init__(self) -> None:
        self.pieces: list[Any] = []

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:  # type: ignore[override]
        self.pieces.append(data)
        return data.size if isinstance(data, pa.Buffer) else len(data)

    def take(self) -> list[Any]:
        pieces, self.pieces = self.pieces, []
        return pieces


class _StreamWriter:
    """A long-lived Arrow IPC stream writer over a sink we read back after every batch."""

    def __init__(self, sink: Any, schema: pa.Schema, compression: str) -> None:
        self.sink = sink
        self.writer = ipc.new_stream(pa.PythonFile(sink, mode="w"), schema, options=write_options(compression))
        self.schema_written = False


class BatchEncoder:
    """Turns record batches of one schema into the IPC messages of a segment, CRC included.

    Arrow stream writers live as long as the encoder; what they write is captured, not written,
    so the caller decides where the bytes go (``os.pwritev`` at the segment's end). Large batches
    are captured as references to their buffers (no copy); small ones through a ``BytesIO``
    (fewer Python calls, which dominate there).
    """

    SMALL_BATCH_BYTES = 64 << 10

    def __init__(self, schema: pa.Schema, compression: str = "none") -> None:
        self.schema = schema
        self.compression = compression
        self._large = _StreamWriter(_Capture(), schema, compression)
        self._small = _StreamWriter(io.BytesIO(), schema, compression)
        self._schema_message: bytes | None = None

    def schema_message(self) -> bytes:
        """The bytes that open a segment file: the stream's schema message."""
        if self._schema_message is None:
            probe = pa.BufferOutputStream()
            with ipc.new_stream(probe, self.schema, options=write_options(self.compression)) as writer:
                writer.write_batch(_empty_batch(self.schema))
            data = probe.getvalue()
            reader = pa.BufferReader(data)
            ipc.read_message(reader)
            self._schema_message = data.slice(0, reader.tell()).to_pybytes()
        return self._schema_message

    def encode(self, batch: pa.RecordBatch, header: BatchHeader) -> EncodedBatch:
        """One batch's message, its CRC field still blank (``EncodedBatch.seal`` fills it)."""
        small = batch.get_total_buffer_size() < self.SMALL_BATCH_BYTES
        stream = self._small if small else self._large
        stream.writer.write_batch(batch, custom_metadata={METADATA_KEY: header.encode()})
        if small:
            pieces: list[Any] = [stream.sink.getvalue()]
            stream.sink.seek(0)
            stream.sink.truncate()
        else:
            pieces = stream.sink.take()
        if not stream.schema_written:  # a writer's first output opens with the schema message
            stream.schema_written = True
            pieces = _drop_prefix(pieces, len(self.schema_message()))
        return EncodedBatch.split(pieces)


@dataclasses.dataclass
class EncodedBatch:
    """A batch message as it will be stored: ``head`` (the IPC prefix and flatbuffer metadata, in
    which the CRC field lies) then ``body`` (the column buffers, by reference). The CRC covers
    both; the body's part of it may be computed while the body is being written."""

    head: bytearray
    body: list[Any]
    crc_at: int

    @classmethod
    def split(cls, pieces: list[Any]) -> EncodedBatch:
        """Join the leading small pieces up to the end of the metadata into ``head``."""
        head = bytearray()
        i = 0
        meta_end = None
        while i < len(pieces) and (meta_end is None or len(head) < meta_end):
            head += bytes(pieces[i])
            i += 1
            if meta_end is None and len(head) >= _PREFIX_BYTES:
                meta_end = _PREFIX_BYTES + int.from_bytes(head[4:8], "little")
        crc_at = head.find(_MARKER, 0, meta_end) + len(_MARKER)
        if crc_at < len(_MARKER):
            raise CorruptRecord("batch message has no sparklog header")
        return cls(head, pieces[i:], crc_at)

    @property
    def body_size(self) -> int:
        return sum(_size(p) for p in self.body)

    @property
    def size(self) -> int:
        return len(self.head) + self.body_size

    def head_crc(self) -> int:
        """CRC-32C of the head (CRC field blank): where the CRC of the whole message starts."""
        return google_crc32c.value(bytes(self.head))

    def seal(self, crc: int | None = None) -> None:
        """Write the CRC of the whole message into its field: ``crc`` if the caller computed it
        (``extend_crc(head_crc(), body)``), else computed here."""
        if crc is None:
            crc = extend_crc(self.head_crc(), self.body)
        self.head[self.crc_at : self.crc_at + _CRC_WIDTH] = f"{crc:08x}".encode()

    def pieces(self) -> list[Any]:
        """Everything to write, in order (seal first)."""
        return [self.head, *self.body]


def extend_crc(crc: int, pieces: list[Any]) -> int:
    """``crc`` extended over ``pieces`` (buffers are read in place; google_crc32c releases the GIL)."""
    for p in pieces:
        crc = google_crc32c.extend(crc, p if isinstance(p, pa.Buffer) else bytes(p))
    return crc


def _empty_batch(schema: pa.Schema) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([pa.array([], f.type) for f in schema], schema=schema)


def _size(piece: Any) -> int:
    return piece.size if isinstance(piece, pa.Buffer) else len(piece)


def _drop_prefix(pieces: list[Any], count: int) -> list[Any]:
    out = []
    for p in pieces:
        n = _size(p)
        if count >= n:
            count -= n
            continue
        out.append(memoryview(p)[count:] if count else p)
        count = 0
    return out


def _header_span(metadata: pa.Buffer) -> tuple[int, int]:
    raw = metadata.to_pybytes()
    start = raw.find(_MARKER)
    if start < 0:
        raise CorruptRecord("batch message has no sparklog header")
    end = raw.find(b"\x00", start)
    return start, (end if end >= 0 else len(raw))


def _stored_crc(data: pa.Buffer, position: int, end: int, crc_at: int) -> int:
    """CRC-32C of the message stored in ``data[position:end]`` with its CRC field read as blank."""
    crc = google_crc32c.value(data.slice(position, crc_at - position))
    crc = google_crc32c.extend(crc, _CRC_PLACEHOLDER)
    return google_crc32c.extend(crc, data.slice(crc_at + _CRC_WIDTH, end - crc_at - _CRC_WIDTH))


def read_header(metadata: pa.Buffer) -> tuple[BatchHeader, int, int]:
    """Header, stated CRC and position of the CRC field inside a message's metadata."""
    start, end = _header_span(metadata)
    text = metadata.to_pybytes()[start:end].decode("ascii", errors="replace")
    header, crc = BatchHeader.decode(text)
    return header, crc, start + len(_MARKER)


def read_batch_at(data: pa.Buffer, position: int, schema: pa.Schema, verify: bool = False) -> StoredBatch:
    """Decode the batch message at ``position`` of a segment's bytes (zero-copy for uncompressed data).

    With ``verify`` the CRC is checked and the offsets are compared with the header. Raises
    :class:`CorruptRecord` for anything torn, corrupt or not a record batch.
    """
    message, header, crc, crc_at, end = _message_at(data, position)
    if verify and _stored_crc(data, position, end, position + _PREFIX_BYTES + crc_at) != crc:
        raise CorruptRecord(f"checksum mismatch in the batch at position {position}")
    batch = decode_message(message, schema, position)
    if verify:
        offsets = batch.column(0)
        if (
            batch.num_rows != header.count
            or batch.num_rows == 0
            or offsets[0].as_py() < header.base_offset
            or offsets[-1].as_py() != header.last_offset
        ):
            raise CorruptRecord(f"batch at position {position} disagrees with its header")
    return StoredBatch(position, end, header, batch)


def _message_at(data: pa.Buffer, position: int) -> tuple[ipc.Message, BatchHeader, int, int, int]:
    """The batch message at ``position``, its header, stated CRC, the CRC's place in the metadata,
    and where the message ends. Raises :class:`CorruptRecord` for anything torn or not a batch."""
    reader = pa.BufferReader(data)
    try:
        reader.seek(position)
        message = ipc.read_message(reader)
        if message.type != "record batch":
            raise CorruptRecord(f"expected a record batch at position {position}, found {message.type}")
        header, crc, crc_at = read_header(message.metadata)
    except (pa.ArrowException, OSError, EOFError, ValueError) as exc:
        raise CorruptRecord(f"unreadable batch at position {position}: {exc}") from exc
    return message, header, crc, crc_at, reader.tell()


def read_schema(data: pa.Buffer) -> tuple[pa.Schema, int]:
    """The schema that opens a segment, and where the first batch starts."""
    reader = pa.BufferReader(data)
    try:
        message = ipc.read_message(reader)
        if message.type != "schema":
            raise CorruptRecord(f"segment does not start with a schema message ({message.type})")
        return ipc.read_schema(message), reader.tell()
    except (pa.ArrowException, OSError, EOFError) as exc:
        raise CorruptRecord(f"unreadable segment schema: {exc}") from exc


def scan_batches(data: pa.Buffer, schema: pa.Schema, start: int, verify: bool = True) -> Iterator[StoredBatch]:
    """Every whole, valid batch from ``start`` on; stops silently at the first torn or corrupt one.

    The caller learns where valid data ends from the last batch's ``end`` (or ``start``).
    """
    position = start
    while position < data.size:
        try:
            stored = read_batch_at(data, position, schema, verify=verify)
        except CorruptRecord:
            return
        yield stored
        position = stored.end


def iter_segment(path: str) -> Iterator[tuple[pa.RecordBatch, BatchHeader]]:
    """Read a segment file with nothing but pyarrow: the batches and their parsed headers."""
    with pa.memory_map(path) as source:
        reader = ipc.open_stream(source)
        for item in reader.iter_batches_with_custom_metadata():
            header, _ = BatchHeader.decode(item.custom_metadata[METADATA_KEY.encode()].decode())
            yield item.batch, header


def read_message_at(data: pa.Buffer, position: int) -> tuple[ipc.Message, BatchHeader, int]:
    """The batch message at ``position`` of a segment's bytes, its header and where it ends,
    without decoding (or decompressing) the batch. Raises :class:`CorruptRecord` if unreadable."""
    message, header, _, _, end = _message_at(data, position)
    return message, header, end


def decode_message(message: ipc.Message, schema: pa.Schema, position: int) -> pa.RecordBatch:
    """The record batch of a message from :func:`read_message_at` (zero-copy for uncompressed data)."""
    try:
        return ipc.read_record_batch(message, schema)
    except (pa.ArrowException, OSError, EOFError, ValueError) as exc:
        raise CorruptRecord(f"unreadable batch at position {position}: {exc}") from exc


def read_header_at(data: pa.Buffer, position: int) -> tuple[BatchHeader, int]:
    """The header of the batch message at ``position`` and where that message ends, without
    decoding (or decompressing) the batch. Raises :class:`CorruptRecord` if unreadable."""
    _, header, end = read_message_at(data, position)
    return header, end
