"""What the tierer reads of one partition: its role, its closed and committed records, and where
to note how far the table has them (for local retention). :class:`PartitionSource` is the broker's
(one local replica); tests give the tierer fakes of :class:`TieringSource` instead."""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from typing import Protocol

import pyarrow as pa

from sparklog.broker.partition import Partition
from sparklog.schemas.value_schema import ValueSchema

READ_ALL = 1 << 62  # read_stored's byte budget when reading a whole segment (zero-copy, memory-mapped)


class TieringSource(Protocol):
    """One local partition replica, as the tierer sees it."""

    topic: str
    partition: int
    replica: object  # the local replica read: another one once the topic is deleted and created again

    def leader_epoch(self) -> int | None:
        """Its leader epoch while this broker leads it (and may write), else None."""
        ...

    def log_start(self) -> int:
        """The first offset still in the local log."""
        ...

    def tierable_end(self) -> int:
        """The end of what may be tiered: the closed (rolled) segments, below the high watermark."""
        ...

    def high_watermark(self) -> int:
        """The end of the committed records (what the table is behind of)."""
        ...

    def segment_end(self, offset: int) -> int:
        """The end (next offset) of the segment holding ``offset``."""
        ...

    def read(self, start: int, end: int) -> list[pa.RecordBatch]:
        """The stored batches holding the offsets ``[start, end)`` (within one segment)."""
        ...

    def roll_if_aged(self) -> bool:
        """Close the active segment if it holds records and is ``segment.ms`` old (what its next
        append would do); True if it did."""
        ...

    def set_tiered(self, offset: int) -> None:
        """Everything below ``offset`` is in the table (local retention may delete it)."""
        ...

    def tiered(self) -> int | None: ...

    def value_schemas(self) -> Sequence[ValueSchema]:
        """A typed topic's value schema versions, oldest first (empty: a plain topic)."""
        ...

    def compaction_min_files(self) -> int:
        """The topic's ``lake.compaction.min.files`` (0: no compaction)."""
        ...

    def compaction_lag_ms(self) -> int:
        """The topic's ``lake.compaction.lag.ms`` (-1: by count only)."""
        ...


class PartitionSource:
    """A broker's local replica of a partition as a :class:`TieringSource`."""

    def __init__(self, partition: Partition, writable: bool = True, value_schemas: Sequence[ValueSchema] = ()) -> None:
        """``writable``: the broker may write (it has a live ZooKeeper session, its fence);
        ``value_schemas``: the topic's schema versions as the broker knows them now."""
        self.topic = partition.topic
        self.partition = partition.partition
        self._partition = partition
        self.replica = partition
        self._writable = writable
        self._value_schemas = value_schemas

    def leader_epoch(self) -> int | None:
        state = self._partition.state
        if not self._writable or state is None or state.leader != self._partition.broker_id:
            return None
        return state.leader_epoch

    def log_start(self) -> int:
        return self._partition.log.log_start_offset

    def high_watermark(self) -> int:
        return self._partition.high_watermark

    def tierable_end(self) -> int:
        return min(self._partition.log.segments[-1].base_offset, self._partition.high_watermark)

    def segment_end(self, offset: int) -> int:
        segments = self._partition.log.segments
        i = max(0, bisect.bisect_right([s.base_offset for s in segments], offset) - 1)
        return segments[i].next_offset

    def read(self, start: int, end: int) -> list[pa.RecordBatch]:
        return self._partition.log.read(start, READ_ALL, upto=end)

    def roll_if_aged(self) -> bool:
        return self._partition.log.roll_if_aged()

    def set_tiered(self, offset: int) -> None:
        self._partition.log.tiered_offset = offset

    def tiered(self) -> int | None:
        return self._partition.log.tiered_offset

    def value_schemas(self) -> Sequence[ValueSchema]:
        return self._value_schemas

    def compaction_min_files(self) -> int:
        return self._partition.log.config.lake_compaction_min_files

    def compaction_lag_ms(self) -> int:
        return self._partition.log.config.lake_compaction_lag_ms
