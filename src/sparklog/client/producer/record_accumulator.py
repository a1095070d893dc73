"""Records given to ``send()`` one at a time, gathered per topic into columns until they leave."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from sparklog.client.producer.futures import GroupOutcome


class TopicRecords:
    """Records of one topic waiting to be sent, column by column: values and timestamps always;
    keys, headers and explicit partitions only once a record has one (earlier rows get None)."""

    def __init__(self, topic: str) -> None:
        self.topic = topic
        self.values: list[Any] = []
        self.timestamps: list[int] = []
        self.keys: list[bytes | None] | None = None
        self.headers: list[Mapping[str, bytes] | None] | None = None
        self.partitions: list[int | None] | None = None
        self.rare = False  # a record had a key, headers or a partition: every later one records its own
        self.bytes = 0
        self.since = time.monotonic()  # when its linger started (a flush makes it due at once)
        self.created = self.since  # the delivery timeout counts from here
        self.outcome = GroupOutcome(topic)

    def add_rare(self, key: bytes | None, headers: Mapping[str, bytes] | None, partition: int | None) -> None:
        """The optional fields of the record just appended."""
        self.rare = True
        n = len(self.values) - 1
        self.keys = _late_column(self.keys, key, n)
        self.headers = _late_column(self.headers, headers, n)
        self.partitions = _late_column(self.partitions, partition, n)


def _late_column(column: list[Any] | None, value: Any, before: int) -> list[Any] | None:
    """``column`` with ``value`` appended; started (``before`` Nones first) by the first non-None."""
    if column is None:
        if value is None:
            return None
        column = [None] * before
    column.append(value)
    return column
