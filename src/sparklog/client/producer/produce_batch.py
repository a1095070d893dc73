"""One batch on its way to a partition, and how its acknowledgement reaches the rows it carries.

A table given to the producer is cut per partition (:class:`PartitionRows`), each partition's rows
into wire batches of at most ``batch_records`` (:class:`ProduceBatch`). Small batches still waiting
for the same partition are joined before they leave, so one batch may carry the rows of several
sends (its ``parts``). Everything here is resolved on the sender's thread only, so it needs no lock.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np
import pyarrow as pa

from sparklog.records import to_wire_batch
from sparklog.schemas.value_schema import ValueSchema


class PartitionRows:
    """The rows of one send for one partition: their offsets, filled in as their batches are
    acknowledged, and ``on_done(self)`` once all are (or one failed: ``error``)."""

    __slots__ = ("partition", "rows", "offsets", "error", "_waiting", "_on_done")

    def __init__(
        self, partition: int, rows: list[slice] | np.ndarray, count: int, on_done: Callable[[PartitionRows], None]
    ) -> None:
        self.partition = partition
        self.rows = rows  # where they sit in the sent table: runs of rows, or row indices
        self.offsets = np.full(count, -1, dtype=np.int64)
        self.error: BaseException | None = None
        self._waiting = 0
        self._on_done = on_done

    def expect(self, batches: int) -> None:
        self._waiting = batches
        if not batches:
            self._on_done(self)

    def acknowledged(self, at: int, count: int, base_offset: int) -> None:
        if base_offset >= 0:
            self.offsets[at : at + count] = np.arange(base_offset, base_offset + count)
        self._one_done()

    def failed(self, error: BaseException) -> None:
        if self.error is None:
            self.error = error
        self._one_done()

    def _one_done(self) -> None:
        self._waiting -= 1
        if not self._waiting:
            self._on_done(self)


class BatchPart(NamedTuple):
    """Rows ``at .. at+count`` of a :class:`PartitionRows`, carried by a batch."""

    owner: PartitionRows
    at: int
    count: int


class ProduceBatch:
    """A wire batch for one partition, with its idempotence numbers once it has been sent (a retry
    sends the same rows with the same numbers, so the leader recognises a batch it already has)."""

    __slots__ = (
        "topic",
        "partition",
        "batch",
        "value_schema",
        "deadline",
        "parts",
        "producer_id",
        "sequence",
        "attempts",
        "nbytes",
    )

    def __init__(
        self,
        topic: str,
        partition: int,
        batch: pa.RecordBatch,
        value_schema: ValueSchema | None,
        deadline: float,
        parts: list[BatchPart],
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.batch = batch
        self.value_schema = value_schema
        self.deadline = deadline  # a time.monotonic() value: past it the batch fails
        self.parts = parts
        self.producer_id = -1
        self.sequence: int | None = None  # None: not sent yet under the partition's producer id
        self.attempts = 0
        # the bytes its rows reference: a slice of a bigger table (wire_batches) shares the whole
        # table's buffers, which get_total_buffer_size counts; only the slice travels
        self.nbytes = batch.nbytes

    @property
    def value_type(self) -> pa.DataType:
        return self.value_schema.arrow_type if self.value_schema is not None else pa.binary()

    def can_join(self, other: ProduceBatch, max_records: int, max_bytes: int) -> bool:
        """Whether ``other`` (queued right after this one) may travel inside it."""
        return (
            self.sequence is None
            and other.sequence is None
            and self.value_schema == other.value_schema
            and self.batch.num_rows + other.batch.num_rows <= max_records
            and self.nbytes + other.nbytes <= max_bytes
        )

    def join(self, other: ProduceBatch) -> None:
        self.batch = pa.concat_batches([self.batch, other.batch])
        self.parts = self.parts + other.parts
        self.deadline = min(self.deadline, other.deadline)
        self.nbytes += other.nbytes

    def acknowledged(self, base_offset: int) -> None:
        """Stored at ``base_offset`` (-1: not known, ``acks=0``)."""
        at = 0
        for part in self.parts:
            part.owner.acknowledged(part.at, part.count, base_offset + at if base_offset >= 0 else -1)
            at += part.count

    def failed(self, error: BaseException) -> None:
        for part in self.parts:
            part.owner.failed(error)


def wire_batches(
    topic: str,
    owner: PartitionRows,
    table: pa.Table,
    value_schema: ValueSchema | None,
    deadline: float,
    batch_records: int,
) -> list[ProduceBatch]:
    """One partition's rows of a send as batches of at most ``batch_records`` rows. Each batch is
    made from its own slice of the table: slicing one batch made of the whole table would copy it
    all first, and a slice drags its parent's buffers along (a 10,000-row slice of 600,000 rows went
    out as 6 MB instead of 1 MB)."""
    value_type = value_schema.arrow_type if value_schema is not None else pa.binary()
    batches = []
    for start in range(0, table.num_rows, batch_records):
        piece = table.slice(start, batch_records)
        batch = to_wire_batch(piece, value_type)
        part = BatchPart(owner, start, batch.num_rows)
        batches.append(ProduceBatch(topic, owner.partition, batch, value_schema, deadline, [part]))
    return batches
