"""Reading a partition's offsets back from its topic's Delta table (the union read, issue 19).

A :class:`LakeReader` keeps one snapshot per topic: the opened ``DeltaTable``, its pyarrow dataset
and, per partition, its data files ordered by their first offset (from the Delta log's per-file
``min``/``max`` statistics, no data read). A read finds the file holding the asked offset by
bisection and scans that file and the next ones with a pyarrow filter on ``offset`` (Parquet
statistics prune row groups) until ``max_bytes``: no per-record Python, and only the files that
hold the range are opened. The snapshot is refreshed (``update_incremental``) only when a read or
the first-offset question needs offsets it does not cover yet, i.e. when the lake offset moved.

A typed topic's batches are tagged with the value schema version of the snapshot they come from
(the table's ``sparklog-<topic>-schema`` transaction, in the stored layout's schema metadata,
:func:`sparklog.records.versioned_schema`): the union read evolves them from it.

sparklog only appends rows to the table (retention never deletes rows from it; compaction
rewrites a run of a partition's files as one file of the same rows, in offset order, so files stay
ordered and disjoint), so a partition's first offset in the table, once known, stays. Rows
deleted from the table by hand (Delta ``DELETE``/``VACUUM``) read as a gap.
"""

from __future__ import annotations

import bisect
import dataclasses
import threading
import time
from collections.abc import Iterator

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
from deltalake import DeltaTable
from deltalake.exceptions import DeltaError, TableNotFoundError

from sparklog.broker.lake.rows import PARTITION_COLUMN
from sparklog.errors import LakeUnavailable
from sparklog.lake.layout import schema_app_id, table_uri
from sparklog.records import SCHEMA_VERSION_KEY

REFRESH_MIN_S = 1.0  # a table that still lacks asked offsets is read again at most this often
SNAPSHOT_MAX_AGE_S = 3600.0  # a snapshot this old is read again before use (its files may be vacuumed)
READ_BATCH_ROWS = 64 * 1024


@dataclasses.dataclass(frozen=True)
class _Files:
    """One partition's data files, ordered by first offset."""

    firsts: list[int]
    lasts: list[int]
    max_times: list[int | None]  # each file's largest timestamp (ms; None: no statistics)
    fragments: list[ds.Fragment]
    metadata: dict[bytes, bytes] | None  # a typed topic's: its rows' value schema version

    @property
    def last(self) -> int:
        return max(self.lasts)


@dataclasses.dataclass(frozen=True)
class _Snapshot:
    """One version of a topic's table, as reads need it."""

    table: DeltaTable
    partitions: dict[int, _Files]
    read_at: float


def _index(table: DeltaTable, topic: str) -> _Snapshot:
    """The partitions' files of ``table``'s current version, from its add actions' statistics."""
    dataset = table.to_pyarrow_dataset()
    by_path = {fragment.path: fragment for fragment in dataset.get_fragments()}
    actions = pa.table(table.get_add_actions(flatten=True))
    rows: dict[int, list[tuple[int, int, int | None, ds.Fragment]]] = {}
    names = actions.column_names
    if {"min.offset", "max.offset", f"partition.{PARTITION_COLUMN}"} <= set(names):
        paths = actions.column("path").to_pylist()
        parts = actions.column(f"partition.{PARTITION_COLUMN}").to_pylist()
        firsts = actions.column("min.offset").to_pylist()
        lasts = actions.column("max.offset").to_pylist()
        times: list[int | None] = [None] * len(paths)
        if "max.timestamp" in names:
            ms = actions.column("max.timestamp").cast(pa.timestamp("ms", tz="UTC")).cast(pa.int64())
            times = ms.to_pylist()
        for path, part, first, last, max_time in zip(paths, parts, firsts, lasts, times, strict=True):
            fragment = by_path.get(path)
            if fragment is None or first is None or last is None or part is None:
                continue  # no statistics (not written by sparklog): not readable by offset
            rows.setdefault(int(part), []).append((int(first), int(last), max_time, fragment))
    version = table.transaction_version(schema_app_id(topic))
    metadata = None if version is None else {SCHEMA_VERSION_KEY: str(version).encode()}
    partitions: dict[int, _Files] = {}
    for part, files in rows.items():
        files.sort(key=lambda item: item[0])
        firsts, lasts, max_times, fragments = (list(column) for column in zip(*files, strict=True))
        partitions[part] = _Files(firsts, lasts, max_times, fragments, metadata)
    return _Snapshot(table, partitions, time.monotonic())


