"""The sparse offset index of a segment: offset -> file position of the batch that starts there."""

from __future__ import annotations

from sparklog.broker.log.index_file import IndexFile


class OffsetIndex(IndexFile):
    """Entries (offset, position) for a batch every ``index.interval.bytes`` or so.

    ``lookup(offset)`` gives the position of the last indexed batch that starts at or before ``offset``;
    the reader scans forward from there.
    """

    def lookup(self, offset: int) -> tuple[int, int] | None:
        """(indexed offset, position) of the last entry at or before ``offset``, or None."""
        i = self.floor(offset)
        return None if i < 0 else (self.keys[i], self.values[i])

    def sane(self, base_offset: int, file_size: int) -> bool:
        """A cheap check that the index can belong to a segment of this base offset and size."""
        if not self.keys:
            return True
        return (
            self.keys[0] >= base_offset
            and 0 < self.values[-1] < file_size
            and all(a < b for a, b in zip(self.values, self.values[1:], strict=False))
        )
