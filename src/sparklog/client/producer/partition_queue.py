"""One partition's batches waiting to leave, in order, with its idempotent producer numbering.

The sender sends a partition's batches from the front of its queue, at most one request at a time
(``in_flight``: Kafka's muted partition), so batches reach the leader in order and a retried batch
is always retried before the ones behind it.
"""

from __future__ import annotations

import secrets
from collections import deque

from sparklog.client.producer.produce_batch import ProduceBatch
from sparklog.errors import RequestTimedOut

FIRST_BACKOFF_S = 0.05
MAX_BACKOFF_S = 0.25


def new_producer_id() -> int:
    return secrets.randbits(62)


class PartitionQueue:
    """A partition's queued batches (oldest first) and where they go."""

    __slots__ = (
        "topic",
        "partition",
        "batches",
        "in_flight",
        "retry_at",
        "backoff",
        "refresh_leader",
        "producer_id",
        "next_sequence",
        "last_error",
    )

    def __init__(self, topic: str, partition: int) -> None:
        self.topic = topic
        self.partition = partition
        self.batches: deque[ProduceBatch] = deque()
        self.in_flight = False
        self.retry_at = 0.0  # a time.monotonic() value: not sent again before it
        self.backoff = FIRST_BACKOFF_S
        self.refresh_leader = False  # the next send looks the leader up again
        self.producer_id = new_producer_id()
        self.next_sequence = 0
        self.last_error: BaseException | None = None  # why the last attempt failed (reported on expiry)

    def number(self, batch: ProduceBatch) -> None:
        """Give a batch about to be sent for the first time its producer id and sequence."""
        if batch.sequence is None:
            batch.producer_id = self.producer_id
            batch.sequence = self.next_sequence
            self.next_sequence += batch.batch.num_rows

    def new_producer_id(self) -> None:
        """After a batch failed for good its fate may be unknown: the batches not sent yet go under a
        new producer id, so the leader does not refuse them as out of sequence."""
        self.producer_id = new_producer_id()
        self.next_sequence = 0
        for batch in self.batches:
            batch.sequence = None

    def retry_later(self, now: float, error: BaseException, refresh_leader: bool) -> None:
        self.retry_at = now + self.backoff
        self.backoff = min(self.backoff * 2, MAX_BACKOFF_S)
        self.refresh_leader = self.refresh_leader or refresh_leader
        if not (isinstance(error, RequestTimedOut) and self.last_error is not None):
            self.last_error = error  # an attempt that only ran out of time keeps the reason of the others

    def succeeded(self) -> None:
        self.backoff = FIRST_BACKOFF_S
        self.last_error = None
