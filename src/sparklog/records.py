"""The record model: the Arrow schema of stored records and the conversion of user input to it.

A record has an ``offset`` (int64), a ``timestamp`` (ms, UTC), a ``key`` (binary or null), a ``value``
(binary, a typed struct, or null for a tombstone) and ``headers`` (a list of key/value pairs, like
Kafka's and Spark's Kafka source). Everything here works on whole columns, never record by record.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sparklog.errors import InvalidRecord

TIMESTAMP_TYPE = pa.timestamp("ms", tz="UTC")
HEADER_TYPE = pa.list_(pa.struct([pa.field("key", pa.string(), nullable=False), pa.field("value", pa.binary())]))
USER_COLUMNS = ("key", "value", "timestamp", "headers")


@functools.lru_cache(maxsize=64)
def record_schema(value_type: pa.DataType = pa.binary()) -> pa.Schema:
    """The schema of stored records (and of fetched batches) for a topic whose values have ``value_type``."""
    return pa.schema(
        [
            pa.field("offset", pa.int64(), nullable=False),
            pa.field("timestamp", TIMESTAMP_TYPE, nullable=False),
            pa.field("key", pa.binary()),
            pa.field("value", value_type),
            pa.field("headers", HEADER_TYPE),
        ]
    )


SCHEMA_VERSION_KEY = b"sparklog.schema_version"


@functools.lru_cache(maxsize=256)
def versioned_schema(value_type: pa.DataType = pa.binary(), version: int | None = None) -> pa.Schema:
    """The stored schema of a topic's records, tagged with the value schema version of a typed topic
    (so a segment file tells which version its values follow)."""
    schema = record_schema(value_type)
    return schema if version is None else schema.with_metadata({SCHEMA_VERSION_KEY: str(version).encode()})


def schema_version(schema: pa.Schema) -> int | None:
    """The value schema version a stored schema is tagged with (None for untyped topics)."""
    raw = (schema.metadata or {}).get(SCHEMA_VERSION_KEY)
    return int(raw) if raw is not None else None


@functools.lru_cache(maxsize=64)
def wire_schema(value_type: pa.DataType = pa.binary()) -> pa.Schema:
    """The stored schema without ``offset``: what producers send (offsets are the broker's job)."""
    return record_schema(value_type).remove(0)


def now_ms() -> int:
    """The current wall-clock time in milliseconds since the epoch."""
    return time.time_ns() // 1_000_000


def _as_binary(column: pa.Array, name: str) -> pa.Array:
    if pa.types.is_binary(column.type):
        return column
    if pa.types.is_null(column.type):
        return pa.nulls(len(column), pa.binary())
    if (
        pa.types.is_string(column.type)
        or pa.types.is_large_string(column.type)
        or pa.types.is_large_binary(column.type)
    ):
        return column.cast(pa.binary())
    raise InvalidRecord(f"column '{name}' must be binary or string, got {column.type}")


def int64_column(values: np.ndarray, type_: pa.DataType = pa.int64()) -> pa.Array:
    """A non-null 64-bit Arrow array over a numpy int64 array, without a copy or a cast."""
    return pa.Array.from_buffers(type_, len(values), [None, pa.py_buffer(values)])


def int64_values(column: pa.Array) -> np.ndarray:
    """A 64-bit integer or timestamp column without nulls as a numpy view (no copy)."""
    return np.frombuffer(column.buffers()[1], dtype=np.int64, count=len(column), offset=column.offset * 8)


def offsets_of(batch: pa.RecordBatch) -> np.ndarray:
    """The offsets of a stored (or fetched) record batch: its column 0, as a numpy view."""
    return int64_values(batch.column(0))


def column_max(column: pa.Array) -> int | None:
    """The largest value of a 64-bit integer or timestamp column (nulls ignored), or None if empty."""
    if len(column) == 0 or column.null_count == len(column):
        return None
    if column.null_count:
        return pc.max(column.view(pa.int64())).as_py()
    return int(int64_values(column).max())


def _as_timestamp(column: pa.Array | None, rows: int, now: int) -> pa.Array:
    if column is None or pa.types.is_null(column.type):
        return int64_column(np.full(rows, now, dtype=np.int64), TIMESTAMP_TYPE)
    if pa.types.is_timestamp(column.type):
        column = column.cast(pa.timestamp(column.type.unit, tz="UTC")).cast(TIMESTAMP_TYPE, safe=False)
    elif pa.types.is_integer(column.type):
        try:
            column = column.cast(pa.int64()).cast(TIMESTAMP_TYPE)
        except pa.ArrowInvalid as exc:
            raise InvalidRecord(f"column 'timestamp' has values out of range: {exc}") from None
    else:
        raise InvalidRecord(f"column 'timestamp' must be a timestamp or int64 milliseconds, got {column.type}")
    if column.null_count:
        column = pc.fill_null(column, pa.scalar(now, TIMESTAMP_TYPE))
    return column


_SHARED_ZEROS_ROWS = 1 << 17
_SHARED_ZEROS = pa.py_buffer(bytes(4 * (_SHARED_ZEROS_ROWS + 1)))  # read-only: slices are shared
_EMPTY_HEADER_ENTRIES = pa.array([], HEADER_TYPE.value_type)


def _null_headers(rows: int) -> pa.Array:
    """``rows`` null header lists holding no child values. (``pa.nulls`` gives the children buffers
    of ``rows`` slots: 8 bytes more per record in every batch sent and stored, and a slice of it
    carries its parent's whole buffers over the wire.) Its validity bitmap (all null) and offsets
    (all 0) are slices of one shared buffer of zeros: no allocation per batch, whatever its size
    (building the arrays took a sixth of an append; a cache by size missed on every odd size)."""
    zeros = _SHARED_ZEROS if rows <= _SHARED_ZEROS_ROWS else pa.py_buffer(bytes(4 * (rows + 1)))
    return pa.Array.from_buffers(
        HEADER_TYPE,
        rows,
        [zeros.slice(0, (rows + 7) // 8), zeros.slice(0, 4 * (rows + 1))],
        null_count=rows,
        children=[_EMPTY_HEADER_ENTRIES],
    )


def _as_headers(column: pa.Array | None, rows: int) -> pa.Array:
    if column is None or pa.types.is_null(column.type):
        return _null_headers(rows)
    if column.type == HEADER_TYPE:
        return column
    if pa.types.is_map(column.type):
        items = pa.ListArray.from_arrays(
            column.offsets,
            pa.StructArray.from_arrays([column.keys, column.items], names=["key", "value"]),
            mask=column.is_null(),
        )
        column = items
    try:
        return column.cast(HEADER_TYPE)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise InvalidRecord(
            f"column 'headers' must be a list of (key string, value binary) structs, got {column.type}"
        ) from exc


def _as_value(column: pa.Array | None, rows: int, value_type: pa.DataType) -> pa.Array:
    if column is None:
        raise InvalidRecord("a record batch needs a 'value' column")
    if pa.types.is_binary(value_type):
        return _as_binary(column, "value")
    if column.type == value_type:
        return column
    try:
        return column.cast(value_type)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
        raise InvalidRecord(f"column 'value' must be {value_type}, got {column.type}: {exc}") from exc


def _one_batch(data: Any) -> pa.RecordBatch:
    """A table's rows as one record batch (a batch as it is)."""
    if isinstance(data, pa.Table):
        batches = data.combine_chunks().to_batches()
        if len(batches) == 1:
            return batches[0]
        if batches:
            return pa.concat_batches(batches)
        return pa.RecordBatch.from_pylist([], schema=data.schema)
    if not isinstance(data, pa.RecordBatch):
        raise InvalidRecord(f"expected a pyarrow RecordBatch or Table, got {type(data).__name__}")
    return data


def to_record_batch(
    data: pa.RecordBatch | pa.Table | Mapping[str, Any],
    value_type: pa.DataType = pa.binary(),
    now: int | None = None,
) -> pa.RecordBatch:
    """Normalize user input (columns ``key``, ``value``, ``timestamp``, ``headers``; only ``value`` is
    required) into one record batch of :func:`record_schema` with a placeholder ``offset`` column of 0s.

    Missing timestamps become ``now``; extra columns are refused with :class:`InvalidRecord`.
    """
    if isinstance(data, Mapping):
        try:
            data = pa.table(dict(data))
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError) as exc:
            raise InvalidRecord(f"cannot build a record batch from the given columns: {exc}") from None
    data = _one_batch(data)
    if data.schema.equals(wire_schema(value_type)) and not data.column(0).null_count:
        # the fast path: what the Producer sends (already normalized), only offsets to add
        return pa.RecordBatch.from_arrays(
            [int64_column(np.zeros(data.num_rows, dtype=np.int64)), *data.columns], schema=record_schema(value_type)
        )
    names = data.schema.names
    unknown = [n for n in names if n not in USER_COLUMNS and n not in ("offset", "topic", "partition")]
    if unknown:
        raise InvalidRecord(f"unknown record column(s) {unknown}; expected {list(USER_COLUMNS)}")
    if len(set(names)) != len(names):
        raise InvalidRecord(f"duplicate record columns in {names}")
    rows = data.num_rows
    now = now_ms() if now is None else now

    def col(name: str) -> pa.Array | None:
        return data.column(name) if name in names else None

    key = col("key")
    arrays = [
        int64_column(np.zeros(rows, dtype=np.int64)),
        _as_timestamp(col("timestamp"), rows, now),
        pa.nulls(rows, pa.binary()) if key is None else _as_binary(key, "key"),
        _as_value(col("value"), rows, value_type),
        _as_headers(col("headers"), rows),
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=record_schema(value_type))


def to_wire_batch(data: pa.RecordBatch | pa.Table, value_type: pa.DataType = pa.binary()) -> pa.RecordBatch:
    """User input as one batch of :func:`wire_schema` (what a producer sends); input already in
    that schema, with every timestamp set, is only joined into one batch."""
    batch = _one_batch(data)
    if batch.schema.equals(wire_schema(value_type)) and not batch.column(0).null_count:
        return batch
    return to_record_batch(batch, value_type).drop_columns(["offset"])


def wire_batch_of_rows(
    timestamps: Sequence[int], keys: Sequence[bytes | None] | None, value: pa.Array, headers: pa.Array | None
) -> pa.RecordBatch:
    """Records given one by one (timestamps in ms; keys or None for none; headers already of
    :data:`HEADER_TYPE`, or None for none) as one batch of :func:`wire_schema`."""
    rows = len(timestamps)
    return pa.RecordBatch.from_arrays(
        [
            int64_column(np.array(timestamps, dtype=np.int64), TIMESTAMP_TYPE),
            pa.nulls(rows, pa.binary()) if keys is None else pa.array(keys, pa.binary()),
            value,
            _null_headers(rows) if headers is None else headers,
        ],
        schema=wire_schema(value.type),
    )
