"""The on-disk format (plain Arrow IPC streams with a ``sparklog`` header per batch, compression) and
the errors of bad input, bad offsets and bad configs, none of which may change what is stored."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.ipc as ipc
import pytest

from log_helpers import (
    Clock,
    Record,
    abandon,
    append_and_expect,
    batch_records,
    config,
    file_bytes,
    random_columns,
    read_all,
    read_from,
    segment_base,
    segment_files,
)
from sparklog.broker.log import PartitionLog, iter_segment
from sparklog.config import TopicConfig
from sparklog.errors import InvalidConfig, InvalidRecord, LogClosed, OffsetOutOfRange, RecordTooLarge
from sparklog.records import record_schema


def parse_header(text: str) -> dict[str, str]:
    assert text.startswith("SLB1|crc="), text
    fields = dict(part.split("=", 1) for part in text.split("|")[1:])
    assert len(fields["crc"]) == 8 and int(fields["crc"], 16) >= 0
    return fields


def filled_log(directory: Path, compression: str, seed: int = 1) -> tuple[PartitionLog, list[Record]]:
    rng = random.Random(seed)
    log = PartitionLog(directory, config(segment_bytes=4096, compression=compression), clock=Clock())
    expected: list[Record] = []
    for _ in range(25):
        append_and_expect(log, random_columns(rng, rng.randint(1, 30)), expected)
    assert len(segment_files(directory)) > 3
    return log, expected


@pytest.mark.parametrize("compression", ["none", "lz4", "zstd"])
def test_segments_are_plain_arrow_ipc_streams(tmp_path: Path, compression: str) -> None:
    log, expected = filled_log(tmp_path, compression)
    log.flush()
    from_files: list[Record] = []
    for path in segment_files(tmp_path):
        reader = ipc.open_stream(str(path))  # nothing but pyarrow
        assert reader.schema == record_schema()
        items = list(reader.iter_batches_with_custom_metadata())
        records = [r for item in items for r in batch_records(item.batch)]
        # the file is named by its first offset, and holds exactly the log's records of that range
        assert records and segment_base(path) == records[0][0]
        assert path.name == f"{records[0][0]:020d}.arrows"
        assert records == read_from(log, records[0][0])[: len(records)]
        for item in items:
            assert b"sparklog" in item.custom_metadata
            header = parse_header(item.custom_metadata[b"sparklog"].decode())
            offsets = item.batch.column("offset").to_pylist()
            timestamps = item.batch.column("timestamp").cast(pa.int64()).to_pylist()
            assert int(header["base"]) == offsets[0]
            assert int(header["last"]) == offsets[-1]
            assert int(header["count"]) == item.batch.num_rows
            assert int(header["maxts"]) == max(timestamps)
        # read_all of the stream gives the same table; iter_segment agrees
        assert reader_table_records(path) == records
        assert [r for batch, _ in iter_segment(str(path)) for r in batch_records(batch)] == records
        from_files.extend(records)
    assert from_files == expected == read_all(log)
    log.close()
    # a cleanly closed log is still a set of plain streams
    assert [r for p in segment_files(tmp_path) for r in reader_table_records(p)] == expected


def reader_table_records(path: Path) -> list[Record]:
    table = ipc.open_stream(str(path)).read_all()
    return [r for batch in table.to_batches() for r in batch_records(batch)]


@pytest.mark.parametrize("compression", ["lz4", "zstd"])
def test_compression_is_arrow_buffer_compression(tmp_path: Path, compression: str) -> None:
    values = [bytes([i % 7]) * 3000 for i in range(20)]
    sizes = {}
    for name in ("none", compression):
        directory = tmp_path / name
        log = PartitionLog(directory, config(compression=name), clock=Clock())
        expected: list[Record] = []
        append_and_expect(log, {"key": [b"k"] * 20, "value": values}, expected)
        assert read_all(log) == expected
        log.close()
        [path] = segment_files(directory)
        sizes[name] = path.stat().st_size
        assert reader_table_records(path) == expected
        log = PartitionLog(directory, config(compression=name), clock=Clock())
        assert read_all(log) == expected
        log.close()
    assert sizes[compression] * 5 < sizes["none"]


def test_compression_can_change_between_appends_and_reopens(tmp_path: Path) -> None:
    expected: list[Record] = []
    rng = random.Random(4)
    for compression in ("none", "zstd", "lz4", "none"):
        log = PartitionLog(tmp_path, config(compression=compression), clock=Clock())
        append_and_expect(log, random_columns(rng, 10), expected)
        append_and_expect(log, random_columns(rng, 5), expected)
        assert read_all(log) == expected
        log.close()
    [path] = segment_files(tmp_path)
    assert reader_table_records(path) == expected


@pytest.mark.parametrize("compression", ["none", "lz4", "zstd"])
def test_small_and_large_batches_mixed_in_one_segment(tmp_path: Path, compression: str) -> None:
    """Small and large batches are encoded by different writers; a segment mixing them in any order is
    still one valid stream, also across reopens and crash recovery."""
    rng = random.Random(8)
    cfg = config(compression=compression)
    log = PartitionLog(tmp_path, cfg, clock=Clock())
    expected: list[Record] = []
    for size in ("small", "large", "large", "small", "small", "large", "small"):
        if size == "large":  # well over 64 KiB of buffers
            n = rng.randint(150, 300)
            columns = {"key": [b"k%d" % i for i in range(n)], "value": [rng.randbytes(600) for _ in range(n)]}
        else:
            columns = random_columns(rng, rng.randint(1, 20))
        append_and_expect(log, columns, expected)
    assert read_all(log) == expected
    [path] = segment_files(tmp_path)
    assert reader_table_records(path) == expected
    abandon(log)
    log = PartitionLog(tmp_path, cfg, clock=Clock())
    assert log.recovered_bytes == 0
    assert read_all(log) == expected
    append_and_expect(log, {"key": [b"x"] * 200, "value": [b"y" * 500] * 200}, expected)
    append_and_expect(log, {"key": [b"x"], "value": [b"small"]}, expected)
    log.close()
    log = PartitionLog(tmp_path, cfg, clock=Clock())
    assert read_all(log) == expected
    assert reader_table_records(path) == expected
    log.close()


def test_batches_in_the_producer_wire_schema(tmp_path: Path) -> None:
    """A batch that already has the stored schema minus ``offset`` (what the Producer sends) is stored as is."""
    from sparklog.records import wire_schema

    clock = Clock(5_000)
    log = PartitionLog(tmp_path, config(), clock=clock)
    batch = pa.RecordBatch.from_pylist(
        [
            {"timestamp": 17, "key": b"a", "value": b"1", "headers": [{"key": "h", "value": b"x"}]},
            {"timestamp": 3, "key": None, "value": None, "headers": None},
        ],
        schema=wire_schema(),
    )
    info = log.append(batch)
    assert (info.base_offset, info.last_offset, info.count, info.max_timestamp) == (0, 1, 2, 17)
    # with a null timestamp it takes the general path: the clock fills it in
    with_null_ts = pa.RecordBatch.from_pylist([{"timestamp": None, "key": b"b", "value": b"2"}], schema=wire_schema())
    assert log.append(with_null_ts).max_timestamp == 5_000
    assert read_all(log) == [
        (0, 17, b"a", b"1", (("h", b"x"),)),
        (1, 3, None, None, None),
        (2, 5_000, b"b", b"2", None),
    ]
    log.close()
    compacted_log = PartitionLog(tmp_path / "compacted", config(cleanup_policy="compact"), clock=clock)
    with pytest.raises(InvalidRecord):
        compacted_log.append(batch)  # the null key is refused on the fast path too
    assert compacted_log.log_end_offset == 0
    compacted_log.close()


def test_typed_values(tmp_path: Path) -> None:
    value_type = pa.struct([pa.field("id", pa.int64()), pa.field("name", pa.string())])
    log = PartitionLog(tmp_path, config(), value_type=value_type, clock=Clock())
    expected: list[Record] = []
    values = [{"id": 1, "name": "a"}, None, {"id": None, "name": ""}]
    append_and_expect(log, {"key": [b"x", b"y", None], "value": values}, expected)
    assert read_all(log) == expected
    assert log.read(0)[0].schema == record_schema(value_type)
    files = file_bytes(tmp_path, log)
    with pytest.raises(InvalidRecord):
        log.append({"value": [b"raw bytes"]})
    with pytest.raises(InvalidRecord):
        log.append({"value": [{"id": "not a number", "name": "b"}]})
    assert file_bytes(tmp_path, log) == files
    log.close()
    log = PartitionLog(tmp_path, config(), value_type=value_type, clock=Clock())
    assert read_all(log) == expected
    [path] = segment_files(tmp_path)
    assert ipc.open_stream(str(path)).schema == record_schema(value_type)
    log.close()


def test_log_append_time_replaces_timestamps(tmp_path: Path) -> None:
    clock = Clock(123_456)
    log = PartitionLog(tmp_path, config(message_timestamp_type="LogAppendTime"), clock=clock)
    info = log.append({"value": [b"a", b"b"], "timestamp": [1, 999_999_999]})
    assert info.max_timestamp == 123_456
    assert [r[1] for r in read_all(log)] == [123_456, 123_456]
    log.close()


# ---------------------------------------------------------------------------------------- bad input

BAD_INPUT: dict[str, tuple[Any, type[Exception]]] = {
    "int64-value": ({"value": pa.array([1, 2], pa.int64())}, InvalidRecord),
    "struct-value": ({"value": [{"a": 1}]}, InvalidRecord),
    "unknown-column": ({"value": [b"a"], "partition_key": [b"p"]}, InvalidRecord),
    "no-value-column": ({"key": [b"a"]}, InvalidRecord),
    "empty-dict": ({"value": []}, InvalidRecord),
    "empty-batch": (pa.RecordBatch.from_pydict({"value": pa.array([], pa.binary())}), InvalidRecord),
    "empty-table": (pa.table({"value": pa.array([], pa.binary()), "key": pa.array([], pa.binary())}), InvalidRecord),
    "int-key": ({"value": [b"a"], "key": [1]}, InvalidRecord),
    "string-timestamp": ({"value": [b"a"], "timestamp": ["yesterday"]}, InvalidRecord),
    "bad-headers": ({"value": [b"a"], "headers": [[1, 2]]}, InvalidRecord),
    "header-without-key": ({"value": [b"a"], "headers": [[{"key": None, "value": b"x"}]]}, InvalidRecord),
    "duplicate-columns": (
        pa.RecordBatch.from_arrays([pa.array([b"a"]), pa.array([b"b"])], names=["value", "value"]),
        InvalidRecord,
    ),
    "not-a-table": ([b"a", b"b"], InvalidRecord),
    "columns-of-different-lengths": ({"value": [b"a"], "key": [b"a", b"b"]}, InvalidRecord),
    "timestamp-out-of-range": ({"value": [b"a"], "timestamp": pa.array([2**63 + 5], pa.uint64())}, InvalidRecord),
    "too-large": ({"value": [b"x" * 3000]}, RecordTooLarge),
    "too-large-in-total": ({"value": [b"x" * 600] * 5}, RecordTooLarge),
}


@pytest.mark.parametrize("name", list(BAD_INPUT))
def test_bad_input_is_refused_and_changes_nothing(tmp_path: Path, name: str) -> None:
    data, error = BAD_INPUT[name]
    cfg = config(max_message_bytes=2500, segment_bytes=1024)
    log = PartitionLog(tmp_path, cfg, clock=Clock())
    expected: list[Record] = []
    append_and_expect(log, {"key": [b"a", None], "value": [b"1", None], "headers": [None, []]}, expected)
    append_and_expect(log, {"key": [b"b"], "value": [b"x" * 2000]}, expected)  # just under the limit
    files = file_bytes(tmp_path, log)

    with pytest.raises(error):
        log.append(data)

    assert log.log_end_offset == 3
    assert read_all(log) == expected
    assert file_bytes(tmp_path, log) == files
    append_and_expect(log, {"key": [b"c"], "value": [b"after"]}, expected)
    assert read_all(log) == expected
    log.close()
    log = PartitionLog(tmp_path, cfg, clock=Clock())
    assert read_all(log) == expected
    log.close()


def test_offsets_out_of_range(tmp_path: Path) -> None:
    log = PartitionLog(tmp_path, config(), clock=Clock())
    assert log.read(0) == []
    for bad in (-1, 1):
        with pytest.raises(OffsetOutOfRange):
            log.read(bad)
    expected: list[Record] = []
    append_and_expect(log, {"value": [b"a", b"b", b"c"]}, expected)
    files = file_bytes(tmp_path, log)
    for bad in (-1, -100, 4, 5, 2**40):
        with pytest.raises(OffsetOutOfRange):
            log.read(bad)
    assert log.read(3) == []
    assert log.read(2, upto=2) == []
    assert [r for b in log.read(0, upto=2) for r in batch_records(b)] == expected[:2]
    assert read_all(log) == expected
    assert file_bytes(tmp_path, log) == files
    log.close()
    log = PartitionLog(tmp_path, config(), clock=Clock())
    with pytest.raises(OffsetOutOfRange):
        log.read(4)
    assert read_all(log) == expected
    log.close()


def test_append_after_close_is_refused(tmp_path: Path) -> None:
    log = PartitionLog(tmp_path, config(), clock=Clock())
    expected: list[Record] = []
    append_and_expect(log, {"value": [b"a"]}, expected)
    log.close()
    files = file_bytes(tmp_path, log)
    with pytest.raises(LogClosed):
        log.append({"value": [b"b"]})
    assert file_bytes(tmp_path, log) == files
    log = PartitionLog(tmp_path, config(), clock=Clock())
    assert read_all(log) == expected
    log.close()


# ---------------------------------------------------------------------------------------- configs


@pytest.mark.parametrize(
    "settings",
    [
        {"segment.byte": 1024},
        {"no.such.thing": "1"},
        {"segment.bytes": 1023},
        {"segment.bytes": "lots"},
        {"segment.ms": 0},
        {"retention.ms": -2},
        {"retention.bytes": True},
        {"cleanup.policy": "forever"},
        {"compression": "gzip"},
        {"message.timestamp.type": "WallClock"},
        {"max.message.bytes": 0},
        {"flush.messages": -5},
        {"delete.retention.ms": -1},
        {"index.interval.bytes": -1},
    ],
)
def test_bad_configs_are_refused(tmp_path: Path, settings: dict[str, Any]) -> None:
    with pytest.raises(InvalidConfig):
        PartitionLog(tmp_path / "log", TopicConfig.from_dict(settings))
    assert not (tmp_path / "log").exists()


def test_configs_use_kafka_names_and_parse_strings() -> None:
    cfg = TopicConfig.from_dict(
        {"segment.bytes": "2048", "cleanup.policy": "delete, compact", "compression": "ZSTD", "retention.ms": "-1"}
    )
    assert (cfg.segment_bytes, cfg.cleanup_policy, cfg.compression, cfg.retention_ms) == (
        2048,
        "compact,delete",
        "zstd",
        -1,
    )
    assert cfg.compacted and cfg.deletes
    assert TopicConfig.from_dict(cfg.to_dict()) == cfg


def test_records_without_headers_cost_no_header_bytes_even_when_sliced() -> None:
    """Absent headers are null lists with no child slots: a batch and any slice of it serialize to
    the list's offsets and validity only (``pa.nulls`` of a list type gave the children ``rows``
    slots: 8 bytes more per record everywhere, and a slice sent its parent's whole buffers)."""
    from sparklog.records import to_record_batch

    rows = 100_000
    batch = to_record_batch(pa.table({"value": pa.array([b"v"] * rows)}))
    headers = batch.column("headers")
    assert headers.null_count == rows and headers.to_pylist()[:2] == [None, None]

    def ipc_bytes(array: pa.Array) -> int:
        sink = pa.BufferOutputStream()
        one = pa.record_batch([array], names=["headers"])
        with ipc.new_stream(sink, one.schema) as writer:
            writer.write_batch(one)
        return sink.getvalue().size

    offsets_and_validity = 4 * (rows + 1) + rows // 8
    assert ipc_bytes(headers) < offsets_and_validity + 2048
    part = headers.slice(rows // 2, 1000)
    assert ipc_bytes(part) < 4 * 1001 + 1000 // 8 + 2048
