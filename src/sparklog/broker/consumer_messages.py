"""Stored batches as a consumer fetch sends them: in the consumer's view of a typed topic, the
columns a compact fetch leaves out as Arrow ``null``, small batches joined. Shared by the
single-partition fetch (:mod:`sparklog.broker.server`) and the multi-partition one
(:mod:`sparklog.broker.multi_fetch_server`)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from sparklog.broker.log.batch_codec import BatchHeader
from sparklog.protocol import fetch_columns

if TYPE_CHECKING:
    from sparklog.broker.typed_values import ConsumerView

COALESCE_BYTES = 1 << 20  # a consumer's small batches go out joined, up to this size per message
Stored = list[tuple[pa.RecordBatch, BatchHeader]]


def _coalesced(batches: Iterable[pa.RecordBatch], limit: int = COALESCE_BYTES) -> Iterator[pa.RecordBatch]:
    """Consecutive batches of one schema joined into batches of up to ``limit`` bytes: a Flight
    message (and the consumer's work per batch) costs about the same for 100 records as for
    10,000, so small stored batches (records sent one by one, a projection of a few columns) are
    sent together. Batches of ``limit`` or more go out as they are (no copy)."""
    pending: list[pa.RecordBatch] = []
    size = 0
    for batch in batches:
        nbytes = batch.get_total_buffer_size()  # ``nbytes`` costs ~20 us a batch; slices are rare here
        if pending and (size + nbytes > limit or not batch.schema.equals(pending[0].schema)):
            yield pending[0] if len(pending) == 1 else pa.concat_batches(pending)
            pending, size = [], 0
        pending.append(batch)
        size += nbytes
    if pending:
        yield pending[0] if len(pending) == 1 else pa.concat_batches(pending)


def _as_sent(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """A stored batch under the stream's schema (the same columns; no copy)."""
    return (
        batch
        if batch.schema.equals(schema, check_metadata=True)
        else pa.RecordBatch.from_arrays(batch.columns, schema=schema)
    )


def consumer_messages(
    stored: Stored, schema: pa.Schema, view: ConsumerView | None, plan: fetch_columns.ResponsePlan
) -> Iterator[tuple[pa.RecordBatch, dict[str, Any]]]:
    """The messages of one partition's stored batches in a consumer stream of ``schema`` (the sent
    schema), each with what its app metadata must add (``plan.messages``). Untyped batches with
    nothing left out go as stored (zero-copy)."""
    if view is None and plan.elision == fetch_columns.NOTHING:
        sent = _coalesced(_as_sent(b, schema) for b, _ in stored)
    else:  # one new batch per stored batch, whatever changes
        sent = _coalesced(plan.elide(view.columns(b) if view else b.columns, schema) for b, _ in stored)
    return plan.messages(sent, [b.num_rows for b, _ in stored])
