"""The leader epoch cache of a partition: at which offset each leader epoch began (Kafka's KIP-101).

A replica that comes back asks the leader where its own latest epoch ended on the leader and
truncates there, instead of trusting its high watermark (which lost acknowledged records).
Stored as ``leader-epoch-checkpoint`` (one ``epoch start_offset`` line per epoch); derived data:
every stored batch carries its epoch, so the cache is rebuilt from the segments when in doubt.
"""

from __future__ import annotations

import os
from pathlib import Path

CHECKPOINT_FILE = "leader-epoch-checkpoint"


class LeaderEpochCache:
    """Sorted (epoch, start offset) entries; both only grow."""

    def __init__(self, directory: Path) -> None:
        self.path = Path(directory) / CHECKPOINT_FILE
        self.entries: list[tuple[int, int]] = []

    def load(self) -> bool:
        """Read the checkpoint; False if it is missing or unreadable (then rebuild it)."""
        try:
            lines = self.path.read_text().split()
            pairs = [(int(lines[i]), int(lines[i + 1])) for i in range(0, len(lines), 2)]
        except (OSError, ValueError, IndexError):
            return False
        self.entries = pairs
        return True

    def save(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text("".join(f"{e} {o}\n" for e, o in self.entries))
        os.replace(tmp, self.path)

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
