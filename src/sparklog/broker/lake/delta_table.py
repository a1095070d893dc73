"""A topic's Delta table, ``<lake dir>/<topic>``, written with the ``deltalake`` package.

Each append is one Delta commit carrying the application transaction ``sparklog-<topic>-<p>`` whose
version is the partition's next offset to tier: the table itself says, atomically with the rows,
how far each partition is in it. An append names the version it expects to follow; if the table
says otherwise (another broker tiered the partition meanwhile) or a concurrent commit touched the
same application transaction (Delta's conflict check), it is refused with :class:`LakeConflict`:
a deposed leader can never add rows twice.
"""

from __future__ import annotations

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
from deltalake.exceptions import CommitFailedError, DeltaError, TableNotFoundError

from sparklog.broker.lake.rows import PARTITION_COLUMN
from sparklog.errors import LakeConflict, LakeUnavailable
from sparklog.names import check_topic_name


def app_id(topic: str, partition: int) -> str:
    """The Delta application transaction id of one partition."""
    return f"sparklog-{topic}-{partition}"


def table_uri(lake_dir: str, topic: str) -> str:
    """Where a topic's table lives: ``<lake dir>/<topic>`` (a directory or any URI deltalake writes)."""
    return f"{lake_dir.rstrip('/')}/{check_topic_name(topic)}"


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

    def append(self, topic: str, partition: int, rows: pa.Table, after: int | None, version: int) -> None:
        """One commit: ``rows`` and the partition's transaction version ``version``, only if the
        table's version for it is still ``after`` (LakeConflict otherwise). ``rows`` go in as one
        record batch: ``write_deltalake`` writes the batches of a multi-batch table in any order
        (deltalake 1.6), and a partition's rows must be stored in offset order (the union read
        returns them as stored)."""
        app = app_id(topic, partition)
        table = self._open(topic)
        current = None if table is None else table.transaction_version(app)
        if current != after:
            raise LakeConflict(f"{topic}-{partition}: the Delta table is at offset {current}, expected {after}")
        try:
            write_deltalake(
                table if table is not None else table_uri(self.lake_dir, topic),
                rows.combine_chunks(),
                mode="append",
                partition_by=[PARTITION_COLUMN],
                schema_mode="merge",  # a typed topic's newer schema version adds columns
                storage_options=self.storage_options if table is None else None,
                commit_properties=CommitProperties(app_transactions=[Transaction(app, version)]),
            )
        except CommitFailedError as exc:
            raise LakeConflict(f"{topic}-{partition}: concurrent Delta commit: {exc}") from exc
        except (DeltaError, OSError) as exc:
            raise LakeUnavailable(f"cannot append to the Delta table of {topic!r}: {exc}") from exc
