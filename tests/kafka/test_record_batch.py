"""Kafka record batches (v2) to and from Arrow columns (:mod:`sparklog.kafka.record_batch`), checked
against kafka-python's own implementation of the format (``kafka.record.default_records``, pure
Python, written from Kafka's): batches it builds decode to the records it was given; batches we
encode it reads back identical, CRC valid; and bytes changed or cut anywhere are a
:class:`CorruptRecord`, never a crash or a wrong record."""

from __future__ import annotations

from typing import Any

import crc32c
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from kafka.errors import CorruptRecordError
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from sparklog.errors import CorruptRecord
from sparklog.kafka.record_batch import (
    CRC_START,
    HEADER,
    BatchFields,
    decode_batch,
    encode_batch,
    read_header,
    split_batches,
)
from sparklog.records import HEADER_TYPE, TIMESTAMP_TYPE

T0 = 1_700_000_000_000

Header = tuple[str, bytes | None]
Record = tuple[int, bytes | None, bytes | None, list[Header]]  # (timestamp delta, key, value, headers)

records_st = st.lists(
    st.tuples(
        st.integers(-(2**40), 2**40),
        st.one_of(st.none(), st.binary(max_size=300)),
        st.one_of(st.none(), st.binary(max_size=3000)),
        st.lists(st.tuples(st.text(max_size=20), st.one_of(st.none(), st.binary(max_size=50))), max_size=4),
    ),
    min_size=1,
    max_size=60,
)


def kafka_python_batch(records: list[Record], base_offset: int = 0, gaps: int = 1, compression: int = 0) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=compression,
        is_transactional=False,
        producer_id=77,
        producer_epoch=3,
        base_sequence=11,
        batch_size=1 << 30,
    )
    for i, (delta, key, value, headers) in enumerate(records):
        builder.append(i * gaps, T0 + delta, key, value, headers)
    data = bytearray(builder.build())
    data[0:8] = base_offset.to_bytes(8, "big", signed=True)
    return bytes(data)


def stored(records: list[Record], base_offset: int, gaps: int = 1) -> pa.RecordBatch:
    """The records as sparklog stores them (no headers: null)."""
    return pa.RecordBatch.from_pydict(
        {
            "offset": pa.array([base_offset + i * gaps for i in range(len(records))], pa.int64()),
            "timestamp": pa.array([T0 + r[0] for r in records], pa.int64()).cast(TIMESTAMP_TYPE),
            "key": pa.array([r[1] for r in records], pa.binary()),
            "value": pa.array([r[2] for r in records], pa.binary()),
            "headers": pa.array(
                [[{"key": k, "value": v} for k, v in r[3]] if r[3] else None for r in records], HEADER_TYPE
            ),
        }
    )


def as_tuples(batch: pa.RecordBatch) -> list[Record]:
    ts = batch.column("timestamp").cast(pa.int64()).to_pylist()
    return [
        (t - T0, k, v, [(h["key"], h["value"]) for h in hs] if hs else [])
        for t, k, v, hs in zip(
            ts,
            batch.column("key").to_pylist(),
            batch.column("value").to_pylist(),
            batch.column("headers").to_pylist(),
            strict=True,
        )
    ]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records=records_st, gaps=st.integers(1, 3))
def test_batches_kafka_python_builds_decode_to_their_records(records: list[Record], gaps: int) -> None:
    data = kafka_python_batch(records, base_offset=1000, gaps=gaps)
    decoded = decode_batch(data)
    header = decoded.header
    assert (header.base_offset, header.records_count, header.producer_id, header.base_sequence) == (
        1000,
        len(records),
        77,
        11,
    )
    assert header.base_timestamp == T0 + records[0][0]
    assert as_tuples(decoded.records) == records
    assert decoded.records.column("offset_delta").to_pylist() == [i * gaps for i in range(len(records))]
    decoded.records.validate(full=True)
    assert decoded.records.column("headers").type == HEADER_TYPE


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records=records_st, gaps=st.integers(1, 3), start=st.integers(0, 5))
def test_batches_we_encode_kafka_python_reads_back(records: list[Record], gaps: int, start: int) -> None:
    batch = stored(records, 5000, gaps).slice(min(start, len(records) - 1))  # a slice: offsets into buffers
    kept = records[min(start, len(records) - 1) :]
    first = 5000 + min(start, len(records) - 1) * gaps
    data = encode_batch(batch, BatchFields(first, partition_leader_epoch=4, producer_id=9, producer_epoch=1))
    read = DefaultRecordBatch(data)
    assert read.validate_crc()
    assert (read.base_offset, read.leader_epoch, read.producer_id, read.records_count) == (first, 4, 9, len(kept))
    got = [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in read]
    assert got == [(first + i * gaps, T0 + d, k, v, h) for i, (d, k, v, h) in enumerate(kept)]
    again = decode_batch(data)
    assert as_tuples(again.records) == kept


