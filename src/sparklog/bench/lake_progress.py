"""How far a lake-enabled topic of a benchmark cluster is tiered: each partition's **closed end**
(what the tierer may tier) against its **lake offset** (what the Delta table holds), and waiting
until the two meet. For ``bench tier`` and ``bench spark-read --lake`` (one broker, RF 1).

- The closed end of a partition is the base offset of its last (active) segment, read from the
  segment files' names in the broker's data dir (``<data dir>/<topic>-<p>/<base>.arrows``): the
  tierer tiers closed segments below the high watermark, and with one replica and nothing being
  produced the high watermark is the log end, beyond that base. (``bench spark-read --lake``
  waits for the high watermarks instead: its topic's ``segment.ms`` has the tierer close the last
  segments too.)
- The lake offset is the leader's ``list_offsets`` answer (``lake_offset``; None, before the
  tierer has read ZooKeeper or the table, counts as 0).
- Compaction is done when no partition of the table has a run of small files due, nor will have
  once its files are older than the topic's ``lake.compaction.lag.ms``
  (:func:`sparklog.broker.lake.compaction.compaction_span` on the Delta log's statistics).
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

from deltalake import DeltaTable

from sparklog.broker.lake.compaction import DEFAULT_TARGET_FILE_BYTES, compaction_span
from sparklog.broker.lake.delta_table import files_by_partition
from sparklog.broker.log.segment import SEGMENT_SUFFIX
from sparklog.client.cluster_client import ClusterClient

POLL_S = 0.02
TIMEOUT_S = 900.0


def closed_ends(data_dir: Path, topic: str, partitions: int) -> dict[int, int]:
    """Each partition's closed end (the base offset of its last segment; 0 without segments)."""
    ends = {}
    for p in range(partitions):
        bases = [int(f.name[: -len(SEGMENT_SUFFIX)]) for f in (data_dir / f"{topic}-{p}").glob(f"*{SEGMENT_SUFFIX}")]
        ends[p] = max(bases, default=0)
    return ends


def high_watermarks(client: ClusterClient, topic: str, partitions: int) -> dict[int, int]:
    """Each partition's high watermark, from its leader: a topic's whole log, which a lake-enabled
    topic's tierer reaches once each partition's last segment is ``segment.ms`` old."""
    listed = client.list_offsets_many([(topic, p) for p in range(partitions)])
    return {p: int(info["high_watermark"]) for (_, p), info in listed.items()}


def lake_offsets(client: ClusterClient, topic: str, partitions: int) -> dict[int, int]:
    """Each partition's lake offset, from its leader (one ``list_offsets`` call per broker)."""
    listed = client.list_offsets_many([(topic, p) for p in range(partitions)])
    return {p: int(info.get("lake_offset") or 0) for (_, p), info in listed.items()}


@dataclasses.dataclass(frozen=True)
class Tiered:
    """When a topic reached its ends (closed ends, or high watermarks), seen by polling its lake
    offsets every ``POLL_S``."""

    first_progress: float  # perf_counter() of the first poll that saw more tiered than at the start (= done if none)
    done: float  # ... of the first poll that saw every partition at its end
    at_start: int  # records tiered (sum of lake offsets) when waiting began
    at_first_progress: int  # ... at the first poll that saw progress
    end: int  # the sum of the ends


def wait_tiered(
    client: ClusterClient, topic: str, ends: dict[int, int], timeout_s: float = TIMEOUT_S, poll_s: float = POLL_S
) -> Tiered:
    """Poll the lake offsets of ``topic`` until every partition's reaches ``ends[p]``."""
    deadline = time.perf_counter() + timeout_s
    total = sum(ends.values())
    at_start = sum(lake_offsets(client, topic, len(ends)).values())
    first_progress, at_first = None, at_start
    while True:
        offsets = lake_offsets(client, topic, len(ends))
        now = time.perf_counter()
        tiered = sum(offsets.values())
        if first_progress is None and tiered > at_start:
            first_progress, at_first = now, tiered
        if all(offsets[p] >= end for p, end in ends.items()):
            return Tiered(now if first_progress is None else first_progress, now, at_start, at_first, total)
        if now > deadline:
            raise TimeoutError(f"{topic}: lake offsets {offsets} after {timeout_s:.0f} s, closed ends {ends}")
        time.sleep(poll_s)


def wait_compacted(
    uri: str,
    min_files: int,
    lag_ms: int = -1,
    timeout_s: float = TIMEOUT_S,
    target_bytes: int = DEFAULT_TARGET_FILE_BYTES,
) -> int:
    """Poll the table at ``uri`` until no partition has compaction due, nor will have once its
    files are older than ``lag_ms`` (the topic's ``lake.compaction.lag.ms``; -1: by count only);
    its number of files then."""
    deadline = time.perf_counter() + timeout_s
    # with a lag, every run of two small files becomes due once old: wait as if all were
    lag, now = (0, 1 << 62) if lag_ms >= 0 else (-1, 0)
    while True:
        files = files_by_partition(DeltaTable(uri))
        if all(compaction_span(f, min_files, target_bytes, lag, now) is None for f in files.values()):
            return sum(len(f) for f in files.values())
        if time.perf_counter() > deadline:
            raise TimeoutError(f"{uri}: compaction still due after {timeout_s:.0f} s")
        time.sleep(POLL_S * 10)
