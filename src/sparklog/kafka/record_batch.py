"""Kafka record batches (message format v2) to and from Arrow columns, without a Python step per record.

A batch is a 61-byte header (Kafka's ``DefaultRecordBatch``: base offset, length, partition leader
epoch, magic 2, CRC-32C of everything after it, attributes, last offset delta, base and max
timestamps, producer id and epoch, base sequence, record count) and a records section. The records
section's varints are parsed and written by a small C codec (``_records.c``, built by ``make`` and
loaded with ctypes) into (position, length) columns, from which whole Arrow buffers are gathered
in one copy; no Python runs per record. The columns are sparklog's own record columns
(:data:`sparklog.records.HEADER_TYPE` for headers; a record without headers has null headers, as
sparklog's producers store them), so a decoded batch is what a sparklog producer would have sent.

A compressed batch (the attributes' low 3 bits: 1 gzip, 2 snappy, 3 lz4, 4 zstd) compresses its
whole records section; its CRC covers the compressed bytes, so it is checked first, then the section
is decompressed by :mod:`sparklog.kafka.compression` into at most ``max_bytes`` (a small batch may
stand for gigabytes: :class:`RecordTooLarge` as soon as the output would pass the bound) and decoded
as an uncompressed one. A codec number Kafka does not define is :class:`UnsupportedCompression`. Batches
are written uncompressed.
"""

from __future__ import annotations

import ctypes
import dataclasses
import struct
from pathlib import Path

import crc32c
import numpy as np
import pyarrow as pa

from sparklog.errors import CorruptRecord, InvalidRecord, SparklogError
from sparklog.kafka import compression
from sparklog.records import HEADER_TYPE, TIMESTAMP_TYPE

HEADER = struct.Struct(">qiibIhiqqqhii")  # the batch header, big-endian, 61 bytes
CRC_START = 21  # the CRC covers the batch from its attributes on
MAGIC = 2
CODEC_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08  # set: LogAppendTime
TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20
NO_PRODUCER_ID = -1
NO_SEQUENCE = -1
MAX_DECOMPRESSED_BYTES = 100 << 20  # what a compressed batch's records may decompress to by default

_ERRORS = {
    1: "a field runs past the end of the batch",
    2: "a length is negative or out of range",
    3: "a record's fields do not add up to its length",
    4: "more headers than the batch can hold",
    5: "bytes follow the last record",
}


