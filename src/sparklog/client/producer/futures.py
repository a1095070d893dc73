"""What a send resolves to: a record's or a slice's place in the log, and the futures that carry it."""

from __future__ import annotations

import threading
from typing import NamedTuple

import numpy as np


class RecordMetadata(NamedTuple):
    """Where a sent record landed (offset -1 with ``acks=0``)."""

    topic: str
    partition: int
    offset: int


class BatchMetadata(NamedTuple):
    """Where a slice of a ``send_batch`` table landed."""

    topic: str
    partition: int
    base_offset: int
    last_offset: int


class GroupOutcome:
    """The fate of one group of ``send()`` records: partition and offset per record, or an error."""

    def __init__(self, topic: str) -> None:
        self.topic = topic
        self.done = threading.Event()
        self.partitions: np.ndarray | None = None
        self.offsets: np.ndarray | None = None
        self.error: BaseException | None = None  # the whole group failed (before partitioning)
        self.partition_errors: dict[int, BaseException] = {}  # a partition's rows failed, others did not
        self.record_errors: dict[int, BaseException] = {}  # rows refused before sending (a typed value)


class ProduceFuture(tuple[GroupOutcome, int]):
    """The future of one ``send()``: ``result()`` gives its :class:`RecordMetadata`. (A tuple of its
    group's outcome and its row in the group: built by ``tuple``'s own constructor, as ``send()``
    makes one per record.)"""

    __slots__ = ()

    def done(self) -> bool:
        return self[0].done.is_set()

    def result(self, timeout: float | None = None) -> RecordMetadata:
        outcome, index = self
        if not outcome.done.wait(timeout):
            raise TimeoutError("the record was not acknowledged in time")
        if outcome.error is not None:
            raise outcome.error
        refused = outcome.record_errors.get(index)
        if refused is not None:
            raise refused
        assert outcome.partitions is not None and outcome.offsets is not None
        partition = int(outcome.partitions[index])
        failed = outcome.partition_errors.get(partition)
        if failed is not None:
            raise failed
        return RecordMetadata(outcome.topic, partition, int(outcome.offsets[index]))
