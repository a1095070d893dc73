"""Idempotent producers: the last batches each producer id wrote to a partition, so a retried batch
is recognised and answered with its original offsets instead of being appended twice.

Every stored batch carries its producer id and first sequence (``BatchHeader``), so followers build
the same table as they replicate, and any replica rebuilds it from its log on open.

A Kafka producer's sequence numbers wrap from 2147483647 to 0 (:data:`SEQUENCE_WRAP`): the batch
after the wrap follows the one before it.
Like Kafka's ``producer.id.expiration.ms``, a producer id that wrote nothing for a while is forgotten
(:meth:`ProducerStateTable.remove_expired`, from the broker's maintenance pass); if it comes back it
is treated as a new producer. The table is also bounded (``max_producers``, least recently written
forgotten first) so that a burst of short-lived producers cannot grow it without limit within the
expiration time.
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict, deque

from sparklog.errors import DuplicateSequence, OutOfOrderSequence

BATCHES_KEPT = 5  # like Kafka: a producer has at most this many batches in flight per partition
DEFAULT_PRODUCER_ID_EXPIRATION_MS = 86_400_000  # Kafka's producer.id.expiration.ms: one day
# A safety net under the expiration (Kafka has none and KIP-936 was written after brokers ran out
# of memory on many short-lived producers): ~1 KB an entry at most, so ~10 MB a partition.
MAX_PRODUCERS = 10_000
# Kafka's sequences are int32s that go from 2147483647 back to 0 (its clients' incrementSequence):
# a batch running past it is stored with its last sequence counted on (2147483648, ...), and the
# next one, numbered from 0 again, follows it
SEQUENCE_WRAP = 1 << 31


@dataclasses.dataclass(frozen=True)
class ProducerBatch:
    first_sequence: int
    last_sequence: int
    base_offset: int
    last_offset: int


class _Producer:
    __slots__ = ("batches", "last_write_ms", "max_timestamp")

    def __init__(self, last_write_ms: int, max_timestamp: int) -> None:
        self.batches: deque[ProducerBatch] = deque(maxlen=BATCHES_KEPT)
        self.last_write_ms = last_write_ms
        self.max_timestamp = max_timestamp  # the largest record timestamp of its batches


# a snapshot entry: (producer id, largest batch timestamp, [(first seq, last seq, base, last offset)])
ProducerEntry = tuple[int, int, list[tuple[int, int, int, int]]]


class ProducerStateTable:
    """Producer id -> its last few batches in this partition and when it last wrote, least
    recently written first."""

    def __init__(self, max_producers: int = MAX_PRODUCERS) -> None:
        if max_producers < 1:
            raise ValueError(f"max_producers must be >= 1, got {max_producers}")
        self.max_producers = max_producers
        self._producers: OrderedDict[int, _Producer] = OrderedDict()

    def __len__(self) -> int:
        return len(self._producers)

    def __contains__(self, producer_id: object) -> bool:
        return producer_id in self._producers

    def duplicate_of(self, producer_id: int, first_sequence: int, count: int) -> ProducerBatch | None:
        """The stored batch this one repeats, None if it is new; raises on a gap in sequences."""
        if producer_id < 0 or first_sequence < 0:
            return None
        producer = self._producers.get(producer_id)
        if producer is None or not producer.batches:
            return None  # unknown (never seen, expired or evicted): a new producer
        batches = producer.batches
        for batch in batches:
            if batch.first_sequence == first_sequence and batch.last_sequence == first_sequence + count - 1:
                return batch
        expected = batches[-1].last_sequence + 1
        if expected >= SEQUENCE_WRAP and first_sequence < SEQUENCE_WRAP:
            expected %= SEQUENCE_WRAP  # a Kafka producer's sequences went from 2147483647 back to 0
        if first_sequence == expected:
            return None
        if first_sequence < expected:
            raise DuplicateSequence(
                f"producer {producer_id} resent sequence {first_sequence} which is older than the batches kept"
            )
        raise OutOfOrderSequence(f"producer {producer_id} sent sequence {first_sequence}, expected {expected}")

    def record(
        self,
        producer_id: int,
        first_sequence: int,
        count: int,
        base_offset: int,
        last_offset: int,
        *,
        last_write_ms: int,
        max_timestamp: int | None = None,
    ) -> None:
        """Remember a batch that was just stored (appended or replicated) at ``last_write_ms``;
        ``max_timestamp``, its largest record timestamp, is kept for :meth:`entries`."""
        if producer_id < 0 or first_sequence < 0:
            return
        max_ts = last_write_ms if max_timestamp is None else max_timestamp
        producers = self._producers
        producer = producers.get(producer_id)
        if producer is None:
            while len(producers) >= self.max_producers:
                producers.popitem(last=False)  # the least recently written
            producer = producers[producer_id] = _Producer(last_write_ms, max_ts)
        else:
            producers.move_to_end(producer_id)
            producer.last_write_ms = max(producer.last_write_ms, last_write_ms)
            producer.max_timestamp = max(producer.max_timestamp, max_ts)
        producer.batches.append(ProducerBatch(first_sequence, first_sequence + count - 1, base_offset, last_offset))

    def remove_expired(self, now_ms: int, expiration_ms: int) -> int:
        """Forget every producer whose last write is ``expiration_ms`` or more before ``now_ms``
        (Kafka's ``removeExpiredProducers``); returns how many were forgotten."""
        horizon = now_ms - expiration_ms
        expired = [pid for pid, producer in self._producers.items() if producer.last_write_ms <= horizon]
        for pid in expired:
            del self._producers[pid]
        return len(expired)

    def last_write_ms(self, producer_id: int) -> int | None:
        producer = self._producers.get(producer_id)
        return None if producer is None else producer.last_write_ms

    def truncate(self, offset: int) -> None:
        """Forget batches at or after ``offset`` (the log was truncated)."""
        for producer_id in list(self._producers):
            producer = self._producers[producer_id]
            kept = [b for b in producer.batches if b.last_offset < offset]
            if kept:
                producer.batches = deque(kept, maxlen=BATCHES_KEPT)
            else:
                del self._producers[producer_id]

    def clear(self) -> None:
        self._producers.clear()

    def entries(self) -> list[ProducerEntry]:
        """The table as plain values, least recently written first (a log's state snapshot)."""
        return [
            (pid, p.max_timestamp, [(b.first_sequence, b.last_sequence, b.base_offset, b.last_offset) for b in bs])
            for pid, p in self._producers.items()
            for bs in [p.batches]
        ]

    def restore(self, entries: list[ProducerEntry], now_ms: int) -> None:
        """Replace the table by snapshot ``entries``. As when the table is rebuilt from batch
        headers, a producer's last write is taken as its batches' largest timestamp, never later
        than ``now_ms``."""
        self._producers.clear()
        for pid, max_ts, batches in entries[-self.max_producers :]:
            producer = self._producers[int(pid)] = _Producer(min(int(max_ts), now_ms), int(max_ts))
            producer.batches.extend(ProducerBatch(*map(int, b)) for b in batches)
