"""The sparse time index of a segment: the largest timestamp so far -> the offset of a batch."""

from __future__ import annotations

from sparklog.broker.log.index_file import IndexFile


class TimeIndex(IndexFile):
    """Entries (max timestamp up to and including the batch at offset, that batch's base offset).

    Timestamps only grow, so ``search_start(ts)`` can tell the last indexed batch before which no
    record has a timestamp >= ``ts``: the scan for ``offset_for_time`` starts there.
    """

    def search_start(self, timestamp: int) -> int | None:
        """Base offset of the batch to start scanning from for the first record at or after
        ``timestamp``, or None to scan from the segment start."""
        i = self.first_at_least(timestamp)
        return None if i == 0 else self.values[i - 1]

    @property
    def max_timestamp(self) -> int | None:
        return self.keys[-1] if self.keys else None
