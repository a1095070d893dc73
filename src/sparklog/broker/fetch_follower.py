"""A consumer fetch that stays open (``"follow": true`` in the ticket).

A plain fetch answers once: what is stored from its offset, or, at the log end, whatever arrives
within ``max_wait_ms``. The consumer then opens the next fetch, and every fetch costs both sides a
new call (about 1 ms of CPU here for a fetch of a few records: most of what a record costs at low
rates). A following fetch keeps its stream open after its first response and sends each later
append (below the high watermark) as it comes, until nothing new arrives for ``max_wait_ms``.
gRPC's flow control holds the broker back when the consumer does not read.

The stream's schema was fixed by its first response, so a later response must fit it: the same
consumer view of a typed topic (no new schema version), and leaving out only columns the first
response left out (:meth:`sparklog.protocol.fetch_columns.ResponsePlan.within`). When it does not fit, or
the broker stops leading the partition, the stream ends and the consumer fetches again from its
position, which answers with the right schema or error.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import pyarrow as pa

from sparklog.broker.log.batch_codec import BatchHeader
from sparklog.errors import SparklogError
from sparklog.protocol import fetch_columns

if TYPE_CHECKING:
    from sparklog.broker.partition import Partition

Stored = list[tuple[pa.RecordBatch, BatchHeader]]


class FetchFollower:
    """Finds the next response of an open consumer fetch."""

    def __init__(
        self,
        partition: Partition,
        max_bytes: int,
        max_wait_ms: int,
        elision: fetch_columns.Elision | None,
        value_schemas: object,
        current_schemas: Callable[[], object],
        stopping: Callable[[], bool],
        cancelled: Callable[[], bool],
    ) -> None:
        """``elision``: what the first response left out (None: not a compact fetch);
        ``value_schemas``: the topic's schema versions the stream's view was made from, and
        ``current_schemas`` gives the broker's now; ``stopping``: the broker is stopping;
        ``cancelled``: the consumer went away (see :meth:`Partition.await_records`)."""
        self.partition = partition
        self.max_bytes = max_bytes
        self.max_wait_s = max_wait_ms / 1000
        self.elision = elision
        self.value_schemas = value_schemas
        self.current_schemas = current_schemas
        self.stopping = stopping
        self.cancelled = cancelled

    def next_response(self, offset: int) -> tuple[Stored, fetch_columns.ResponsePlan] | None:
        """The stored batches from ``offset`` and the plan to send them with, once some are below
        the high watermark; None when the stream should end."""
        partition, log = self.partition, self.partition.log
        partition.await_records(offset, self.max_wait_s, False, self.stopping, self.cancelled)
        if self.stopping() or log.closed or not partition.is_leader or self.current_schemas() is not self.value_schemas:
            return None
        try:  # nothing below the high watermark (the wait timed out): []
            stored = log.read_stored(offset, self.max_bytes, upto=partition.high_watermark)
        except SparklogError:  # deleted by retention, log closed: the next plain fetch says so
            return None
        if not stored:
            return None
        if self.elision is None:
            return stored, fetch_columns.PLAIN
        plan = fetch_columns.plan([batch for batch, _ in stored]).within(self.elision)
        return None if plan is None else (stored, plan)


def next_offset(stored: Stored) -> int:
    """The offset after the last stored batch of a response."""
    return int(stored[-1][1].last_offset) + 1
