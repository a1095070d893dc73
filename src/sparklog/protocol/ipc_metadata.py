"""What an Arrow IPC record batch message declares about itself, read from its metadata before any
of its buffers is decompressed or allocated: its row count, its buffers (offset and length in the
body), whether they are compressed, and so how many bytes decoding it would allocate.

The metadata is a FlatBuffer whose tables are defined by Arrow's ``format/Message.fbs``; it is read
with the ``flatbuffers`` runtime. Field slots are their declaration order in that file (slot ``i``
sits at vtable offset ``4 + 2 * i``): ``Message`` {version, header_type, header, bodyLength,
custom_metadata}; ``RecordBatch`` {length, nodes, buffers, compression, variadicBufferCounts};
``Buffer`` is a struct {offset: long, length: long}. A compressed buffer starts with its
uncompressed length (int64, little-endian; -1: stored uncompressed), Arrow's BodyCompression
``BUFFER`` method.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

import pyarrow as pa
from flatbuffers import encode
from flatbuffers import number_types as fb
from flatbuffers.table import Table

from sparklog.errors import InvalidRecord

RECORD_BATCH_HEADER = 3  # MessageHeader.RecordBatch

_MESSAGE_HEADER_TYPE, _MESSAGE_HEADER = 1, 2
_BATCH_LENGTH, _BATCH_BUFFERS, _BATCH_COMPRESSION = 0, 2, 3
_BUFFER_STRUCT_BYTES = 16
_INT64 = struct.Struct("<q")


def _slot(table: Table, index: int) -> int:
    """The position of a table's field ``index`` (0: absent, its default applies)."""
    offset = table.Offset(4 + 2 * index)
    return offset + table.Pos if offset else 0


class DeclaredBatch(NamedTuple):
    """What a record batch message says it holds."""

    rows: int
    decoded_bytes: int  # the buffers' total size once decoded (decompressed), as declared
    compressed: bool


def declared_batch(message: pa.ipc.Message) -> DeclaredBatch:
    """Read a record batch message's declarations; :class:`InvalidRecord` if it is not a record
    batch, its metadata cannot be read, or a buffer lies outside its body."""
    if message.type != "record batch":
        raise InvalidRecord(f"expected an Arrow record batch message, got a {message.type!r} message")
    return declared_by(message.metadata.to_pybytes(), message.body)


def declared_by(metadata: bytes, body: pa.Buffer | None) -> DeclaredBatch:
    """What a record batch message's FlatBuffer ``metadata`` declares about ``body``; :class:`InvalidRecord`
    if it cannot be read (whatever its bytes: the FlatBuffers runtime does not verify them)."""
    try:
        return _declared(metadata, body)
    except (IndexError, struct.error, ValueError, TypeError, OverflowError) as exc:
        # an offset pointing outside the metadata (TypeError: the runtime's check of an offset's range)
        raise InvalidRecord(f"unreadable Arrow record batch metadata ({exc})") from None


def _declared(data: bytes, body: pa.Buffer | None) -> DeclaredBatch:
    buf = bytearray(data)
    message = Table(buf, encode.Get(fb.UOffsetTFlags.packer_type, buf, 0))
    at = _slot(message, _MESSAGE_HEADER_TYPE)
    if not at or encode.Get(fb.Uint8Flags.packer_type, buf, at) != RECORD_BATCH_HEADER:
        raise InvalidRecord("the Arrow message's header is not a record batch")
    at = message.Offset(4 + 2 * _MESSAGE_HEADER)
    if not at:
        raise InvalidRecord("the Arrow record batch message has no header")
    batch = Table(buf, 0)
    message.Union(batch, at)
    at = _slot(batch, _BATCH_LENGTH)
    rows = encode.Get(fb.Int64Flags.packer_type, buf, at) if at else 0
    compressed = bool(_slot(batch, _BATCH_COMPRESSION))
    at = batch.Offset(4 + 2 * _BATCH_BUFFERS)
    count = batch.VectorLen(at) if at else 0
    start = batch.Vector(at) if at else 0
    body_size = body.size if body is not None else 0
    raw = memoryview(body) if body is not None else memoryview(b"")
    total = 0
    for i in range(count):
        offset = encode.Get(fb.Int64Flags.packer_type, buf, start + _BUFFER_STRUCT_BYTES * i)
        length = encode.Get(fb.Int64Flags.packer_type, buf, start + _BUFFER_STRUCT_BYTES * i + 8)
        if offset < 0 or length < 0 or offset + length > body_size:
            raise InvalidRecord(f"an Arrow buffer ({offset}, {length}) lies outside the {body_size}-byte body")
        if not compressed or length == 0:
            total += length
            continue
        if length < 8:
            raise InvalidRecord(f"a compressed Arrow buffer of {length} bytes has no length prefix")
        (uncompressed,) = _INT64.unpack_from(raw, offset)
        if uncompressed < -1:
            raise InvalidRecord(f"a compressed Arrow buffer declares {uncompressed} bytes")
        total += length - 8 if uncompressed == -1 else uncompressed
    if rows < 0:
        raise InvalidRecord(f"the Arrow record batch declares {rows} rows")
    return DeclaredBatch(rows, total, compressed)
