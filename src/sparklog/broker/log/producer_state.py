"""Idempotent producers: the last batches each producer id wrote to a partition, so a retried batch
is recognised and answered with its original offsets instead of being appended twice.

Every stored batch carries its producer id and first sequence (``BatchHeader``), so followers build
the same table as they replicate, and any replica rebuilds it from its log on open.
"""

from __future__ import annotations

import dataclasses
from collections import deque

from sparklog.errors import DuplicateSequence, OutOfOrderSequence

BATCHES_KEPT = 5  # like Kafka: a producer has at most this many batches in flight per partition


@dataclasses.dataclass(frozen=True)
class ProducerBatch:
    first_sequence: int
    last_sequence: int
    base_offset: int
    last_offset: int


class ProducerStateTable:
    """Producer id -> its last few batches in this partition."""

    def __init__(self) -> None:
        self._producers: dict[int, deque[ProducerBatch]] = {}

    def duplicate_of(self, producer_id: int, first_sequence: int, count: int) -> ProducerBatch | None:
        """The stored batch this one repeats, None if it is new; raises on a gap in sequences."""
        if producer_id < 0 or first_sequence < 0:
            return None
        batches = self._producers.get(producer_id)
        if not batches:
            return None
        for batch in batches:
            if batch.first_sequence == first_sequence and batch.last_sequence == first_sequence + count - 1:
                return batch
        last = batches[-1].last_sequence
        if first_sequence <= last:
            raise DuplicateSequence(
                f"producer {producer_id} resent sequence {first_sequence} which is older than the batches kept"
            )
        if first_sequence != last + 1:
            raise OutOfOrderSequence(f"producer {producer_id} sent sequence {first_sequence}, expected {last + 1}")
        return None

    def record(self, producer_id: int, first_sequence: int, count: int, base_offset: int, last_offset: int) -> None:
        """Remember a batch that was just stored (appended or replicated)."""
        if producer_id < 0 or first_sequence < 0:
            return
        batches = self._producers.setdefault(producer_id, deque(maxlen=BATCHES_KEPT))
        batches.append(ProducerBatch(first_sequence, first_sequence + count - 1, base_offset, last_offset))

    def truncate(self, offset: int) -> None:
        """Forget batches at or after ``offset`` (the log was truncated)."""
        for producer_id in list(self._producers):
            kept = deque((b for b in self._producers[producer_id] if b.last_offset < offset), maxlen=BATCHES_KEPT)
            if kept:
                self._producers[producer_id] = kept
            else:
                del self._producers[producer_id]

    def clear(self) -> None:
        self._producers.clear()
