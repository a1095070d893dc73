"""Columns a consumer fetch leaves out when they carry nothing the client cannot rebuild.

A fetch that asks for it (``"compact": true`` in the ticket; sparklog's clients always do) may
send, as Arrow's ``null`` type (no buffers at all):

- ``offset`` when the offsets of the whole response run without a gap (every topic that was never
  compacted): each message's app metadata then carries ``"base"``, its first offset, and the client
  rebuilds the column as ``base, base + 1, ...``;
- ``timestamp`` when every stored batch of the response has one timestamp for all its records (a
  batch produced without timestamps is stamped once, with the time it was sent or appended): each
  message's app metadata carries ``"ts"``, one ``[timestamp, rows]`` run per stored batch in it;
- ``key`` / ``headers`` when no record of the response has one: the client rebuilds null columns.

On the wire that saves 8 bytes a record for offsets, 8 for timestamps and 4 (plus a validity bit)
for each absent key or header list: most of what a projected read of a few typed columns moved.
The schema of a fetch is fixed when its stream starts, so the broker decides from the stored
batches of its first response (a following fetch's later responses leave out the same columns, or
end the stream). The client's :class:`Restorer` gives back batches in the
usual layout, so nothing downstream of a fetch sees the difference.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sparklog.protocol import wire
from sparklog.records import HEADER_TYPE, TIMESTAMP_TYPE, int64_column

ELIDED = pa.null()
Elided = tuple[tuple[int, str], ...]  # (index, name) of each column a response left out
_REBUILT_TYPES = {"offset": pa.int64(), "timestamp": TIMESTAMP_TYPE, "key": pa.binary(), "headers": HEADER_TYPE}


@dataclasses.dataclass(frozen=True)
class Elision:
    """Which columns a response leaves out."""

    offset: bool = False
    timestamp: bool = False
    key: bool = False
    headers: bool = False

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(name for name in ("offset", "timestamp", "key", "headers") if getattr(self, name))


NOTHING = Elision()


def _constant_timestamp(batch: pa.RecordBatch) -> int | None:
    """The timestamp every record of ``batch`` has, or None if they differ (``timestamp`` is column 1)."""
    if batch.num_rows == 0:
        return None
    low_high = pc.min_max(batch.column(1).view(pa.int64()))
    low, high = low_high["min"].as_py(), low_high["max"].as_py()
    return low if low == high else None


@dataclasses.dataclass(frozen=True)
class ResponsePlan:
    """What one response leaves out, and what each of its messages then tells the client: its
    first offset (``"base"``) and its timestamps as runs (``"ts"``: ``[[timestamp, rows], ...]``,
    one run per stored batch it holds)."""

    elision: Elision
    first_offset: int = 0
    timestamps: tuple[int, ...] = ()  # per stored batch, when timestamps are left out

    def sent_schema(self, schema: pa.Schema) -> pa.Schema:
        """The schema the response is sent with."""
        for name in self.elision.names:
            schema = schema.set(schema.get_field_index(name), pa.field(name, ELIDED))
        return schema

    def within(self, elision: Elision) -> ResponsePlan | None:
        """This response sent with exactly ``elision`` (an open stream's schema), or None when it
        must send a column that ``elision`` leaves out."""
        if self.elision == elision:
            return self
        if any(not getattr(self.elision, name) for name in elision.names):
            return None
        return ResponsePlan(elision, self.first_offset, self.timestamps if elision.timestamp else ())

    def elide(self, columns: Sequence[pa.Array], schema: pa.Schema) -> pa.RecordBatch:
        """The message of a stored batch's ``columns`` (a typed value already as the consumer sees
        it), the left-out ones as null columns (``schema``: the sent schema)."""
        if self.elision != NOTHING:
            columns = list(columns)
            nulls = pa.nulls(len(columns[0]), ELIDED)
            for name in self.elision.names:
                columns[schema.get_field_index(name)] = nulls
        return pa.RecordBatch.from_arrays(columns, schema=schema)

    def messages(
        self, sent: Iterable[pa.RecordBatch], stored_rows: Sequence[int]
    ) -> Iterator[tuple[pa.RecordBatch, dict[str, Any]]]:
        """Each message of ``sent`` (the stored batches, elided, some joined in order, none split;
        ``stored_rows``: each stored batch's row count) with what its metadata must add."""
        base = self.first_offset
        next_stored = 0
        for batch in sent:
            extra: dict[str, Any] = {}
            if self.elision.offset:
                extra["base"] = base
                base += batch.num_rows
            if self.elision.timestamp:
                runs, rows = [], 0
                while rows < batch.num_rows:
                    runs.append([self.timestamps[next_stored], stored_rows[next_stored]])
                    rows += stored_rows[next_stored]
                    next_stored += 1
                extra["ts"] = runs
            yield batch, extra


PLAIN = ResponsePlan(NOTHING)  # a response that leaves nothing out (followers, fetches not asking for it)


def plan(batches: Sequence[pa.RecordBatch]) -> ResponsePlan:
    """What a response of these consumer batches (stored layout, in offset order) may leave out."""
    if not batches or any(b.num_rows == 0 for b in batches):
        return PLAIN
    schema = batches[0].schema
    key, headers = schema.get_field_index("key"), schema.get_field_index("headers")
    first_offset = expected = batches[0].column(0)[0].as_py()
    contiguous = True
    for batch in batches:
        offsets = batch.column(0)
        # offsets strictly increase, so first..last holds no gap exactly when last = first + rows - 1
        first = offsets[0].as_py()
        if first != expected or offsets[-1].as_py() != first + batch.num_rows - 1:
            contiguous = False
            break
        expected = first + batch.num_rows
    timestamps = []
    for batch in batches:
        constant = _constant_timestamp(batch)
        if constant is None:
            timestamps = []
            break
        timestamps.append(constant)
    elision = Elision(
        offset=contiguous,
        timestamp=bool(timestamps),
        key=key >= 0 and all(b.column(key).null_count == b.num_rows for b in batches),
        headers=headers >= 0 and all(b.column(headers).null_count == b.num_rows for b in batches),
    )
    return ResponsePlan(elision, first_offset, tuple(timestamps))


class Restorer:
    """The client side: gives fetched batches back their left-out columns (null key and header
    columns are cut from one cached column, offsets built with ``numpy.arange``, timestamps with
    ``numpy.repeat`` of their runs)."""

    def __init__(self) -> None:
        self._schemas: dict[pa.Schema, tuple[pa.Schema, Elided]] = {}
        self._nulls: dict[str, pa.Array] = {}

    def restore(self, batch: pa.RecordBatch, app_metadata: Any) -> pa.RecordBatch:
        schema, elided = self.layout(batch.schema)
        if not elided:
            return batch
        return pa.RecordBatch.from_arrays(self.columns(batch, app_metadata, elided), schema=schema)

    def columns(self, batch: pa.RecordBatch, app_metadata: Any, elided: Elided) -> list[pa.Array]:
        """The columns of ``batch`` with the ``elided`` ones (from :meth:`layout` of its schema)
        rebuilt: for a stream, whose schema is fixed, the layout is looked up once.
        ``app_metadata``: the message's, as received or already decoded (a dict)."""
        columns = list(batch.columns)
        if not elided:
            return columns
        n = batch.num_rows
        told: dict[str, Any] = {}
        if isinstance(app_metadata, dict):
            told = app_metadata
        elif app_metadata is not None and app_metadata.size:
            told = wire.decode(app_metadata.to_pybytes())
        for i, name in elided:
            if name == "offset":
                base = int(told["base"])
                columns[i] = int64_column(np.arange(base, base + n, dtype=np.int64))
            elif name == "timestamp":
                runs = np.asarray(told["ts"], dtype=np.int64).reshape(-1, 2)
                columns[i] = int64_column(np.repeat(runs[:, 0], runs[:, 1]), TIMESTAMP_TYPE)
            else:
                columns[i] = self._null_column(name, n)
        return columns

    def layout(self, schema: pa.Schema) -> tuple[pa.Schema, Elided]:
        """The restored schema of batches sent with ``schema``, and which of its columns were left out."""
        known = self._schemas.get(schema)
        if known is None:
            elided = tuple((i, f.name) for i, f in enumerate(schema) if f.type == ELIDED and f.name in _REBUILT_TYPES)
            full = schema
            for i, name in elided:
                full = full.set(i, pa.field(name, _REBUILT_TYPES[name], nullable=name in ("key", "headers")))
            known = self._schemas[schema] = (full, elided)
        return known

    def _null_column(self, name: str, n: int) -> pa.Array:
        column = self._nulls.get(name)
        if column is None or len(column) < n:
            size = max(n, 2 * len(column) if column is not None else 16_384)
            column = self._nulls[name] = pa.nulls(size, _REBUILT_TYPES[name])
        return column.slice(0, n)
