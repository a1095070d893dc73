"""The snapshot of a topic's Delta table that ``read_topic`` plans from (:mod:`sparklog.lake.snapshot`):
each partition's end is the offset the tierer committed with its rows, its files are the ones
Spark's Parquet reader may read directly, and a table Spark's Parquet reader would not read as
Delta does (reader features, files outside ``partition=<p>/``) gets no file list. Real tables
written by the tierer's writer and checked with the independent ``deltalake`` reader."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import DeltaTable

from sparklog.broker.lake.delta_table import DeltaTableWriter
from sparklog.lake.snapshot import read_snapshot

TOPIC = "snap"


def rows(partition: int, start: int, end: int) -> pa.Table:
    n = end - start
    return pa.table(
        {
            "partition": pa.array([partition] * n, pa.int32()),
            "offset": pa.array(range(start, end), pa.int64()),
            "timestamp": pa.array([1_700_000_000_000_000 + o for o in range(start, end)], pa.timestamp("us", "UTC")),
            "key": pa.array([None] * n, pa.binary()),
            "value": pa.array([b"v%d" % o for o in range(start, end)], pa.binary()),
        }
    )


def written(lake: Path) -> DeltaTableWriter:
    writer = DeltaTableWriter(str(lake))
    writer.append(TOPIC, 0, rows(0, 0, 10), None, 10)
    writer.append(TOPIC, 0, rows(0, 10, 25), 10, 25)
    writer.append(TOPIC, 1, rows(1, 0, 7), None, 7)
    return writer


def test_ends_files_and_schema_of_the_latest_version(tmp_path: Path) -> None:
    written(tmp_path)
    uri = str(tmp_path / TOPIC)
    snapshot = read_snapshot(uri, TOPIC, [0, 1, 2])
    assert snapshot is not None
    assert snapshot.version == DeltaTable(uri).version()
    assert dict(snapshot.ends) == {0: 25, 1: 7}  # partition 2: nothing tiered
    assert snapshot.files is not None and sorted(snapshot.files) == [0, 1]
    for p, end in snapshot.ends.items():
        paths = snapshot.files[p]
        assert all(path.startswith(f"partition={p}/") for path in paths)
        # each partition's files hold exactly its offsets below its end: no filter needed
        offsets = sorted(o for path in paths for o in pq.read_table(f"{uri}/{path}")["offset"].to_pylist())
        assert offsets == list(range(end))
    assert snapshot.schema.names == ["partition", "offset", "timestamp", "key", "value"]
    assert snapshot.schema.field("timestamp").type == pa.timestamp("us", "UTC")


def test_the_tierers_files_encode_offsets_and_timestamps_as_deltas(tmp_path: Path) -> None:
    written(tmp_path)
    uri = tmp_path / TOPIC
    snapshot = read_snapshot(str(uri), TOPIC, [0, 1])
    assert snapshot is not None and snapshot.files is not None
    meta = pq.ParquetFile(uri / snapshot.files[0][0]).metadata.row_group(0)
    columns = {meta.column(i).path_in_schema: meta.column(i) for i in range(meta.num_columns)}
    for name in ("offset", "timestamp"):
        assert "DELTA_BINARY_PACKED" in columns[name].encodings, columns[name].encodings
    assert {c.compression for c in columns.values()} == {"SNAPPY"}


def test_no_file_list_for_a_table_with_reader_features_and_none_without_a_table(tmp_path: Path) -> None:
    written(tmp_path)
    uri = str(tmp_path / TOPIC)
    DeltaTable(uri).alter.set_table_properties({"delta.enableDeletionVectors": "true"})
    assert DeltaTable(uri).protocol().reader_features  # deletion vectors: a reader feature
    snapshot = read_snapshot(uri, TOPIC, [0, 1])
    assert snapshot is not None and dict(snapshot.ends) == {0: 25, 1: 7}
    assert snapshot.files is None  # read through Delta's own reader
    assert read_snapshot(str(tmp_path / "missing"), TOPIC, [0]) is None