@dataclasses.dataclass(frozen=True)
class BatchHeader:
    """A v2 record batch's header fields."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def compression(self) -> int:
        return self.attributes & CODEC_MASK

    @property
    def log_append_time(self) -> bool:
        return bool(self.attributes & TIMESTAMP_TYPE_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_MASK)


@dataclasses.dataclass(frozen=True)
class DecodedBatch:
    """One batch: its header and its records as columns ``offset_delta``, ``timestamp``, ``key``,
    ``value``, ``headers``."""

    header: BatchHeader
    records: pa.RecordBatch


def _load() -> ctypes.CDLL:
    path = Path(__file__).with_name("_records.so")
    if not path.exists():
        raise SparklogError(f"the Kafka record codec is not built ({path} is missing): run `make install`")
    lib = ctypes.CDLL(str(path))
    p, i64 = ctypes.c_void_p, ctypes.c_int64
    lib.sl_parse_records.restype = i64
    lib.sl_parse_records.argtypes = [p, i64, i64, p, p, p, p, p, p, p, p, i64, p, p, p, p, p, p]
    lib.sl_gather.restype = i64
    lib.sl_gather.argtypes = [p, i64, p, p, p, p]
    lib.sl_records_size.restype = i64
    lib.sl_records_size.argtypes = [i64, p, p, p, p, p, p, p, p]
    lib.sl_write_records.restype = i64
    lib.sl_write_records.argtypes = [i64, p, p, p, p, p, p, p, p, p, p, p, p, p, p, p, p, p]
    return lib


_lib: ctypes.CDLL | None = None


def _codec() -> ctypes.CDLL:
    global _lib
    if _lib is None:
        _lib = _load()
    return _lib


def _ptr(array: np.ndarray) -> int:
    return int(array.ctypes.data)


# ----------------------------------------------------------------------------------------- reading
def read_header(data: pa.Buffer | bytes, at: int = 0) -> BatchHeader:
    """The header of the batch at ``at`` (:class:`CorruptRecord` if cut short or not v2)."""
    view = memoryview(data)
    if len(view) - at < HEADER.size:
        raise CorruptRecord(f"a record batch header needs {HEADER.size} bytes, {len(view) - at} remain")
    header = BatchHeader(*HEADER.unpack_from(view, at))
    if header.magic != MAGIC:
        raise CorruptRecord(f"record batch magic {header.magic} is not supported (only v2)")
    return header


def split_batches(data: pa.Buffer | bytes) -> list[tuple[BatchHeader, pa.Buffer]]:
    """The batches of a record set (a produce request's records), each with its whole bytes;
    :class:`CorruptRecord` for a length that does not fit."""
    buffer = data if isinstance(data, pa.Buffer) else pa.py_buffer(data)
    out = []
    at = 0
    while at < buffer.size:
        header = read_header(buffer, at)
        size = 12 + header.batch_length  # base offset and length are not counted in the length
        if header.batch_length < HEADER.size - 12 or at + size > buffer.size:
            raise CorruptRecord(
                f"a record batch of {header.batch_length} bytes does not fit the {buffer.size}-byte set"
            )
        out.append((header, buffer.slice(at, size)))
        at += size
    return out


def decode_batch(data: pa.Buffer | bytes, max_bytes: int = MAX_DECOMPRESSED_BYTES) -> DecodedBatch:
    """One batch's records as columns, its CRC checked; :class:`CorruptRecord` for a wrong CRC, a
    malformed record (naming which) or compressed data its codec cannot read. A compressed batch's
    records section is decompressed into at most ``max_bytes``: :class:`RecordTooLarge` if it stands
    for more, :class:`UnsupportedCompression` for a codec Kafka does not define."""
    buffer = data if isinstance(data, pa.Buffer) else pa.py_buffer(data)
    header = read_header(buffer)
    if header.batch_length + 12 != buffer.size:
        raise CorruptRecord(f"record batch length {header.batch_length} disagrees with its {buffer.size} bytes")
    crc = crc32c.crc32c(memoryview(buffer)[CRC_START:])
    if crc != header.crc:
        raise CorruptRecord(f"record batch CRC {header.crc:#010x} does not match its content ({crc:#010x})")
    section = buffer.slice(HEADER.size)
    if header.compression:
        section = compression.decompress(header.compression, section, max_bytes)
    return DecodedBatch(header, decode_records(section, header.records_count, header.base_timestamp))


def decode_records(section: pa.Buffer, count: int, base_timestamp: int) -> pa.RecordBatch:
    """The ``count`` records of an uncompressed (or decompressed) records section as columns."""
    if count < 0 or count > section.size:  # every record takes a byte at least
        raise CorruptRecord(f"a record batch of {section.size} bytes cannot hold {count} records")
    lib = _codec()
    ts_delta = np.empty(count, np.int64)
    off_delta = np.empty(count, np.int32)
    key_pos, val_pos = np.empty(count, np.int64), np.empty(count, np.int64)
    key_len, val_len = np.empty(count, np.int32), np.empty(count, np.int32)
    hdr_first, hdr_count = np.empty(count, np.int64), np.empty(count, np.int32)
    hcap = section.size // 2 + 1  # a header takes two bytes at least (pages untouched are not allocated)
    hk_pos, hv_pos = np.empty(hcap, np.int64), np.empty(hcap, np.int64)
    hk_len, hv_len = np.empty(hcap, np.int32), np.empty(hcap, np.int32)
    hused = np.zeros(1, np.int64)
    err = ctypes.c_int(0)
    parsed = lib.sl_parse_records(
        section.address, section.size, count, _ptr(ts_delta), _ptr(off_delta), _ptr(key_pos), _ptr(key_len),
        _ptr(val_pos), _ptr(val_len), _ptr(hdr_first), _ptr(hdr_count), hcap, _ptr(hk_pos), _ptr(hk_len),
        _ptr(hv_pos), _ptr(hv_len), _ptr(hused), ctypes.byref(err),
    )  # fmt: skip
    if err.value:
        what = _ERRORS.get(err.value, f"error {err.value}")
        where = f"record {parsed}" if parsed < count else "the records section"
        raise CorruptRecord(f"malformed {where} of a record batch of {count}: {what}")
    used = int(hused[0])
    headers = _headers(section, hdr_count, hk_pos[:used], hk_len[:used], hv_pos[:used], hv_len[:used])
    return pa.RecordBatch.from_arrays(
        [
            pa.array(off_delta),
            pa.array(base_timestamp + ts_delta).cast(TIMESTAMP_TYPE),
            _gather(section, key_pos, key_len, pa.binary()),
            _gather(section, val_pos, val_len, pa.binary()),
            headers,
        ],
        names=["offset_delta", "timestamp", "key", "value", "headers"],
    )


def _gather(section: pa.Buffer, pos: np.ndarray, length: np.ndarray, type_: pa.DataType) -> pa.Array:
    """Slices of the section (length -1: null) as one Arrow binary or string array (one copy)."""
    n = len(pos)
    data = np.empty(int(np.maximum(length, 0).sum()), np.uint8)
    offsets = np.empty(n + 1, np.int32)
    _codec().sl_gather(section.address, n, _ptr(pos), _ptr(length), _ptr(offsets), _ptr(data))
    nulls = length < 0
    validity = pa.py_buffer(np.packbits(~nulls, bitorder="little")) if nulls.any() else None
    return pa.Array.from_buffers(type_, n, [validity, pa.py_buffer(offsets), pa.py_buffer(data)])


def _headers(
    section: pa.Buffer,
    counts: np.ndarray,
    hk_pos: np.ndarray,
    hk_len: np.ndarray,
    hv_pos: np.ndarray,
    hv_len: np.ndarray,
) -> pa.Array:
    """Each record's headers as :data:`HEADER_TYPE` (none: null)."""
    n = len(counts)
    keys = _gather(section, hk_pos, hk_len, pa.string())
    try:
        keys.validate(full=True)  # Kafka's header keys are UTF-8 strings
    except pa.ArrowInvalid:
        raise CorruptRecord("a record header's key is not UTF-8") from None
    values = _gather(section, hv_pos, hv_len, pa.binary())
    entries = pa.StructArray.from_arrays([keys, values], fields=list(HEADER_TYPE.value_type))
    offsets = np.zeros(n + 1, np.int32)
    np.cumsum(counts, out=offsets[1:])
    empty = counts == 0
    validity = pa.py_buffer(np.packbits(~empty, bitorder="little")) if empty.any() else None
    return pa.Array.from_buffers(HEADER_TYPE, n, [validity, pa.py_buffer(offsets)], children=[entries])


# ----------------------------------------------------------------------------------------- writing
@dataclasses.dataclass(frozen=True)
class BatchFields:
    """What a written batch's header says besides its records."""

    base_offset: int
    partition_leader_epoch: int = -1
    log_append_time: bool = False
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = -1
    base_sequence: int = NO_SEQUENCE
    compression: int = 0  # the codec the records section is written with (Kafka's numbers; 0: none)


def encode_batch(records: pa.RecordBatch, fields: BatchFields) -> bytes:
    """Records (columns ``offset``, ``timestamp``, ``key``, ``value`` and optionally ``headers``,
    as sparklog stores them) as one v2 batch whose base offset is ``fields.base_offset`` (offset
    deltas from the ``offset`` column: a compacted range keeps its gaps), its records section
    compressed with ``fields.compression``."""
    n = records.num_rows
    if n == 0:
        raise InvalidRecord("a record batch holds one record at least")
    offsets = _int64(records.column("offset"))
    timestamps = _int64(records.column("timestamp").cast(pa.int64()))
    base_ts = int(timestamps[0])
    ts_delta = timestamps - base_ts
    off_delta = (offsets - fields.base_offset).astype(np.int32)
    key_data, key_pos, key_len = _slices(records.column("key"))
    val_data, val_pos, val_len = _slices(records.column("value"))
    names = records.schema.names
    headers = records.column("headers") if "headers" in names else None
    hdr_first, hdr_count, hk, hv = _header_slices(headers, n)
    lib = _codec()
    args_size = [_ptr(ts_delta), _ptr(off_delta), _ptr(key_len), _ptr(val_len), _ptr(hdr_first), _ptr(hdr_count)]
    size = lib.sl_records_size(n, *args_size, _ptr(hk[2]), _ptr(hv[2]))
    out = np.empty(HEADER.size + size, np.uint8)
    written = lib.sl_write_records(
        n, _ptr(ts_delta), _ptr(off_delta), key_data, _ptr(key_pos), _ptr(key_len), val_data, _ptr(val_pos),
        _ptr(val_len), _ptr(hdr_first), _ptr(hdr_count), hk[0], _ptr(hk[1]), _ptr(hk[2]), hv[0], _ptr(hv[1]),
        _ptr(hv[2]), _ptr(out) + HEADER.size,
    )  # fmt: skip
    assert written == size, (written, size)
    attributes = TIMESTAMP_TYPE_MASK if fields.log_append_time else 0
    if fields.compression:
        section = compression.compress(fields.compression, memoryview(out)[HEADER.size :])
        size = len(section)
        out = np.concatenate([out[: HEADER.size], np.frombuffer(section, np.uint8)])
        attributes |= fields.compression
    HEADER.pack_into(
        out, 0, fields.base_offset, HEADER.size - 12 + size, fields.partition_leader_epoch, MAGIC, 0, attributes,
        int(off_delta[-1]), base_ts, int(timestamps.max()), fields.producer_id, fields.producer_epoch,
        fields.base_sequence, n,
    )  # fmt: skip
    crc = crc32c.crc32c(memoryview(out)[CRC_START:])
    struct.pack_into(">I", out, 17, crc)
    return out.tobytes()


def _int64(column: pa.Array | pa.ChunkedArray) -> np.ndarray:
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    return column.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)


