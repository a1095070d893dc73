"""Kafka record batches (message format v2) for the Kafka-protocol fuzzer: built from a case's plain
parameters, well-formed or mutated, and judged by a reference reader.

A records spec (a dict) makes :class:`Records` deterministically (bulk bytes from a numpy generator
seeded by the case): ``count``, ``seed``, ``keys`` (``none``, ``some``, ``all``, ``empty``),
``key_space``, ``value_size``, ``null_values``, ``headers`` (the most a record has), ``timestamp``
(one of :data:`TIMESTAMP_MODES`), ``deltas`` (``ok``, or how the records' offset deltas lie),
``builder`` (``sparklog``: :func:`sparklog.kafka.record_batch.encode_batch`; ``kafka-python``:
its ``DefaultRecordBatchBuilder``) and ``codec`` (0-4: the records section compressed with
:func:`sparklog.kafka.compression.compress`, the header's attributes, length and CRC rewritten).

A mutation (:data:`MUTATIONS`) then changes the batch's bytes: flipped, cut or extended bytes, a
header field that lies (length, count, last offset delta, magic, attributes, producer fields,
timestamps), the codec bits, random records, two batches, or a compression bomb (a small section
declaring or producing more than ``max.message.bytes``); with ``crc`` the CRC is computed again
over the result, so the broker must find the damage in the records.

:func:`judge` is the reference: a reader of the format written from Kafka's specification in plain
Python (varints, records, headers, the codecs' libraries used directly, every output bounded),
independent of the broker's C codec and of :mod:`sparklog.kafka.compression`'s bounded readers.
It says whether the broker must store a batch (:class:`Verdict`: ``valid`` True), must refuse it
(False, with the Kafka error codes a refusal may carry) or may do either (None), and what it would
store. :func:`parse_fetched` reads a Fetch response's record batches with the same code.
"""

from __future__ import annotations

import dataclasses
import functools
import struct
import zlib
from typing import Any

import cramjam
import crc32c
import lz4.frame
import numpy as np
import pyarrow as pa
import zstandard
from kafka.record.default_records import DefaultRecordBatchBuilder

from sparklog.fuzz.ledger import Fingerprints, fingerprint
from sparklog.kafka import compression
from sparklog.kafka.record_batch import BatchFields, encode_batch
from sparklog.records import HEADER_TYPE, TIMESTAMP_TYPE

HEADER = struct.Struct(">qiibIhiqqqhii")  # Kafka's DefaultRecordBatch header, 61 bytes
HEADER_SIZE = HEADER.size
CRC_START = 21
MAGIC = 2
NO_PRODUCER_ID = -1
TRANSACTIONAL = 0x10
CONTROL = 0x20
MAX_PRODUCER_ID = 1 << 47  # what the listener's InitProducerId hands out (sparklog.kafka.handlers.produce)
MAX_RECORDS = 1 << 20  # sparklog's records per batch
TIMESTAMP_AFTER_MAX_MS = 3_600_000  # message.timestamp.after.max.ms (Kafka 4's default)
CLOCK_MARGIN_MS = 120_000  # a timestamp this close to that bound may fall either side of it
INT64 = 1 << 64
ARROW_MARGIN = 0.95  # a batch whose records as Arrow columns take more than this of the limit may be refused

# Kafka's error codes (kafka.errors), as a refusal may carry them
CORRUPT_MESSAGE = 2
MESSAGE_TOO_LARGE = 10
INVALID_TIMESTAMP = 32
UNSUPPORTED_FOR_MESSAGE_FORMAT = 43
OUT_OF_ORDER_SEQUENCE = 45
DUPLICATE_SEQUENCE = 46
INVALID_PRODUCER_EPOCH = 47
INVALID_TXN_STATE = 48
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
UNKNOWN_PRODUCER_ID = 59
UNSUPPORTED_COMPRESSION_TYPE = 76
INVALID_RECORD = 87
MALFORMED = frozenset({CORRUPT_MESSAGE, INVALID_RECORD})

