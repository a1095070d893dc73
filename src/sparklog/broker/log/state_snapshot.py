"""A partition log's derived state saved beside its segments, so that opening it does not read
every batch header: the leader epoch cache and the producer state table as of an offset (Kafka's
``leader-epoch-checkpoint`` and ``<offset>.snapshot`` in one file).

The file ``state-snapshot`` is written (to a temporary name, then renamed) when the log rolls and
when it closes. It describes the log below its ``end``: an open that finds the log ending at or
after ``end`` takes the snapshot and reads only the headers of the batches from ``end`` on; one
that finds the log shorter (recovery cut what the snapshot covered) ignores it and reads every
header. A truncation removes the file before it changes any segment, since the batches below
``end`` would then no longer be the ones it describes. A file that cannot be read is ignored the
same way: the snapshot only ever saves work.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
from pathlib import Path

from sparklog.broker.log.producer_state import ProducerEntry

SNAPSHOT_FILE = "state-snapshot"
_FORMAT = 1


@dataclasses.dataclass(frozen=True)
class LogStateSnapshot:
    end: int  # the log end offset the state is as of
    epochs: list[tuple[int, int]]  # (leader epoch, start offset), as LeaderEpochCache.entries
    producers: list[ProducerEntry]  # as ProducerStateTable.entries()


def write_snapshot(directory: Path, snapshot: LogStateSnapshot) -> None:
    body = {"format": _FORMAT, "end": snapshot.end, "epochs": snapshot.epochs, "producers": snapshot.producers}
    tmp = directory / (SNAPSHOT_FILE + ".tmp")
    tmp.write_text(json.dumps(body, separators=(",", ":")))
    os.replace(tmp, directory / SNAPSHOT_FILE)


def read_snapshot(directory: Path) -> LogStateSnapshot | None:
    """The saved snapshot, or None if there is none or it cannot be read."""
    try:
        body = json.loads((directory / SNAPSHOT_FILE).read_text())
        if body.get("format") != _FORMAT:
            return None
        epochs = [(int(e), int(start)) for e, start in body["epochs"]]
        producers = [
            (int(pid), int(max_ts), [tuple(int(v) for v in b) for b in batches])
            for pid, max_ts, batches in body["producers"]
        ]
        if any(len(b) != 4 for _, _, batches in producers for b in batches):
            return None
        return LogStateSnapshot(int(body["end"]), epochs, producers)  # type: ignore[arg-type]
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return None


def remove_snapshot(directory: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        (directory / SNAPSHOT_FILE).unlink()
