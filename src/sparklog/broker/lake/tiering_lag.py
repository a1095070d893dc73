"""How far each partition's Delta table is behind its log, in records and in seconds, for the
partitions this broker tiers (it leads them); served as metrics (:class:`TieringLagCollector`).

Records behind: the high watermark minus the table's next offset. The tierer writes closed
segments only, so a partition's active segment counts as behind until it rolls (``segment.bytes``
or ``segment.ms``): that is the delay a lake reader sees.

Seconds behind: how long ago the oldest record not yet in the table was first seen by a tiering
pass (0 when nothing is behind). Each pass marks the high watermark it saw with the time
(:meth:`TieringLag.observe`), so no record is read and no timestamp trusted: producers' timestamps
may be anything. Precise to a pass (about a second); records already waiting when this broker
started leading count from then. At most ``MAX_MARKS`` marks per partition: past that every other
one is dropped, so a table behind for very long is measured more coarsely, never with more memory.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

TopicPartition = tuple[str, int]
MAX_MARKS = 1024


class TieringLag:
    """Fed by the tiering thread, read by metrics scrapes."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._marks: dict[TopicPartition, deque[tuple[int, float]]] = {}  # (high watermark, first seen)
        self._tiered: dict[TopicPartition, tuple[int, int]] = {}  # (table's next offset, high watermark)

    def observe(self, tp: TopicPartition, high_watermark: int, tiered: int) -> None:
        """A pass saw the log at ``high_watermark`` and the table holding everything below ``tiered``."""
        now = self._clock()
        with self._lock:
            marks = self._marks.setdefault(tp, deque())
            if not marks or high_watermark > marks[-1][0]:
                marks.append((high_watermark, now))
            while marks and marks[0][0] <= tiered:  # those records are all in the table
                marks.popleft()
            if len(marks) > MAX_MARKS:
                kept = list(marks)
                thinned = kept[::2]  # the oldest mark stays: it is what the seconds are measured from
                if thinned[-1] != kept[-1]:
                    thinned.append(kept[-1])
                marks.clear()
                marks.extend(thinned)
            self._tiered[tp] = (tiered, high_watermark)

    def keep_only(self, partitions: Iterable[TopicPartition]) -> None:
        """Forget every partition not tiered here any more."""
        kept = set(partitions)
        with self._lock:
            for tp in [tp for tp in self._tiered if tp not in kept]:
                self._tiered.pop(tp, None)
                self._marks.pop(tp, None)

    def behind(self) -> dict[TopicPartition, tuple[int, float]]:
        """Per partition tiered here: (records, seconds) its table is behind its log."""
        now = self._clock()
        with self._lock:
            out = {}
            for tp, (tiered, high_watermark) in self._tiered.items():
                marks = self._marks.get(tp)
                records = max(0, high_watermark - tiered)
                out[tp] = (records, now - marks[0][1] if records and marks else 0.0)
            return out


class TieringLagCollector(Collector):
    def __init__(self, lag: TieringLag) -> None:
        self._lag = lag

    def describe(self) -> list[GaugeMetricFamily]:
        return []  # collected at each scrape

    def collect(self) -> Iterator[GaugeMetricFamily]:
        labels = ["topic", "partition"]
        records = GaugeMetricFamily(
            "sparklog_lake_tiering_lag_records",
            "Records of a partition led here not yet in its Delta table (high watermark - table's next offset)",
            labels=labels,
        )
        seconds = GaugeMetricFamily(
            "sparklog_lake_tiering_lag_seconds",
            "How long the oldest record not yet in the partition's Delta table has waited (0: none waits)",
            labels=labels,
        )
        for (topic, p), (behind, waited) in sorted(self._lag.behind().items()):
            records.add_metric([topic, str(p)], behind)
            seconds.add_metric([topic, str(p)], waited)
        yield records
        yield seconds