def test_a_record_set_splits_into_its_batches() -> None:
    one, two = [(0, b"a", b"1", [])], [(5, None, b"2", [("h", None)]), (6, b"c", None, [])]
    data = kafka_python_batch(one, 0) + kafka_python_batch(two, 1)
    batches = split_batches(data)
    assert [h.base_offset for h, _ in batches] == [0, 1]
    assert [as_tuples(decode_batch(b).records) for _, b in batches] == [one, two]
    with pytest.raises(CorruptRecord, match="does not fit"):
        split_batches(data[:-1])


def test_a_wrong_crc_is_refused_naming_it() -> None:
    data = bytearray(kafka_python_batch([(0, b"k", b"v", [])]))
    data[-1] ^= 0xFF
    with pytest.raises(CorruptRecord, match="CRC"):
        decode_batch(bytes(data))


def _record_attribute_positions(batch: bytes) -> set[int]:
    """Where each record's attributes byte is (after its length varint)."""
    positions, at = set(), HEADER.size
    while at < len(batch):
        value, shift = 0, 0
        while True:
            byte = batch[at]
            at += 1
            value |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                break
        positions.add(at)
        at += (value >> 1) ^ -(value & 1)
    return positions


def _with_crc(data: bytearray) -> bytes:
    """``data`` with its header's CRC made right again (so the records' parser sees the change)."""
    data[17:21] = crc32c.crc32c(bytes(data[CRC_START:])).to_bytes(4, "big")
    return bytes(data)


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    records=records_st,
    flips=st.lists(st.tuples(st.integers(HEADER.size, 1 << 20), st.integers(0, 255)), min_size=1, max_size=4),
    cut=st.one_of(st.none(), st.integers(0, 1 << 20)),
    count=st.one_of(st.none(), st.integers(-5, 200)),
)
def test_changed_records_are_corrupt_or_read_as_kafka_python_reads_them(
    records: list[Record], flips: list[tuple[int, int]], cut: int | None, count: int | None
) -> None:
    """Record bytes changed (CRC made right again), cut off, or a wrong record count: either an error
    naming the batch as corrupt, or exactly the records kafka-python reads from the same bytes."""
    data = bytearray(kafka_python_batch(records))
    body = len(data) - HEADER.size
    attributes = _record_attribute_positions(bytes(data))
    for at, value in flips:
        where = HEADER.size + (at % body)
        # kafka-python reads a record's attributes (an int8) as a varint: the oracle differs there
        assume(where not in attributes or value < 0x80)
        data[where] = value
    if cut is not None:
        data = data[: HEADER.size + cut % (body + 1)]
        data[8:12] = (len(data) - 12).to_bytes(4, "big")
    if count is not None:
        data[57:61] = count.to_bytes(4, "big", signed=True)
    mutated = _with_crc(data)
    try:
        decoded = decode_batch(mutated)
    except CorruptRecord:
        return
    try:
        expected: Any = [(r.timestamp - T0, r.key, r.value, r.headers) for r in DefaultRecordBatch(mutated)]
    except CorruptRecordError as exc:
        raise AssertionError(f"decoded what kafka-python calls corrupt ({exc})") from None
    assert as_tuples(decoded.records) == expected
    decoded.records.validate(full=True)


def test_read_header_refuses_a_short_or_old_batch() -> None:
    data = kafka_python_batch([(0, b"k", b"v", [])])
    with pytest.raises(CorruptRecord, match="needs 61 bytes"):
        read_header(data[:30])
    old = bytearray(data)
    old[16] = 1
    with pytest.raises(CorruptRecord, match="magic 1"):
        read_header(bytes(old))
