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

:meth:`sparklog.broker.lake.delta_table.DeltaTableWriter.compact` does the rewrite.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

DEFAULT_TARGET_FILE_BYTES = 128 << 20  # Delta's auto compaction's target file size


@dataclasses.dataclass(frozen=True)
class DataFile:
    """One data file of a partition: its offsets (from the Delta log's statistics) and size."""

    first: int
    last: int
    size: int


def compaction_span(
    files: Sequence[DataFile], min_files: int, target_bytes: int = DEFAULT_TARGET_FILE_BYTES
) -> tuple[int, int] | None:
    """The offsets ``(first, last)`` (inclusive) of the files to rewrite as one, or None.

    ``files``: one partition's, in any order. The earliest run (by offset) of at least
    ``min_files`` consecutive small files, taken up to ``target_bytes`` (two files at least).
    ``min_files`` below 2 turns compaction off."""
    if min_files < 2:
        return None
    small = target_bytes // 2
    runs: list[list[DataFile]] = [[]]
    for file in sorted(files, key=lambda f: f.first):
        if file.size < small:
            runs[-1].append(file)
        elif runs[-1]:
            runs.append([])
    run = next((run for run in runs if len(run) >= min_files), None)
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
