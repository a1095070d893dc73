"""Stored record batches -> rows of a topic's Delta table, with Arrow compute (no per-record loop).

Columns: ``partition`` (int32, the table's partition column), ``offset`` (int64), ``timestamp``
(UTC), ``key`` (binary), ``value`` (binary for a plain topic; a typed topic's stored struct, one
column per field of the segment's schema version), ``headers`` (list of key/value structs).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

PARTITION_COLUMN = "partition"


def lake_rows(partition: int, batches: Sequence[pa.RecordBatch], start: int, end: int) -> pa.Table:
    """The records of ``batches`` with offsets in ``[start, end)`` (a batch may begin before
    ``start`` or end after ``end``), as table rows of ``partition``. Batches of one segment: one
    schema."""
    plain = [batch.replace_schema_metadata(None) for batch in batches]
    if not plain:
        raise ValueError("lake_rows needs at least one batch")
    table = pa.Table.from_batches(plain)
    offsets = table.column("offset")
    bounds = pc.min_max(offsets)
    if bounds["min"].as_py() < start or bounds["max"].as_py() >= end:  # else: all of it, zero-copy
        table = table.filter(pc.and_(pc.greater_equal(offsets, start), pc.less(offsets, end)))
    column = pa.array(np.full(table.num_rows, partition, dtype=np.int32))
    return table.add_column(0, pa.field(PARTITION_COLUMN, pa.int32(), nullable=False), column)