# field -> (offset, struct format) in the header
FIELDS: dict[str, tuple[int, str]] = {
    "base_offset": (0, ">q"),
    "batch_length": (8, ">i"),
    "leader_epoch": (12, ">i"),
    "magic": (16, ">b"),
    "crc": (17, ">I"),
    "attributes": (21, ">h"),
    "last_offset_delta": (23, ">i"),
    "base_timestamp": (27, ">q"),
    "max_timestamp": (35, ">q"),
    "producer_id": (43, ">q"),
    "producer_epoch": (51, ">h"),
    "base_sequence": (53, ">i"),
    "records_count": (57, ">i"),
}
# header fields the CRC does not cover and Kafka ignores on produce: a batch stays valid
IGNORED_FIELDS = ("base_offset", "leader_epoch")
TIMESTAMP_MODES = (
    "now",  # the broker's clock, a millisecond apart
    "same",  # all at one instant
    "past",  # 2001
    "zero",
    "minus-one",  # Kafka's "no timestamp"
    "negative",  # before 1970
    "descending",
    "soon",  # half an hour ahead: within message.timestamp.after.max.ms
    "future",  # three hours ahead: refused (INVALID_TIMESTAMP) on a CreateTime topic
    "max",  # the largest int64
    "min",  # the smallest int64 (beyond message.timestamp.before.max.ms only without overflow)
)
DELTAS = ("ok", "gap", "dup", "reverse", "start1")
MUTATIONS = ("flip", "cut", "extend", "field", "attributes", "codec", "section", "two-batches", "bomb")
BOMB_KINDS = ("zeros", "declares", "records", "under")
HEADER_KEYS = ("h", "trace-id", "", "é", "🙂", "x" * 100, "content-type")


# ----------------------------------------------------------------------------------------- records
@dataclasses.dataclass
class Records:
    """A batch's records as a reader sees them (timestamps as stored: base + delta, wrapped to int64)."""

    timestamps: list[int]
    keys: list[bytes | None]
    values: list[bytes | None]
    headers: list[list[tuple[str, bytes | None]]]
    offset_deltas: list[int]

    def __len__(self) -> int:
        return len(self.values)

    def arrow(self) -> pa.RecordBatch:
        """As sparklog stores them (``timestamp``, ``key``, ``value``, ``headers``; none: null)."""
        headers = [[{"key": k, "value": v} for k, v in h] if h else None for h in self.headers]
        return pa.RecordBatch.from_arrays(
            [
                pa.array(self.timestamps, pa.int64()).cast(TIMESTAMP_TYPE),
                pa.array(self.keys, pa.binary()),
                pa.array(self.values, pa.binary()),
                pa.array(headers, HEADER_TYPE),
            ],
            names=["timestamp", "key", "value", "headers"],
        )

    def fingerprints(self) -> Fingerprints:
        return fingerprint(self.arrow())


def _wrap64(value: int) -> int:
    value %= INT64
    return value - INT64 if value >= 1 << 63 else value


def make_records(spec: dict[str, Any], now: int) -> Records:
    """The records a spec stands for (``now``: the clock the timestamps are drawn around)."""
    rng = np.random.default_rng(int(spec["seed"]))
    n = int(spec["count"])
    keys: list[bytes | None]
    space = max(1, int(spec.get("key_space", 8)))
    mode = spec.get("keys", "all")
    if mode == "none":
        keys = [None] * n
    elif mode == "empty":
        keys = [b""] * n
    else:
        drawn = rng.integers(0, space, n).tolist()
        present = rng.random(n) >= (0.3 if mode == "some" else 0.0)
        keys = [b"k%d" % k if keep else None for k, keep in zip(drawn, present.tolist(), strict=True)]
    size = int(spec.get("value_size", 16))
    sizes = rng.integers(0, size + 1, n).tolist() if size > 0 else [0] * n
    blob = rng.integers(0, 256, sum(sizes), dtype=np.uint8).tobytes()
    values: list[bytes | None] = []
    at = 0
    for s in sizes:
        values.append(blob[at : at + s])
        at += s
    if spec.get("null_values"):
        nulls = rng.random(n) < 0.25
        values = [None if null else v for v, null in zip(values, nulls.tolist(), strict=True)]
    most = int(spec.get("headers", 0))
    headers: list[list[tuple[str, bytes | None]]] = []
    for count in rng.integers(0, most + 1, n).tolist() if most else [0] * n:
        entries = []
        for _ in range(count):
            key = HEADER_KEYS[int(rng.integers(0, len(HEADER_KEYS)))]
            value = (
                None if rng.random() < 0.2 else rng.integers(0, 256, int(rng.integers(0, 24)), dtype=np.uint8).tobytes()
            )
            entries.append((key, value))
        headers.append(entries)
    return Records(_timestamps(spec.get("timestamp", "now"), n, now), keys, values, headers, _deltas(spec, n))


