"""Which partition each row of a send goes to, and the rows of each partition, without per-row Python."""

from __future__ import annotations

import itertools

import numpy as np
import pyarrow as pa

from sparklog.client.partitioner import partitions_for_keys
from sparklog.errors import InvalidRequest

Rows = list[slice] | np.ndarray  # runs of contiguous rows, or row indices


class RowRouter:
    """Partitions rows: an explicit partition, else the key's hash (the topic's partitioner,
    :mod:`sparklog.client.partitioner`), else sticky batches (unkeyed rows go to one partition
    ``batch_records`` at a time, the next batch to the next partition)."""

    def __init__(self, batch_records: int) -> None:
        self.batch_records = batch_records
        self._sticky = itertools.count()

    def partition_rows(
        self, topic: str, keys: pa.Array | None, explicit: np.ndarray | None, rows: int, n: int, partitioner: str
    ) -> np.ndarray:
        """The partition of every row of a table (``explicit``: a partition per row, -1 to choose;
        keys hashed with ``partitioner``)."""
        parts = np.full(rows, -1, dtype=np.int64) if explicit is None else explicit.copy()
        bad = parts >= n
        if bad.any():
            raise InvalidRequest(f"topic {topic!r} has {n} partitions; partition {int(parts[bad][0])} does not exist")
        free = parts < 0
        if free.any():
            if keys is not None and keys.null_count < len(keys):
                hashed = partitions_for_keys(keys, n, partitioner)
                keyed = free & ~np.asarray(keys.is_null().to_numpy(zero_copy_only=False))
                parts[keyed] = hashed[keyed]
                free &= ~keyed
            chunk = (np.cumsum(free) - 1) // self.batch_records
            parts[free] = (next(self._sticky) + chunk[free]) % n
        return parts

    def sticky_runs(self, rows: int, n: int) -> list[tuple[int, list[slice]]]:
        """Rows of an unkeyed table, a batch at a time to one partition, the next batch to the next."""
        first = next(self._sticky)
        runs: dict[int, list[slice]] = {}
        for i, start in enumerate(range(0, rows, self.batch_records)):
            runs.setdefault((first + i) % n, []).append(slice(start, min(start + self.batch_records, rows)))
        return sorted(runs.items())


def rows_by_partition(parts: np.ndarray) -> list[tuple[int, Rows]]:
    """The rows of each partition: as runs of contiguous rows when there are few runs (sticky
    batches, explicit partitions: taken zero-copy), else as row indices (key-hashed rows)."""
    if not len(parts):
        return []
    bounds = np.flatnonzero(parts[1:] != parts[:-1]) + 1
    if len(bounds) + 1 > max(8, len(parts) // 256):
        return [(int(p), np.flatnonzero(parts == p)) for p in np.unique(parts)]
    starts = np.concatenate(([0], bounds)).tolist()
    ends = np.concatenate((bounds, [len(parts)])).tolist()
    runs: dict[int, list[slice]] = {}
    for p, start, end in zip(parts[starts].tolist(), starts, ends, strict=True):
        runs.setdefault(p, []).append(slice(start, end))
    return sorted(runs.items())


def take_rows(table: pa.Table, rows: Rows) -> pa.Table:
    if not isinstance(rows, list):
        return table.take(pa.array(rows))
    if len(rows) == 1 and rows[0].stop - rows[0].start == table.num_rows:
        return table
    return pa.concat_tables([table.slice(r.start, r.stop - r.start) for r in rows])


def place(offsets: np.ndarray, rows: Rows, values: np.ndarray) -> None:
    """Write one partition's ``values`` (in the order its rows were sent) at its rows of ``offsets``."""
    if isinstance(rows, list):
        at = 0
        for run in rows:
            offsets[run] = values[at : at + run.stop - run.start]
            at += run.stop - run.start
    else:
        offsets[rows] = values