class LakeReader:
    """Reads partitions' offsets from the topics' tables under one lake dir."""

    def __init__(self, lake_dir: str, storage_options: dict[str, str] | None = None) -> None:
        self.lake_dir = lake_dir
        self.storage_options = storage_options
        self._snapshots: dict[str, _Snapshot] = {}
        self._locks: dict[str, threading.Lock] = {}
        self._lock = threading.Lock()

    def table_uri(self, topic: str) -> str:
        return table_uri(self.lake_dir, topic)

    def _covering(self, topic: str, partition: int, upto: int) -> _Files | None:
        """The partition's files in a snapshot that holds offsets up to ``upto - 1`` if the table
        has them (refreshed when the cached one does not, at most every ``REFRESH_MIN_S``)."""
        snapshot = self._snapshots.get(topic)
        files = None if snapshot is None else snapshot.partitions.get(partition)
        if files is not None and files.last >= upto - 1 and self._fresh(snapshot):
            return files
        with self._lock:
            lock = self._locks.setdefault(topic, threading.Lock())
        with lock:
            snapshot = self._snapshots.get(topic)
            files = None if snapshot is None else snapshot.partitions.get(partition)
            if files is not None and files.last >= upto - 1 and self._fresh(snapshot):
                return files  # another call refreshed it meanwhile
            if snapshot is not None and time.monotonic() - snapshot.read_at < REFRESH_MIN_S:
                return files
            try:
                if snapshot is None:
                    table = DeltaTable(self.table_uri(topic), storage_options=self.storage_options)
                else:
                    table = snapshot.table
                    table.update_incremental()
                snapshot = _index(table, topic)
            except TableNotFoundError:
                return None
            except (DeltaError, OSError) as exc:
                raise LakeUnavailable(f"cannot read the Delta table of {topic!r}: {exc}") from exc
            self._snapshots[topic] = snapshot
            return snapshot.partitions.get(partition)

    @staticmethod
    def _fresh(snapshot: _Snapshot | None) -> bool:
        """Younger than ``SNAPSHOT_MAX_AGE_S``: the files it names are still there (VACUUM deletes
        replaced files only after the table's retention, a week by default)."""
        return snapshot is not None and time.monotonic() - snapshot.read_at < SNAPSHOT_MAX_AGE_S

    def first_offset(self, topic: str, partition: int, tiered: int) -> int | None:
        """The partition's first offset in the table (None: no rows of it), given that the lake
        offset is ``tiered`` (every offset below it is in the table)."""
        files = self._covering(topic, partition, tiered)
        return None if files is None else files.firsts[0]

    def read(self, topic: str, partition: int, offset: int, end: int, max_bytes: int) -> list[pa.RecordBatch] | None:
        """The table's rows of ``partition`` with offsets in ``[offset, end)``, in offset order,
        about ``max_bytes`` of them (at least one batch if any row is there). Columns as stored
        in the table (``partition`` left out; a typed topic's tagged with the snapshot's schema
        version). None when the snapshot read does not reach ``end``
        yet (read again later: an empty answer would skip offsets), ``[]`` when the table has no
        row there although it reaches ``end`` (retention deleted them before they were tiered)."""
        files = self._covering(topic, partition, end)
        if files is None or files.last < end - 1:
            return None
        out: list[pa.RecordBatch] = []
        budget = max_bytes
        for batch in self._scan(files, offset, end):
            size = batch.nbytes
            if size > budget and batch.num_rows > 1:  # a scanned batch may be large: its first rows
                batch = batch.slice(0, max(1 if not out else 0, batch.num_rows * budget // size))
            if batch.num_rows:
                out.append(batch if files.metadata is None else batch.replace_schema_metadata(files.metadata))
            budget -= size
            if budget <= 0:
                break
        return out

    def offset_for_time(self, topic: str, partition: int, timestamp_ms: int, end: int) -> int | None:
        """The first offset below ``end`` whose timestamp is >= ``timestamp_ms`` (None: none in the
        table): the first file (in offset order) whose largest timestamp reaches it holds it."""
        files = self._covering(topic, partition, end)
        if files is None:
            return None
        for first, max_time, fragment in zip(files.firsts, files.max_times, files.fragments, strict=True):
            if first >= end:
                return None
            if max_time is not None and max_time < timestamp_ms:
                continue
            kind = fragment.physical_schema.field("timestamp").type
            since = pa.scalar(timestamp_ms, pa.timestamp("ms", tz="UTC")).cast(kind)
            found = fragment.to_table(
                filter=(ds.field("timestamp") >= since) & (ds.field("offset") < end), columns=["offset"]
            ).column("offset")
            if len(found):
                return int(pc.min(found).as_py())
        return None

    @staticmethod
    def _scan(files: _Files, offset: int, end: int) -> Iterator[pa.RecordBatch]:
        i = max(0, bisect.bisect_right(files.firsts, offset) - 1)
        wanted = (ds.field("offset") >= offset) & (ds.field("offset") < end)
        for first, last, fragment in zip(files.firsts[i:], files.lasts[i:], files.fragments[i:], strict=True):
            if first >= end:
                return
            if last < offset:
                continue
            columns = [name for name in fragment.physical_schema.names if name != PARTITION_COLUMN]
            for batch in fragment.to_batches(
                filter=wanted, columns=columns, batch_size=READ_BATCH_ROWS, use_threads=False
            ):
                if batch.num_rows:
                    yield batch