def _timestamps(mode: str, n: int, now: int) -> list[int]:
    hour = 3_600_000
    first = {
        "now": now,
        "same": now,
        "past": 1_000_000_000_000,
        "zero": 0,
        "minus-one": -1,
        "negative": -1_000_000_000_000,
        "descending": now,
        "soon": now + hour // 2,
        "future": now + 3 * hour,
        "max": (1 << 63) - 1,
        "min": -(1 << 63),
    }[mode]
    if mode in ("same", "zero", "minus-one"):
        return [first] * n
    if mode in ("descending", "max"):
        return [first - i for i in range(n)]
    return [first + i for i in range(n)]


def _deltas(spec: dict[str, Any], n: int) -> list[int]:
    mode = spec.get("deltas", "ok")
    deltas = list(range(n))
    if mode == "gap" and n:
        deltas = [i + (1 if i >= n // 2 else 0) for i in range(n)]
    elif mode == "dup" and n > 1:
        deltas[-1] = deltas[-2]
    elif mode == "reverse":
        deltas.reverse()
    elif mode == "start1":
        deltas = [i + 1 for i in range(n)]
    return deltas


# ----------------------------------------------------------------------------------------- building
@dataclasses.dataclass(frozen=True)
class Producer:
    """The producer fields of a batch (Kafka's defaults: no producer)."""

    producer_id: int = NO_PRODUCER_ID
    epoch: int = -1
    sequence: int = -1


def build(spec: dict[str, Any], producer: Producer, now: int) -> tuple[bytes, Records]:
    """A well-formed batch of the spec's records (unless its offset deltas lie), compressed with
    its codec, and the records."""
    records = make_records(spec, now)
    if spec.get("builder") == "kafka-python":
        data = _build_kafka_python(records, producer)
    else:
        data = _build_sparklog(records, producer)
    codec = int(spec.get("codec", 0))
    if codec:
        data = recompress(data, codec)
    return data, records


def _build_sparklog(records: Records, producer: Producer) -> bytes:
    batch = pa.RecordBatch.from_arrays(
        [pa.array(records.offset_deltas, pa.int64()), pa.array(records.timestamps, pa.int64()), *_columns(records)],
        names=["offset", "timestamp", "key", "value", "headers"],
    )
    fields = BatchFields(0, -1, False, producer.producer_id, producer.epoch, producer.sequence)
    return encode_batch(batch, fields)


def _columns(records: Records) -> list[pa.Array]:
    arrow = records.arrow()
    return [arrow.column("key"), arrow.column("value"), arrow.column("headers")]


def _build_kafka_python(records: Records, producer: Producer) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=False,
        producer_id=producer.producer_id,
        producer_epoch=producer.epoch,
        base_sequence=producer.sequence,
        batch_size=1 << 62,
    )
    for i in range(len(records)):
        builder.append(
            records.offset_deltas[i],
            timestamp=records.timestamps[i],
            key=records.keys[i],
            value=records.values[i],
            headers=records.headers[i],
        )
    return bytes(builder.build())


def recompress(data: bytes, codec: int) -> bytes:
    """A batch's records section compressed with ``codec`` (sparklog's writer of each format),
    its attributes, length and CRC rewritten."""
    out = bytearray(data[:HEADER_SIZE]) + compression.compress(codec, data[HEADER_SIZE:])
    attributes = get_field(out, "attributes")
    set_field(out, "attributes", (attributes & ~0x07) | codec)
    set_field(out, "batch_length", len(out) - 12)
    return reseal(out)


def get_field(data: bytes | bytearray, name: str) -> int:
    at, fmt = FIELDS[name]
    return int(struct.unpack_from(fmt, data, at)[0])


def set_field(data: bytearray, name: str, value: int) -> None:
    """A header field set to ``value`` (wrapped to the field's width, as a lying client writes it)."""
    at, fmt = FIELDS[name]
    bits = struct.calcsize(fmt) * 8
    value %= 1 << bits
    if fmt[-1].islower() and value >= 1 << (bits - 1):
        value -= 1 << bits
    struct.pack_into(fmt, data, at, value)


def reseal(data: bytearray) -> bytes:
    """The batch with its CRC computed again (over whatever follows the CRC field)."""
    if len(data) >= CRC_START:
        struct.pack_into(">I", data, 17, crc32c.crc32c(bytes(data[CRC_START:])))
    return bytes(data)


# ----------------------------------------------------------------------------------------- mutating
def mutate(data: bytes, mutation: dict[str, Any], max_bytes: int) -> bytes:
    """``data`` changed as ``mutation`` says (``op`` one of :data:`MUTATIONS`; ``crc``: computed
    again afterwards); ``max_bytes`` sizes the compression bombs."""
    rng = np.random.default_rng(int(mutation.get("seed", 0)))
    out = bytearray(data)
    op = mutation["op"]
    if op == "flip":
        lo, hi = {"header": (0, HEADER_SIZE), "section": (HEADER_SIZE, len(out))}.get(
            mutation.get("where", "any"), (0, len(out))
        )
        if hi > lo:
            for _ in range(int(mutation.get("n", 1))):
                at = int(rng.integers(lo, hi))
                out[at] ^= int(rng.integers(1, 256))
    elif op == "cut":
        keep = int(len(out) * float(mutation.get("keep", 0.5)))
        del out[max(0, min(keep, len(out) - 1)) :]
        if mutation.get("fix") and len(out) >= 12:
            set_field(out, "batch_length", len(out) - 12)
    elif op == "extend":
        out += rng.integers(0, 256, int(mutation.get("n", 1)), dtype=np.uint8).tobytes()
        if mutation.get("fix"):
            set_field(out, "batch_length", len(out) - 12)
    elif op == "field":
        set_field(out, mutation["field"], int(mutation["value"]))
    elif op == "attributes":
        set_field(out, "attributes", get_field(out, "attributes") | int(mutation["bits"]))
    elif op == "codec":
        set_field(out, "attributes", (get_field(out, "attributes") & ~0x07) | int(mutation["codec"]))
    elif op == "section":
        del out[HEADER_SIZE:]
        out += rng.integers(0, 256, int(mutation.get("n", 16)), dtype=np.uint8).tobytes()
        set_field(out, "batch_length", len(out) - 12)
    elif op == "two-batches":
        out += data
    elif op == "bomb":
        out = bytearray(bomb(out, mutation, max_bytes))
    else:
        raise ValueError(f"unknown mutation {op!r}")
    return reseal(out) if mutation.get("crc") else bytes(out)


def bomb(header: bytearray, mutation: dict[str, Any], max_bytes: int) -> bytes:
    """A batch (``header``'s fields kept) whose small section stands for more than ``max_bytes``
    once decompressed, or just less (``under``: many tiny records, which Kafka takes)."""
    kind = mutation.get("kind", "zeros")
    codec = int(mutation.get("codec", compression.ZSTD))
    factor = float(mutation.get("factor", 2.0))
    count = 1
    if kind == "zeros":
        section = _compressed_zeros(codec, int(max_bytes * factor))
    elif kind == "declares":
        section = _declaring(codec)
    else:  # records, under: empty records (7-10 bytes each) of sequential offset deltas
        target = int(max_bytes * factor) if kind == "records" else max_bytes - 64
        count, raw = _empty_records(target)
        section = compression.compress(codec, raw)
    out = bytearray(header[:HEADER_SIZE]) + section
    set_field(out, "attributes", (get_field(out, "attributes") & ~0x07) | codec)
    set_field(out, "batch_length", len(out) - 12)
    set_field(out, "records_count", count)
    set_field(out, "last_offset_delta", count - 1)
    return reseal(out)  # a bomb's CRC is right unless the case says otherwise (mutate's crc)


@functools.lru_cache(maxsize=8)
def _compressed_zeros(codec: int, size: int) -> bytes:
    return compression.compress(codec, bytes(size))


@functools.lru_cache(maxsize=4)
def _empty_records(target: int) -> tuple[int, bytes]:
    """As many records without key, value or headers as fit in ``target`` bytes, and their section."""
    parts = []
    size = 0
    i = 0
    while True:
        body = b"\x00\x00" + _varint(i) + b"\x01\x01\x00"  # attributes, ts delta, offset delta, key, value, headers
        record = _varint(len(body)) + body
        if size + len(record) > target:
            break
        parts.append(record)
        size += len(record)
        i += 1
    return i, b"".join(parts)


def _varint(value: int) -> bytes:
    value = (value << 1) ^ (value >> 63)
    out = bytearray()
    while True:
        if value & ~0x7F:
            out.append((value & 0x7F) | 0x80)
            value >>= 7
        else:
            out.append(value)
            return bytes(out)


def _declaring(codec: int) -> bytes:
    """A few bytes in ``codec``'s format whose headers declare far more than they hold."""
    huge = 1 << 40
    if codec == compression.SNAPPY:
        return _varint_unsigned(0xFFFFFFFF) + b"\x00" * 8
    if codec == compression.ZSTD:
        # frame header: FCS 8 bytes, window descriptor; one raw 3-byte last block
        return (
            (0xFD2FB528).to_bytes(4, "little") + bytes([0xC0, 0x58]) + huge.to_bytes(8, "little") + b"\x19\x00\x00abc"
        )
    if codec == compression.LZ4:
        frame = bytearray(lz4.frame.compress(b"abc", store_size=True))
        frame[6:14] = huge.to_bytes(8, "little")  # the content size (the header checksum no longer matches)
        return bytes(frame)
    data = bytearray(compression.compress(compression.GZIP, b"abc"))
    data[-4:] = (0xFFFFFFFF).to_bytes(4, "little")  # gzip: a trailer that lies about the size
    return bytes(data)


def _varint_unsigned(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


# ----------------------------------------------------------------------------------------- judging
@dataclasses.dataclass(frozen=True)
class TopicRules:
    """What a topic asks of a produced batch beyond the format."""

    max_bytes: int
    compacted: bool = False
    log_append_time: bool = False


@dataclasses.dataclass(frozen=True)
class Verdict:
    """What the broker must do with a batch: store it (``valid`` True: ``records``), refuse it
    (False: with one of ``errors``) or either (None: ``records``, if known, is what it stores;
    ``errors`` what a refusal may carry)."""

    valid: bool | None
    records: Records | None
    errors: frozenset[int] = frozenset()
    why: str = ""


class _Bad(Exception):  # noqa: N818 - private control flow of the reference reader
    def __init__(self, codes: frozenset[int] | set[int], why: str) -> None:
        super().__init__(why)
        self.codes = frozenset(codes)
        self.why = why


def judge(data: bytes | None, rules: TopicRules, now: int) -> Verdict:
    """The reference's verdict on one partition's records in a produce request."""
    if data is None:
        return Verdict(False, None, MALFORMED, "no records")
    if len(data) > rules.max_bytes:
        return Verdict(False, None, frozenset({MESSAGE_TOO_LARGE}), f"{len(data)} bytes > max.message.bytes")
    problems: list[_Bad] = []
    if len(data) < HEADER_SIZE:
        return Verdict(False, None, MALFORMED, f"{len(data)} bytes: less than a batch header")
    try:
        _one_batch(data)
    except _Bad as bad:
        problems.append(bad)
    fields = dict(zip(FIELDS, HEADER.unpack_from(data), strict=True))
    if fields["magic"] != MAGIC:
        problems.append(_Bad({*MALFORMED, UNSUPPORTED_FOR_MESSAGE_FORMAT}, f"magic {fields['magic']}"))
    if crc32c.crc32c(data[CRC_START:]) != fields["crc"]:
        problems.append(_Bad({CORRUPT_MESSAGE}, "wrong CRC"))
    attributes = fields["attributes"]
    if attributes & (TRANSACTIONAL | CONTROL):
        problems.append(
            _Bad({INVALID_RECORD, INVALID_TXN_STATE, TRANSACTIONAL_ID_AUTHORIZATION_FAILED}, "transactional/control")
        )
    codec = attributes & 0x07
    if codec > compression.ZSTD:
        problems.append(_Bad({UNSUPPORTED_COMPRESSION_TYPE, CORRUPT_MESSAGE}, f"codec {codec}"))
    pid, epoch = fields["producer_id"], fields["producer_epoch"]
    unsure = ""
    maybe: set[int] = set()
    if pid != NO_PRODUCER_ID:
        if not (0 <= pid < MAX_PRODUCER_ID and 0 <= epoch < 1 << 15):
            problems.append(
                _Bad({INVALID_RECORD, UNKNOWN_PRODUCER_ID, INVALID_PRODUCER_EPOCH}, f"producer {pid} epoch {epoch}")
            )
        elif fields["base_sequence"] < 0:
            unsure = f"producer {pid} with sequence {fields['base_sequence']}"
            maybe |= {INVALID_RECORD, OUT_OF_ORDER_SEQUENCE, DUPLICATE_SEQUENCE}
    if problems:
        return _refused(problems)
    try:
        section = _decompress(codec, data[HEADER_SIZE:], rules.max_bytes)
        records = parse_records(section, fields["records_count"], fields["base_timestamp"], strict=True)
    except _Bad as bad:
        return _refused([bad])
    n = len(records)
    if n == 0 or fields["last_offset_delta"] != n - 1:
        return Verdict(False, None, MALFORMED, f"last offset delta {fields['last_offset_delta']} of {n} records")
    if rules.compacted and any(k is None for k in records.keys):
        return Verdict(False, None, frozenset({INVALID_RECORD}), "a record without a key on a compacted topic")
    if not rules.log_append_time:
        late = max(records.timestamps) - now
        if late > TIMESTAMP_AFTER_MAX_MS + CLOCK_MARGIN_MS:
            return Verdict(False, None, frozenset({INVALID_TIMESTAMP}), f"a timestamp {late} ms ahead")
        if late > TIMESTAMP_AFTER_MAX_MS - CLOCK_MARGIN_MS:
            unsure = unsure or f"a timestamp {late} ms ahead: near message.timestamp.after.max.ms"
            maybe.add(INVALID_TIMESTAMP)
        if now - min(records.timestamps) >= 1 << 63:  # Kafka's broker wraps this difference around
            unsure = unsure or "a timestamp further back than an int64 of milliseconds from now"
            maybe.add(INVALID_TIMESTAMP)
    if n > MAX_RECORDS:
        unsure = unsure or f"{n} records: more than sparklog's {MAX_RECORDS} a batch"
        maybe.add(MESSAGE_TOO_LARGE)
    stored = records.arrow().get_total_buffer_size() + 8 * n  # as the log measures it, offsets included
    if stored > rules.max_bytes * ARROW_MARGIN:
        # sparklog bounds a batch's records as stored (Arrow columns) by max.message.bytes too
        unsure = unsure or f"its records take {stored} bytes as Arrow columns (max.message.bytes {rules.max_bytes})"
        maybe.add(MESSAGE_TOO_LARGE)
    return Verdict(None if unsure else True, records, frozenset(maybe), unsure)


def _refused(problems: list[_Bad]) -> Verdict:
    codes: set[int] = set()
    for bad in problems:
        codes |= bad.codes
    return Verdict(False, None, frozenset(codes), "; ".join(b.why for b in problems))


def _one_batch(data: bytes) -> None:
    """A record set holds exactly one batch whose length covers it."""
    length = struct.unpack_from(">i", data, 8)[0]
    if length < HEADER_SIZE - 12:
        raise _Bad(MALFORMED, f"batch length {length}")
    if 12 + length > len(data):
        raise _Bad(MALFORMED, f"batch length {length} runs past the {len(data)} bytes")
    if 12 + length < len(data):
        raise _Bad(MALFORMED, f"{len(data) - 12 - length} bytes after the batch")


def _decompress(codec: int, data: bytes, limit: int) -> bytes:
    """The records section, decompressed into at most ``limit`` bytes (the codecs' own libraries)."""
    if codec == compression.NONE:
        return data
    out = bytearray()

    def add(chunk: bytes) -> None:
        out.extend(chunk)
        if len(out) > limit:
            raise _Bad({MESSAGE_TOO_LARGE}, f"decompresses to more than {limit} bytes")

    try:
        if codec == compression.GZIP:
            rest = data
            while True:
                inflater = zlib.decompressobj(31)
                tail = rest
                while True:
                    add(inflater.decompress(tail, limit + 1 - len(out)))
                    tail = inflater.unconsumed_tail
                    if inflater.eof or not tail:
                        break
                if not inflater.eof:
                    raise _Bad({CORRUPT_MESSAGE}, "gzip: cut short")
                rest = inflater.unused_data
                if not rest:
                    return bytes(out)
        if codec == compression.SNAPPY:
            blocks = _snappy_blocks(data)
            declared = 0
            for block in blocks:
                declared += cramjam.snappy.decompress_raw_len(block)
                if declared > limit:
                    raise _Bad({MESSAGE_TOO_LARGE}, f"snappy blocks declare more than {limit} bytes")
            for block in blocks:
                add(bytes(cramjam.snappy.decompress_raw(block)))
            return bytes(out)
        if codec == compression.LZ4:
            rest = data
            while True:
                if lz4.frame.get_frame_info(rest)["content_size"] > limit:
                    raise _Bad({MESSAGE_TOO_LARGE}, "an lz4 frame declares more than the limit")
                decompressor = lz4.frame.LZ4FrameDecompressor()
                piece = rest
                while not decompressor.eof:
                    chunk = decompressor.decompress(piece, max_length=limit + 1 - len(out))
                    add(chunk)
                    if not chunk and (not piece or decompressor.needs_input):
                        raise _Bad({CORRUPT_MESSAGE}, "lz4: cut short")
                    piece = b""
                rest = decompressor.unused_data or b""
                if not rest:
                    return bytes(out)
        if codec == compression.ZSTD:
            rest = data
            while rest:
                params = zstandard.get_frame_parameters(rest)
                if params.content_size != zstandard.CONTENTSIZE_UNKNOWN and params.content_size > limit:
                    raise _Bad({MESSAGE_TOO_LARGE}, "a zstd frame declares more than the limit")
                reader = zstandard.ZstdDecompressor().stream_reader(rest, read_across_frames=False)
                while chunk := reader.read(min(1 << 20, limit + 1 - len(out)) or 1):
                    add(chunk)
                one = zstandard.ZstdDecompressor().decompressobj()
                one.decompress(rest)  # the same frame again, whole: its output is what the reader gave
                if not one.eof:
                    raise _Bad({CORRUPT_MESSAGE}, "zstd: cut short")
                rest = one.unused_data
            return bytes(out)
    except _Bad:
        raise
    except Exception as exc:  # the codecs' libraries raise their own errors on data they cannot read
        raise _Bad({CORRUPT_MESSAGE}, f"{compression.NAMES[codec]}: {type(exc).__name__}") from None
    raise AssertionError(codec)


def _snappy_blocks(data: bytes) -> list[bytes]:
    magic = compression.XERIAL_MAGIC
    if not data.startswith(magic) or len(data) < 16:
        return [data]
    blocks, at = [], 16
    while at < len(data):
        if data[at : at + 8] == magic and len(data) - at >= 16:
            at += 16
            continue
        if len(data) - at < 4:
            raise _Bad({CORRUPT_MESSAGE}, "snappy: a block length cut short")
        size = int.from_bytes(data[at : at + 4], "big", signed=True)
        at += 4
        if size <= 0 or size > len(data) - at:
            raise _Bad({CORRUPT_MESSAGE}, f"snappy: a block of {size} bytes")
        blocks.append(data[at : at + size])
        at += size
    return blocks


# ----------------------------------------------------------------------------------------- reading
def _read_varlong(data: bytes, at: int, end: int) -> tuple[int, int]:
    raw, shift = 0, 0
    while True:
        if at >= end or shift >= 70:
            raise _Bad(MALFORMED, "a varint runs past its record")
        b = data[at]
        at += 1
        raw |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            raw &= INT64 - 1
            return (raw >> 1) ^ -(raw & 1), at


def _read_varint(data: bytes, at: int, end: int) -> tuple[int, int]:
    value, at = _read_varlong(data, at, end)
    if not -(1 << 31) <= value < 1 << 31:
        raise _Bad(MALFORMED, f"varint {value} is not an int32")
    return value, at


def _read_bytes(data: bytes, at: int, end: int, nullable: bool) -> tuple[bytes | None, int]:
    n, at = _read_varint(data, at, end)
    if n == -1 and nullable:
        return None, at
    if n < 0:
        raise _Bad(MALFORMED, f"a length of {n}")
    if at + n > end:
        raise _Bad(MALFORMED, "a field runs past its record")
    return data[at : at + n], at + n


def parse_records(section: bytes, count: int, base_timestamp: int, strict: bool) -> Records:
    """The ``count`` records of a records section (uncompressed). ``strict`` (a produced batch):
    offset deltas numbered 0..n-1 and no byte after the last record; otherwise deltas ascending."""
    if count < 0 or count > len(section):
        raise _Bad(MALFORMED, f"{count} records in a section of {len(section)} bytes")
    out = Records([], [], [], [], [])
    at, end = 0, len(section)
    for i in range(count):
        length, at = _read_varint(section, at, end)
        if length < 0 or at + length > end:
            raise _Bad(MALFORMED, f"record {i} of {length} bytes does not fit")
        stop = at + length
        if at >= stop:
            raise _Bad(MALFORMED, f"record {i} is empty")
        at += 1  # attributes: unused
        ts_delta, at = _read_varlong(section, at, stop)
        offset_delta, at = _read_varint(section, at, stop)
        key, at = _read_bytes(section, at, stop, True)
        value, at = _read_bytes(section, at, stop, True)
        n_headers, at = _read_varint(section, at, stop)
        if n_headers < 0:
            raise _Bad(MALFORMED, f"record {i} has {n_headers} headers")
        headers: list[tuple[str, bytes | None]] = []
        for _ in range(n_headers):
            raw_key, at = _read_bytes(section, at, stop, False)
            header_value, at = _read_bytes(section, at, stop, True)
            try:
                headers.append((bytes(raw_key or b"").decode("utf-8"), header_value))
            except UnicodeDecodeError:
                raise _Bad(MALFORMED, f"record {i}: a header key that is not UTF-8") from None
        if at != stop:
            raise _Bad(MALFORMED, f"record {i}: its fields do not add up to its length")
        out.timestamps.append(_wrap64(base_timestamp + ts_delta))
        out.keys.append(key)
        out.values.append(value)
        out.headers.append(headers)
        out.offset_deltas.append(offset_delta)
    if strict:
        if at != end:
            raise _Bad(MALFORMED, f"{end - at} bytes after the last record")
        if out.offset_deltas != list(range(count)):
            raise _Bad(MALFORMED, "offset deltas not numbered 0..n-1")
    elif any(b <= a for a, b in zip(out.offset_deltas, out.offset_deltas[1:], strict=False)):
        raise _Bad(MALFORMED, "offset deltas not ascending")
    return out


@dataclasses.dataclass
class FetchedBatch:
    base_offset: int
    leader_epoch: int
    attributes: int
    records: Records

    @property
    def offsets(self) -> list[int]:
        return [self.base_offset + d for d in self.records.offset_deltas]


def parse_fetched(data: bytes) -> tuple[list[FetchedBatch], str | None]:
    """The record batches of a Fetch response's records (a batch cut short at the end is left
    out, as Kafka's consumers leave it), and what is wrong with them (None: nothing)."""
    batches: list[FetchedBatch] = []
    at = 0
    while len(data) - at >= HEADER_SIZE:
        fields = dict(zip(FIELDS, HEADER.unpack_from(data, at), strict=True))
        size = 12 + fields["batch_length"]
        if fields["batch_length"] < HEADER_SIZE - 12:
            return batches, f"a batch at byte {at} of length {fields['batch_length']}"
        if at + size > len(data):
            break  # cut short: the rest comes with the next fetch
        whole = data[at : at + size]
        at += size
        where = f"the batch at offset {fields['base_offset']}"
        if fields["magic"] != MAGIC:
            return batches, f"{where}: magic {fields['magic']}"
        if crc32c.crc32c(whole[CRC_START:]) != fields["crc"]:
            return batches, f"{where}: wrong CRC"
        codec = fields["attributes"] & 0x07
        try:
            section = _decompress(codec, whole[HEADER_SIZE:], 1 << 30)
            records = parse_records(section, fields["records_count"], fields["base_timestamp"], strict=False)
        except _Bad as bad:
            return batches, f"{where}: {bad.why}"
        if not len(records):
            return batches, f"{where}: no records"
        if records.offset_deltas[-1] != fields["last_offset_delta"]:
            return batches, f"{where}: last offset delta {fields['last_offset_delta']} is not its last record's"
        if fields["attributes"] & 0x08:  # LogAppendTime: every record's time is the batch's
            records.timestamps = [fields["max_timestamp"]] * len(records)
        batches.append(FetchedBatch(fields["base_offset"], fields["leader_epoch"], fields["attributes"], records))
    return batches, None
