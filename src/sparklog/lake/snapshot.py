"""One snapshot of a lake-enabled topic's Delta table, as :func:`sparklog.spark.read_topic` reads
it (issue 19): read with the ``deltalake`` package on the driver, before Spark plans anything.

- **Ends**: each partition's next offset to tier, the application transaction
  ``sparklog-<topic>-<p>`` the tierer commits atomically with the rows
  (:func:`sparklog.lake.layout.app_id`). In this snapshot a partition's rows are
  exactly its offsets below its end (those not deleted), so a reader that takes them from these
  files and the rest from the log from the end on needs no row filter.
- **Files**: the snapshot's data files of each partition (paths relative to the table), when
  Spark's plain Parquet reader reads them exactly as Delta would: the table needs no reader
  feature (reader version 1: no deletion vectors, no column mapping), is partitioned by
  ``partition`` alone, and every file sits under its partition's ``partition=<p>/`` directory, so
  Spark's partition discovery gives each row the partition Delta's log records. Otherwise None: the
  caller reads through Delta's own reader.
- **Schema**: the table's columns (Arrow), which a Parquet read is given instead of inferring it
  from a footer (a file written before a typed topic's field was added lacks its column: null).
"""

from __future__ import annotations

import dataclasses
import urllib.parse
from collections.abc import Iterable, Mapping

import pyarrow as pa
from deltalake import DeltaTable
from deltalake.exceptions import DeltaError, TableNotFoundError

from sparklog.lake.layout import PARTITION_COLUMN, app_id


@dataclasses.dataclass(frozen=True)
class LakeSnapshot:
    """What one version of a topic's table holds (see the module doc)."""

    version: int
    ends: Mapping[int, int]  # partition -> next offset to tier (partitions with nothing tiered: absent)
    files: Mapping[int, tuple[str, ...]] | None  # partition -> relative paths; None: read through Delta
    schema: pa.Schema


def read_snapshot(uri: str, topic: str, partitions: Iterable[int]) -> LakeSnapshot | None:
    """The table's latest snapshot; None if there is no table at ``uri`` or ``deltalake`` cannot
    read it here (the caller then falls back to Spark's Delta reader)."""
    try:
        table = DeltaTable(uri)
        ends = {p: v for p in partitions if (v := table.transaction_version(app_id(topic, p))) is not None}
        schema = pa.schema(table.schema().to_arrow())
        files = _plain_files(table)
        return LakeSnapshot(table.version(), ends, files, schema)
    except (TableNotFoundError, DeltaError, OSError, ValueError):
        return None


def _plain_files(table: DeltaTable) -> dict[int, tuple[str, ...]] | None:
    """Each partition's data files, if Spark's Parquet reader reads them as Delta would (else None)."""
    protocol = table.protocol()
    if protocol.min_reader_version != 1 or protocol.reader_features:
        return None
    if list(table.metadata().partition_columns) != [PARTITION_COLUMN]:
        return None
    actions = pa.table(table.get_add_actions(flatten=True))
    column = f"partition.{PARTITION_COLUMN}"
    if column not in actions.column_names:
        return None
    files: dict[int, list[str]] = {}
    for path, part in zip(actions.column("path").to_pylist(), actions.column(column).to_pylist(), strict=True):
        relative = urllib.parse.unquote(path)
        if part is None or "://" in relative or relative.startswith("/"):
            return None  # a null partition, or a file outside the table (a shallow clone's)
        if relative.split("/")[0] != f"{PARTITION_COLUMN}={part}":
            return None  # Spark's partition discovery would not give it its partition
        files.setdefault(int(part), []).append(relative)
    return {p: tuple(paths) for p, paths in files.items()}
