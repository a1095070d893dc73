"""Columns a consumer fetch leaves out when they carry nothing the client cannot rebuild.

A fetch that asks for it (``"compact": true`` in the ticket; sparklog's clients always do) may
send, as Arrow's ``null`` type (no buffers at all):

- ``offset`` when the offsets of the whole response run without a gap (every topic that was never
  compacted): each message's app metadata then carries ``"base"``, its first offset, and the client
  rebuilds the column as ``base, base + 1, ...``;
- ``key`` / ``headers`` when no record of the response has one: the client rebuilds null columns.

On the wire that saves 8 bytes a record for offsets and 4 (plus a validity bit) for each absent
key or header list, which is a third of what a projected read of a few typed columns moves. The
schema of a fetch is fixed when its stream starts, so the broker decides per response, from the
stored batches it is about to send. The client's :class:`Restorer` gives back batches in the
usual layout, so nothing downstream of a fetch sees the difference.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from sparklog import wire
from sparklog.records import HEADER_TYPE

ELIDED = pa.null()
_REBUILT_TYPES = {"offset": pa.int64(), "key": pa.binary(), "headers": HEADER_TYPE}


@dataclasses.dataclass(frozen=True)
class Elision:
    """Which columns a response leaves out."""

    offset: bool = False
    key: bool = False
    headers: bool = False

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(name for name in ("offset", "key", "headers") if getattr(self, name))


NOTHING = Elision()


def plan(batches: Sequence[pa.RecordBatch]) -> Elision:
    """What a response of these consumer batches (stored layout, in offset order) may leave out."""
    if not batches:
        return NOTHING
    schema = batches[0].schema
    key, headers = schema.get_field_index("key"), schema.get_field_index("headers")
    expected = batches[0].column(0)[0].as_py()
    contiguous = True
    for batch in batches:
        offsets = batch.column(0)
        # offsets strictly increase, so first..last holds no gap exactly when last = first + rows - 1
        first = offsets[0].as_py()
        if first != expected or offsets[-1].as_py() != first + batch.num_rows - 1:
            contiguous = False
            break
        expected = first + batch.num_rows
    return Elision(
        offset=contiguous,
        key=key >= 0 and all(b.column(key).null_count == b.num_rows for b in batches),
        headers=headers >= 0 and all(b.column(headers).null_count == b.num_rows for b in batches),
    )


def sent_schema(schema: pa.Schema, elision: Elision) -> pa.Schema:
    """The schema a response is sent with."""
    for name in elision.names:
        i = schema.get_field_index(name)
        schema = schema.set(i, pa.field(name, ELIDED))
    return schema


def elide(batch: pa.RecordBatch, elision: Elision, schema: pa.Schema) -> pa.RecordBatch:
    """``batch`` with the elided columns as null-typed columns (``schema``: the wire schema)."""
    if elision == NOTHING:
        return batch
    columns = list(batch.columns)
    nulls = pa.nulls(batch.num_rows, ELIDED)
    for name in elision.names:
        columns[schema.get_field_index(name)] = nulls
    return pa.RecordBatch.from_arrays(columns, schema=schema)


class Restorer:
    """The client side: gives fetched batches back their elided columns (null key and header
    columns are cut from one cached column, offsets built with ``numpy.arange``)."""

    def __init__(self) -> None:
        self._schemas: dict[pa.Schema, tuple[pa.Schema, tuple[tuple[int, str], ...]]] = {}
        self._nulls: dict[str, pa.Array] = {}

    def restore(self, batch: pa.RecordBatch, app_metadata: Any) -> pa.RecordBatch:
        schema, elided = self._plan(batch.schema)
        if not elided:
            return batch
        n = batch.num_rows
        columns = list(batch.columns)
        for i, name in elided:
            if name == "offset":
                base = int(wire.decode(app_metadata.to_pybytes())["base"])
                columns[i] = pa.array(np.arange(base, base + n, dtype=np.int64))
            else:
                columns[i] = self._null_column(name, n)
        return pa.RecordBatch.from_arrays(columns, schema=schema)

    def _plan(self, schema: pa.Schema) -> tuple[pa.Schema, tuple[tuple[int, str], ...]]:
        known = self._schemas.get(schema)
        if known is None:
            elided = tuple((i, f.name) for i, f in enumerate(schema) if f.type == ELIDED and f.name in _REBUILT_TYPES)
            full = schema
            for i, name in elided:
                full = full.set(i, pa.field(name, _REBUILT_TYPES[name], nullable=name != "offset"))
            known = self._schemas[schema] = (full, elided)
        return known

    def _null_column(self, name: str, n: int) -> pa.Array:
        column = self._nulls.get(name)
        if column is None or len(column) < n:
            column = self._nulls[name] = pa.nulls(
                max(n, 2 * len(column) if column is not None else 16_384), _REBUILT_TYPES[name]
            )
        return column.slice(0, n)
