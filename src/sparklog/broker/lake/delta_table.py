"""A topic's Delta table, ``<lake dir>/<topic>``, written with the ``deltalake`` package.

Each append is one Delta commit carrying the application transaction ``sparklog-<topic>-<p>`` whose
version is the partition's next offset to tier: the table itself says, atomically with the rows,
how far each partition is in it. An append names the version it expects to follow; if the table
says otherwise (another broker tiered the partition meanwhile) or a concurrent commit touched the
same application transaction (Delta's conflict check), it is refused with :class:`LakeConflict`:
a deposed leader can never add rows twice.

A typed topic's table also records its rows' value schema version, as the application
transaction ``sparklog-<topic>-schema``, set by the commit that creates the table, by each
partition's first append (so a first append racing a rewrite conflicts with it), by an append
that moves the table to a newer version, and by a rewrite (:mod:`.table_schema`, which also
re-sets every partition's transaction: any concurrent append conflicts with it). Rows are only
ever appended in the table's version: a broker whose latest version is older than the table's
(its schema watch has not fired yet) is refused with :class:`LakeConflict` until it catches up.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
from deltalake import ColumnProperties, CommitProperties, DeltaTable, Transaction, WriterProperties, write_deltalake
from deltalake.exceptions import CommitFailedError, DeltaError, TableNotFoundError

from sparklog.broker.lake.compaction import DEFAULT_TARGET_FILE_BYTES, DataFile, compaction_span
from sparklog.broker.lake.rows import PARTITION_COLUMN, schema_of_version
from sparklog.broker.lake.table_schema import additive, rewritten
from sparklog.errors import LakeConflict, LakeUnavailable
from sparklog.lake.layout import app_id, schema_app_id, table_uri, topic_app_id
from sparklog.schemas.value_schema import ValueSchema

log = logging.getLogger(__name__)

# How the tierer's Parquet files are written: a partition's offsets and timestamps run upwards, so
# Parquet's delta encoding stores them in a few bits a row (a dictionary of unique offsets only
# grows until it falls back); keys, values and headers keep the default dictionary encoding, and
# every column Snappy, Delta's and Spark's default codec (deltalake's is no compression once
# writer properties are given). Measured on a 10M-row table of 100-byte values: 4x smaller and
# read 5-10% faster by Spark (docs/benchmarks.md, session 22).
_RISING = ColumnProperties(dictionary_enabled=False, encoding="DELTA_BINARY_PACKED")
WRITER_PROPERTIES = WriterProperties(compression="SNAPPY", column_properties={"offset": _RISING, "timestamp": _RISING})


class DeltaTableWriter:
    """Appends tiered rows to the topics' tables under one lake dir."""

    def __init__(self, lake_dir: str, storage_options: dict[str, str] | None = None) -> None:
        self.lake_dir = lake_dir
        self.storage_options = storage_options

    def _open(self, topic: str) -> DeltaTable | None:
        try:
            return DeltaTable(table_uri(self.lake_dir, topic), storage_options=self.storage_options)
        except TableNotFoundError:
            return None
        except (DeltaError, OSError) as exc:
            raise LakeUnavailable(f"cannot open the Delta table of {topic!r}: {exc}") from exc

    def tiered_version(self, topic: str, partition: int) -> int | None:
        """The partition's next offset to tier as the table records it (None: nothing tiered)."""
        table = self._open(topic)
        return None if table is None else table.transaction_version(app_id(topic, partition))

    def topic_id(self, topic: str) -> int | None:
        """The id of the topic whose rows the table holds (None: no table, or written before
        sparklog recorded it)."""
        table = self._open(topic)
        return None if table is None else table.transaction_version(topic_app_id(topic))

    def append(
        self,
        topic: str,
        partition: int,
        rows: pa.Table,
        after: int | None,
        version: int,
        schemas: Sequence[ValueSchema] = (),
        topic_id: int | None = None,
    ) -> None:
        """One commit: ``rows`` and the partition's transaction version ``version``, only if the
        table's version for it is still ``after`` (LakeConflict otherwise). ``schemas``: a typed
        topic's versions (``rows`` are in the latest): the table is brought to it first.
        ``topic_id``: recorded with the rows (:func:`topic_app_id`). ``rows``
        go in as one record batch: ``write_deltalake`` writes the batches of a multi-batch table
        in any order (deltalake 1.6), and a partition's rows must be stored in offset order (the
        union read returns them as stored)."""
        app = app_id(topic, partition)
        table = self._open(topic)
        current = None if table is None else table.transaction_version(app)
        if current != after:
            raise LakeConflict(f"{topic}-{partition}: the Delta table is at offset {current}, expected {after}")
        transactions = [Transaction(app, version)]
        if topic_id is not None and (table is None or table.transaction_version(topic_app_id(topic)) != topic_id):
            transactions.append(Transaction(topic_app_id(topic), topic_id))
        if schemas:
            latest = schemas[-1].version
            if table is not None and self._evolve(topic, table, schemas):
                table = self._open(topic)  # rewritten: append to the new version
            at = None if table is None else table.transaction_version(schema_app_id(topic))
            if at != latest or after is None:
                transactions.append(Transaction(schema_app_id(topic), latest))
        self._write(topic, table, rows, "append", transactions)

    def evolve(self, topic: str, schemas: Sequence[ValueSchema]) -> None:
        """Bring a typed topic's table to its latest schema version now, if that needs a rewrite
        (an additive version is taken by the next append)."""
        table = self._open(topic)
        if table is not None:
            self._evolve(topic, table, schemas)

    def _evolve(self, topic: str, table: DeltaTable, schemas: Sequence[ValueSchema]) -> bool:
        """Rewrite ``table`` in the latest of ``schemas`` if its rows need it; True if it did."""
        latest = schemas[-1]
        at = table.transaction_version(schema_app_id(topic))
        if at is None:
            raise LakeUnavailable(
                f"the Delta table of typed topic {topic!r} records no sparklog schema version (written by an "
                "older sparklog or while the topic was untyped): move it away to tier the topic afresh"
            )
        if at > latest.version:
            raise LakeConflict(f"{topic}: the Delta table is in schema version {at}, this broker knows {latest.label}")
        if at == latest.version:
            return False
        old = schema_of_version(schemas, at)
        if old is None:
            raise LakeUnavailable(f"the Delta table of {topic!r} is in schema version {at}, unknown to this broker")
        if additive(old, latest):
            return False
        try:
            # in offset order within each partition, as appends wrote them (the union read relies on it)
            rows = table.to_pyarrow_table().sort_by([(PARTITION_COLUMN, "ascending"), ("offset", "ascending")])
        except (DeltaError, OSError) as exc:
            raise LakeUnavailable(f"cannot read the Delta table of {topic!r}: {exc}") from exc
        transactions = [Transaction(schema_app_id(topic), latest.version)]
        for p in pc.unique(rows.column(PARTITION_COLUMN)).to_pylist():
            tiered = table.transaction_version(app_id(topic, p))
            if tiered is not None:  # re-set as it is: an append racing this rewrite conflicts with it
                transactions.append(Transaction(app_id(topic, p), tiered))
        self._write(topic, table, rewritten(rows, old, latest), "overwrite", transactions)
        log.info("%s: Delta table rewritten from %s to %s (%d rows)", topic, old.label, latest.label, rows.num_rows)
        return True

    def compact(
        self,
        topic: str,
        partition: int,
        min_files: int,
        target_bytes: int = DEFAULT_TARGET_FILE_BYTES,
        lag_ms: int = -1,
    ) -> int:
        """Rewrite the partition's earliest run of small files as one (:mod:`.compaction`; ``lag_ms``
        >= 0: a run of files older than that too, however few); how many files were rewritten (0:
        nothing due).

        One commit replaces the run's offset range (``write_deltalake``'s overwrite with a
        predicate) with the same rows, read from the table and sorted by offset. Delta's conflict
        check refuses it (:class:`LakeConflict`) if another commit removed those files meanwhile
        (another broker compacting them, a rewrite): never two copies of a row. Appends of other
        partitions and of later offsets do not conflict with it. (deltalake's ``OPTIMIZE`` is not
        used: two of them racing on the same files both commit, duplicating the rows, and it
        writes a partition's files in any order, which the union read cannot take.)"""
        table = self._open(topic)
        if table is None:
            return 0
        files = files_by_partition(table).get(partition, [])
        span = compaction_span(files, min_files, target_bytes, lag_ms, int(time.time() * 1000))
        if span is None:
            return 0
        first, last = span
        offset = ds.field("offset")
        wanted = (ds.field(PARTITION_COLUMN) == partition) & (offset >= first) & (offset <= last)
        try:
            rows = table.to_pyarrow_dataset().to_table(filter=wanted).sort_by("offset")
        except (DeltaError, OSError) as exc:
            raise LakeUnavailable(f"cannot read the Delta table of {topic!r}: {exc}") from exc
        predicate = f'"{PARTITION_COLUMN}" = {partition} AND "offset" >= {first} AND "offset" <= {last}'
        self._write(topic, table, rows, "overwrite", [], predicate=predicate)
        return sum(1 for f in files if first <= f.first and f.last <= last)

    def vacuum(self, topic: str) -> int:
        """Delta's ``VACUUM`` with the table's own retention (``delta.deletedFileRetentionDuration``,
        seven days unless set): deletes the files that compactions and rewrites replaced longer
        ago than that. How many files it deleted."""
        table = self._open(topic)
        if table is None:
            return 0
        try:
            return len(table.vacuum(dry_run=False))
        except (DeltaError, OSError) as exc:
            raise LakeUnavailable(f"cannot vacuum the Delta table of {topic!r}: {exc}") from exc

    def _write(
        self,
        topic: str,
        table: DeltaTable | None,
        rows: pa.Table,
        mode: str,
        transactions: list[Transaction],
        predicate: str | None = None,
    ) -> None:
        """``predicate``: an overwrite replaces only the rows it matches (else the whole table)."""
        # append: a typed topic's additive version adds columns; a rewrite: a new layout; a
        # compaction: the same rows, the same schema
        schema_mode = {"append": "merge", "overwrite": "overwrite" if predicate is None else None}[mode]
        try:
            write_deltalake(
                table if table is not None else table_uri(self.lake_dir, topic),
                rows.combine_chunks(),
                mode=mode,  # type: ignore[arg-type]
                partition_by=[PARTITION_COLUMN],
                schema_mode=schema_mode,  # type: ignore[arg-type]
                storage_options=self.storage_options if table is None else None,
                predicate=predicate,
                writer_properties=WRITER_PROPERTIES,
                commit_properties=CommitProperties(app_transactions=transactions),
            )
        except CommitFailedError as exc:
            raise LakeConflict(f"{topic}: concurrent Delta commit: {exc}") from exc
        except (DeltaError, OSError) as exc:
            raise LakeUnavailable(f"cannot write the Delta table of {topic!r}: {exc}") from exc


def files_by_partition(table: DeltaTable) -> dict[int, list[DataFile]]:
    """Each partition's data files in the table's current version, with their offsets (the Delta
    log's statistics) and sizes; files without offset statistics (not written by sparklog) are
    left out."""
    actions = pa.table(table.get_add_actions(flatten=True))
    columns = (f"partition.{PARTITION_COLUMN}", "min.offset", "max.offset", "size_bytes", "modification_time")
    if not set(columns) <= set(actions.column_names):
        return {}
    out: dict[int, list[DataFile]] = {}
    for part, first, last, size, modified in zip(*(actions.column(c).to_pylist() for c in columns), strict=True):
        if part is not None and first is not None and last is not None:
            out.setdefault(int(part), []).append(DataFile(first, last, size, modified or 0))
    return out