def _slices(column: pa.Array | pa.ChunkedArray) -> tuple[int, np.ndarray, np.ndarray]:
    """A binary or string column as (its data's address, each value's position, length; -1: null)."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    if pa.types.is_large_binary(column.type) or pa.types.is_large_string(column.type):
        column = column.cast(pa.binary())
    n = len(column)
    buffers = column.buffers()
    offsets = np.frombuffer(buffers[1], np.int32, count=n + 1, offset=4 * column.offset)
    pos = offsets[:-1].astype(np.int64)
    length = np.diff(offsets).astype(np.int32)
    if column.null_count:
        length[column.is_null().to_numpy(zero_copy_only=False)] = -1
    data = buffers[2]
    return (data.address if data is not None else 0), pos, length


def _header_slices(
    headers: pa.Array | pa.ChunkedArray | None, n: int
) -> tuple[np.ndarray, np.ndarray, tuple[int, np.ndarray, np.ndarray], tuple[int, np.ndarray, np.ndarray]]:
    empty = (0, np.zeros(0, np.int64), np.zeros(0, np.int32))
    if headers is None:
        return np.zeros(n, np.int64), np.zeros(n, np.int32), empty, empty
    if isinstance(headers, pa.ChunkedArray):
        headers = headers.combine_chunks()
    offsets = np.frombuffer(headers.buffers()[1], np.int32, count=n + 1, offset=4 * headers.offset).astype(np.int64)
    counts = np.diff(offsets).astype(np.int32)
    if headers.null_count:
        counts[headers.is_null().to_numpy(zero_copy_only=False)] = 0
    keys, values = headers.values.flatten()  # the entries, whole (the list offsets index into them)
    return offsets[:-1], counts, _slices(keys), _slices(values)
