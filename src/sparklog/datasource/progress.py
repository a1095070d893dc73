"""Kafka's source lag metrics (``minOffsetsBehindLatest``, ``maxOffsetsBehindLatest``,
``avgOffsetsBehindLatest``) for sparklog streams, from a query's progress.

Spark's Kafka source puts these in each progress report's source ``metrics``. PySpark's Python
source API has no metrics hook, but the sparklog source reports the latest offsets it saw
(``reportLatestOffset``, shown as the source's ``latestOffset``), and a progress report also has the
batch's ``endOffset``. The gap between them, per partition, is Kafka's ``offsetsBehindLatest``:
:func:`offsets_behind_latest` computes it from one source progress, and
:class:`OffsetsBehindLatest` is a ``StreamingQueryListener`` that logs it for every progress report
and keeps the last values per query.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Mapping
from typing import Any

from pyspark.sql.streaming.listener import (
    QueryIdleEvent,
    QueryProgressEvent,
    QueryStartedEvent,
    QueryTerminatedEvent,
    StreamingQueryListener,
)

log = logging.getLogger("sparklog.datasource.progress")


def _offsets(raw: Any) -> dict[tuple[str, int], int] | None:
    if raw is None:
        return None
    data = json.loads(raw) if isinstance(raw, str) else raw
    if not isinstance(data, Mapping):
        return None
    try:
        return {(t, int(p)): int(o) for t, parts in data.items() for p, o in parts.items()}
    except (AttributeError, TypeError, ValueError):
        return None  # not a sparklog/Kafka offsets object


def offsets_behind_latest(source: Mapping[str, Any]) -> dict[str, float] | None:
    """Kafka's lag metrics from one source's progress (``query.lastProgress["sources"][i]``):
    per partition, the latest offset minus the batch's end offset; their minimum, maximum and
    average. None when the progress has no latest offsets."""
    latest, end = _offsets(source.get("latestOffset")), _offsets(source.get("endOffset"))
    if not latest or end is None:
        return None
    behind = [max(0, offset - end.get(tp, offset)) for tp, offset in latest.items()]
    return {
        "minOffsetsBehindLatest": float(min(behind)),
        "maxOffsetsBehindLatest": float(max(behind)),
        "avgOffsetsBehindLatest": sum(behind) / len(behind),
    }


class OffsetsBehindLatest(StreamingQueryListener):
    """Logs Kafka's lag metrics of every source with Kafka-style offsets (sparklog's, Kafka's) after
    each micro-batch, and keeps the last ones per query id (:meth:`metrics`).
    ``spark.streams.addListener(OffsetsBehindLatest())``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last: dict[str, list[dict[str, float]]] = {}

    def metrics(self, query_id: str) -> list[dict[str, float]]:
        """The last lag metrics of each such source of the query (in the query's source order)."""
        with self._lock:
            return list(self._last.get(str(query_id), []))

    def onQueryStarted(self, event: QueryStartedEvent) -> None:
        pass

    def onQueryProgress(self, event: QueryProgressEvent) -> None:
        progress = event.progress
        found = []
        for source in progress.sources:  # Spark names a Python source only by its class: go by its offsets
            metrics = offsets_behind_latest({"latestOffset": source.latestOffset, "endOffset": source.endOffset})
            if metrics is not None:
                found.append(metrics)
                log.info("sparklog query %s batch %d: %s", progress.id, progress.batchId, metrics)
        if found:
            with self._lock:
                self._last[str(progress.id)] = found

    def onQueryIdle(self, event: QueryIdleEvent) -> None:
        pass

    def onQueryTerminated(self, event: QueryTerminatedEvent) -> None:
        pass
