"""Stored record batches <-> rows of a topic's Delta table, with Arrow compute (no per-record loop).

Columns (:mod:`sparklog.lake.layout`): ``partition`` (int32, the table's partition column),
``offset`` (int64), ``timestamp`` (UTC), ``key`` (binary), ``headers`` (list of key/value
structs) and, for a plain topic, ``value`` (binary). A typed topic has no ``value`` column: each
top-level field of its value is a column (after ``headers``), in the topic's **latest** schema
version: :func:`lake_rows` evolves a segment stored in an older version with the project's schema
evolution (Avro resolution: added fields take their defaults). A null value (a tombstone) is a
row whose value columns are all null, and :func:`value_struct` reads such a row back as a null
value (so a value whose every field is null, possible only when all fields are nullable, comes
back as a null value too).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sparklog.errors import LakeUnavailable
from sparklog.lake.layout import PARTITION_COLUMN, RECORD_COLUMNS
from sparklog.records import schema_version
from sparklog.schemas.evolution import evolve
from sparklog.schemas.value_schema import ValueSchema

__all__ = ["PARTITION_COLUMN", "flatten_value", "lake_rows", "schema_of_version", "value_struct"]


def schema_of_version(schemas: Sequence[ValueSchema], version: int | None) -> ValueSchema | None:
    """The version ``version`` among a topic's ``schemas`` (None: unknown)."""
    for candidate in schemas:
        if candidate.version == version:
            return candidate
    return None


def lake_rows(
    partition: int, batches: Sequence[pa.RecordBatch], start: int, end: int, schemas: Sequence[ValueSchema] = ()
) -> pa.Table:
    """The records of ``batches`` with offsets in ``[start, end)`` (a batch may begin before
    ``start`` or end after ``end``), as table rows of ``partition``. Batches of one segment: one
    schema. ``schemas``: a typed topic's versions, oldest first (its values become columns in the
    latest one); empty for a plain topic."""
    if not batches:
        raise ValueError("lake_rows needs at least one batch")
    written = schema_version(batches[0].schema)
    table = pa.Table.from_batches([batch.replace_schema_metadata(None) for batch in batches])
    offsets = table.column("offset")
    bounds = pc.min_max(offsets)
    if bounds["min"].as_py() < start or bounds["max"].as_py() >= end:  # else: all of it, zero-copy
        table = table.filter(pc.and_(pc.greater_equal(offsets, start), pc.less(offsets, end)))
    if schemas:
        latest = schemas[-1]
        writer = schema_of_version(schemas, written) if written is not None else latest
        if writer is None:
            raise LakeUnavailable(f"stored values are in schema version {written}, unknown to this broker")
        chunks = [evolve(chunk, writer, latest) for chunk in table.column("value").chunks]  # per batch: no copy
        table = flatten_value(table, pa.chunked_array(chunks, type=latest.arrow_type))
    column = pa.array(np.full(table.num_rows, partition, dtype=np.int32))
    return table.add_column(0, pa.field(PARTITION_COLUMN, pa.int32(), nullable=False), column)


def flatten_value(table: pa.Table, value: pa.StructArray | pa.ChunkedArray) -> pa.Table:
    """``table`` (record columns, its ``value`` or value field columns dropped) with ``value``'s
    fields as nullable columns after them (a null value: nulls in every one)."""
    kept = [name for name in RECORD_COLUMNS if name in table.column_names]
    out = table.select(kept)
    for field, column in zip(value.type, value.flatten(), strict=True):
        out = out.append_column(pa.field(field.name, field.type, nullable=True), column)
    return out


def value_struct(rows: pa.Table | pa.RecordBatch, type_: pa.StructType) -> pa.StructArray:
    """The value columns of table ``rows`` as values of ``type_``: columns matched by field name
    (a field the rows lack is null; nested structs likewise, anything else cast), and a row whose
    value columns are all null is a null value."""
    names = set(rows.schema.names)
    children = []
    present = []
    for field in type_:
        if field.name in names:
            column = rows.column(field.name)
            if isinstance(column, pa.ChunkedArray):
                column = column.combine_chunks()
            present.append(column)
            children.append(conformed(column, field.type))
        else:
            children.append(pa.nulls(rows.num_rows, field.type))
    mask = pa.array(np.ones(rows.num_rows, dtype=bool))
    for column in present:
        mask = pc.and_(mask, column.is_null())
    return pa.StructArray.from_arrays(children, fields=list(type_), mask=mask)


def conformed(column: pa.Array, type_: pa.DataType) -> pa.Array:
    """A table column as ``type_``: struct fields matched by name (fields the table lacks are
    null, fields it has beyond ``type_`` left out), anything else cast."""
    if column.type.equals(type_):
        return column
    if pa.types.is_struct(type_) and pa.types.is_struct(column.type):
        if isinstance(column, pa.ChunkedArray):
            column = column.combine_chunks()
        names = {column.type.field(i).name for i in range(column.type.num_fields)}
        children = [
            conformed(column.field(f.name), f.type) if f.name in names else pa.nulls(len(column), f.type) for f in type_
        ]
        return pa.StructArray.from_arrays(children, fields=list(type_), mask=column.is_null())
    return column.cast(type_)
