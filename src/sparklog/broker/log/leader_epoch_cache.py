"""The leader epoch cache of a partition: at which offset each leader epoch began (Kafka's KIP-101).

A replica that comes back asks the leader where its own latest epoch ended on the leader and
truncates there, instead of trusting its high watermark (which lost acknowledged records).
Every stored batch carries the epoch it was written in, so the cache is derived from the batch
headers when the log opens and kept up to date by appends and truncations (no file of its own).
"""

from __future__ import annotations


class LeaderEpochCache:
    """Sorted (epoch, start offset) entries; both only grow."""

    def __init__(self) -> None:
        self.entries: list[tuple[int, int]] = []

    @property
    def latest_epoch(self) -> int:
        return self.entries[-1][0] if self.entries else -1

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that ``epoch`` starts at ``start_offset`` (ignored unless it is a newer epoch).
        Returns whether the cache changed."""
        if epoch < 0 or epoch <= self.latest_epoch:
            return False
        self.entries.append((epoch, start_offset))
        return True

    def end_offset_for(self, epoch: int, log_end_offset: int) -> tuple[int, int]:
        """(the largest epoch <= ``epoch`` known here, the offset where it ended): the start of the
        next epoch, or the log end if it is the latest. (-1, -1) if ``epoch`` predates every entry."""
        best = -1
        for i, (e, _start) in enumerate(self.entries):
            if e > epoch:
                break
            best = i
        if best < 0:
            return -1, -1
        found_epoch = self.entries[best][0]
        if best + 1 < len(self.entries):
            return found_epoch, self.entries[best + 1][1]
        return found_epoch, log_end_offset

    def truncate_from_end(self, offset: int) -> None:
        """Forget epochs that began at or after ``offset`` (the log was truncated there)."""
        self.entries = [(e, o) for e, o in self.entries if o < offset]

    def clear(self) -> None:
        self.entries = []
