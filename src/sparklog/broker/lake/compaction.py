"""When a partition's files in its topic's Delta table are compacted, and which.

Each tiering commit adds one file per partition (more when a tierer behind takes several closed
segments), so a topic with small segments (``segment.bytes``, ``segment.ms`` rolls of a quiet
topic) leaves many small files, and every reader of the table opens each of them. Like Delta's
auto compaction (a partition's small files merged once there are enough of them), the partition's
leader rewrites a run of consecutive small files as one file once the partition has
``lake.compaction.min.files`` of them in a row.

A file is small below half of ``target_bytes``: a file at least that large is not worth reading
and writing again. A run is cut at ``target_bytes`` (the Parquet bytes of the files it takes), so
the rewrite's memory stays bounded and what it writes is about one file of that size. The run is
the earliest in offset order: compaction works its way from the oldest history to the newest.

A run shorter than ``lake.compaction.min.files`` is rewritten too once its files are old: with
``lag_ms`` given, a stretch of two or more consecutive small files all written more than
``lag_ms`` before ``now_ms`` (the Delta log's modification time of each file) is due. The tierer
asks this once a partition has had no commit for ``lake.compaction.lag.ms``: while a partition
keeps receiving commits only the count rule applies (bounded rewriting), and a partition gone
quiet has its history in few files (a reader opens each file: ~10 ms of Spark's time apiece here,
and fewer, larger files split evenly over its tasks).

:meth:`sparklog.broker.lake.delta_table.DeltaTableWriter.compact` does the rewrite.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

DEFAULT_TARGET_FILE_BYTES = 128 << 20  # Delta's auto compaction's target file size


@dataclasses.dataclass(frozen=True)
class DataFile:
    """One data file of a partition: its offsets (from the Delta log's statistics) and size."""

    first: int
    last: int
    size: int
    modified_ms: int = 0  # when it was written (ms since the epoch)


def compaction_span(
    files: Sequence[DataFile],
    min_files: int,
    target_bytes: int = DEFAULT_TARGET_FILE_BYTES,
    lag_ms: int = -1,
    now_ms: int = 0,
) -> tuple[int, int] | None:
    """The offsets ``(first, last)`` (inclusive) of the files to rewrite as one, or None.

    ``files``: one partition's, in any order. The earliest run (by offset) of at least
    ``min_files`` consecutive small files; else, with ``lag_ms`` >= 0, the earliest run of at least
    two consecutive small files all modified more than ``lag_ms`` before ``now_ms``. Taken up to
    ``target_bytes`` (two files at least). ``min_files`` below 2 turns compaction off."""
    if min_files < 2:
        return None
    ordered = sorted(files, key=lambda f: f.first)
    small = target_bytes // 2
    run = next((run for run in _runs(ordered, lambda f: f.size < small) if len(run) >= min_files), None)
    if run is None and lag_ms >= 0:
        old = now_ms - lag_ms
        run = next(
            (run for run in _runs(ordered, lambda f: f.size < small and f.modified_ms < old) if len(run) >= 2), None
        )
    if run is None:
        return None
    taken = [run[0]]
    size = run[0].size
    for file in run[1:]:
        if size + file.size > target_bytes and len(taken) >= 2:
            break
        taken.append(file)
        size += file.size
    return taken[0].first, max(f.last for f in taken)


def _runs(ordered: Sequence[DataFile], member: Callable[[DataFile], bool]) -> list[list[DataFile]]:
    """The runs of consecutive files (in the given order) for which ``member`` holds."""
    runs: list[list[DataFile]] = [[]]
    for file in ordered:
        if member(file):
            runs[-1].append(file)
        elif runs[-1]:
            runs.append([])
    return runs
