"""``LakeReader`` and the union read's conversion against real Delta tables written by the tierer's
own writer (no broker): offset order across files, ``max_bytes``, a refreshed snapshot, a gap, the
stored layout (typed values in the latest schema version)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from sparklog.broker.lake import lake_reader
from sparklog.broker.lake.delta_table import DeltaTableWriter
from sparklog.broker.lake.lake_reader import LakeReader
from sparklog.broker.lake.rows import lake_rows
from sparklog.broker.lake.union_read import as_stored
from sparklog.records import record_schema, schema_version
from sparklog.schemas.value_schema import ValueSchema


def stored_batch(
    first: int, count: int, value_type: pa.DataType = pa.binary(), values: list | None = None
) -> pa.RecordBatch:
    offsets = list(range(first, first + count))
    return pa.RecordBatch.from_pydict(
        {
            "offset": pa.array(offsets, pa.int64()),
            "timestamp": pa.array([1_700_000_000_000 + o for o in offsets], pa.timestamp("ms", tz="UTC")),
            "key": pa.array([b"k%d" % o for o in offsets]),
            "value": pa.array(values or [b"v%d" % o for o in offsets], value_type),
            "headers": pa.array([[{"key": "o", "value": b"%d" % o}] for o in offsets], record_schema().field(4).type),
        },
        schema=record_schema(value_type),
    )


def tier(writer: DeltaTableWriter, topic: str, p: int, ranges: list[tuple[int, int]], after: int | None = None) -> None:
    for first, end in ranges:
        writer.append(topic, p, lake_rows(p, [stored_batch(first, end - first)], first, end), after, end)
        after = end


@pytest.fixture(autouse=True)
def no_refresh_delay(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lake_reader, "REFRESH_MIN_S", 0.0)


def offsets_of(batches: list[pa.RecordBatch] | None) -> list[int]:
    assert batches is not None
    return [o for b in batches for o in b.column("offset").to_pylist()]


def test_reads_in_offset_order_across_files_bounded_by_max_bytes(tmp_path: Path) -> None:
    writer, reader = DeltaTableWriter(str(tmp_path)), LakeReader(str(tmp_path))
    tier(writer, "t", 0, [(0, 10), (10, 25), (25, 40)])
    tier(writer, "t", 1, [(0, 5)])
    assert reader.first_offset("t", 0, 40) == 0
    assert offsets_of(reader.read("t", 0, 0, 40, 1 << 30)) == list(range(40))
    assert offsets_of(reader.read("t", 0, 12, 30, 1 << 30)) == list(range(12, 30))
    small = reader.read("t", 0, 12, 40, 1)  # at least one record, then stops
    assert offsets_of(small) == [12]
    some = reader.read("t", 0, 12, 40, 200)  # a part of the first batch (file [10, 25))
    assert some is not None and 1 < len(offsets_of(some)) < 13 and offsets_of(some)[0] == 12
    assert offsets_of(reader.read("t", 1, 0, 5, 1 << 30)) == list(range(5))
    assert reader.read("t", 0, 0, 41, 1 << 30) is None  # the table does not reach 41 yet
    tier(writer, "t", 0, [(40, 50)], after=40)
    assert offsets_of(reader.read("t", 0, 38, 50, 1 << 30)) == list(range(38, 50))  # refreshed
    assert reader.first_offset("nothing", 0, 10) is None
    assert reader.read("nothing", 0, 0, 10, 100) is None


def test_a_gap_reads_empty_and_rows_convert_to_the_stored_layout(tmp_path: Path) -> None:
    writer, reader = DeltaTableWriter(str(tmp_path)), LakeReader(str(tmp_path))
    tier(writer, "g", 0, [(5, 10)])
    writer.append("g", 0, lake_rows(0, [stored_batch(20, 10)], 20, 30), 10, 30)  # [10, 20) never tiered
    assert reader.first_offset("g", 0, 30) == 5
    assert reader.read("g", 0, 10, 20, 1 << 30) == []
    batches = reader.read("g", 0, 7, 30, 1 << 30)
    stored = [as_stored(b) for b in batches or []]
    assert [h.base_offset for _, h in stored][0] == 7
    table = pa.Table.from_batches([b for b, _ in stored])
    assert table.schema.equals(record_schema())
    assert table.to_pylist() == pa.Table.from_batches([stored_batch(7, 3), stored_batch(20, 10)]).to_pylist()
    assert stored[-1][1].last_offset == 29 and stored[-1][1].max_timestamp == 1_700_000_000_029


V1 = {"type": "record", "name": "C", "fields": [{"name": "page", "type": "string"}, {"name": "ms", "type": "long"}]}
V2 = {**V1, "fields": [*V1["fields"], {"name": "country", "type": "string", "default": "??"}]}


def test_typed_values_convert_to_the_latest_version(tmp_path: Path) -> None:
    """Rows of the table in version 1 (its snapshot says so) read in version 2 with the Avro
    default; rows whose value columns are all null read as null values."""
    v1 = ValueSchema.parse(V1, version=1, topic="ty")
    v2 = ValueSchema.parse(V2, version=2, topic="ty")
    writer, reader = DeltaTableWriter(str(tmp_path)), LakeReader(str(tmp_path))
    old = stored_batch(0, 3, v1.arrow_type, [{"page": "/a", "ms": 1}, None, {"page": "/b", "ms": 2}])
    writer.append(
        "ty",
        0,
        lake_rows(0, [old.replace_schema_metadata({b"sparklog.schema_version": b"1"})], 0, 3, [v1]),
        None,
        3,
        [v1],
    )
    table = pa.Table.from_batches(reader.read("ty", 0, 0, 3, 1 << 30) or [])
    assert table.column_names == ["offset", "timestamp", "key", "headers", "page", "ms"]
    stored = [as_stored(b, [v1, v2]) for b in reader.read("ty", 0, 0, 3, 1 << 30) or []]
    assert all(schema_version(b.schema) == 2 for b, _ in stored)
    values = [v for b, _ in stored for v in b.column("value").to_pylist()]
    assert values == [{"page": "/a", "ms": 1, "country": "??"}, None, {"page": "/b", "ms": 2, "country": "??"}]
    assert [as_stored(b, [v1])[0].column("value").to_pylist() for b in reader.read("ty", 0, 0, 3, 1 << 30) or []] == [
        [{"page": "/a", "ms": 1}, None, {"page": "/b", "ms": 2}]
    ]


def test_offset_for_time_finds_the_first_offset_at_or_after_a_time(tmp_path: Path) -> None:
    writer, reader = DeltaTableWriter(str(tmp_path)), LakeReader(str(tmp_path))
    tier(writer, "time", 0, [(0, 10), (10, 20), (20, 30)])
    base = 1_700_000_000_000
    assert reader.offset_for_time("time", 0, base, 30) == 0
    assert reader.offset_for_time("time", 0, base + 14, 30) == 14
    assert reader.offset_for_time("time", 0, base + 14, 12) is None  # only below the end asked
    assert reader.offset_for_time("time", 0, base + 30, 30) is None


def test_a_segment_of_many_batches_is_tiered_and_read_back_in_offset_order(tmp_path: Path) -> None:
    """A closed segment holds many stored batches, tiered in one commit; delta-rs writes the
    batches of a multi-batch table in any order, so the file must still hold them in offset order
    (the union read returns a file's rows as stored: out of order, a consumer's position would skip)."""
    writer, reader = DeltaTableWriter(str(tmp_path)), LakeReader(str(tmp_path))
    batches = [stored_batch(first, 10) for first in range(0, 80, 10)]
    writer.append("t", 0, lake_rows(0, batches, 0, 80), None, 80)
    assert offsets_of(reader.read("t", 0, 0, 80, 1 << 30)) == list(range(80))
    assert offsets_of(reader.read("t", 0, 35, 80, 1 << 30)) == list(range(35, 80))
    some = offsets_of(reader.read("t", 0, 0, 80, 600))  # the first rows only, from offset 0 on
    assert 1 <= len(some) < 80 and some == list(range(len(some)))
