"""``spark.readStream.format("sparklog")``: offsets, admission control, availableNow, group commits.

Spark calls ``initialOffset``/``latestOffset``/``partitions``/``commit`` in one long-lived driver-side
Python process (this reader keeps its ZooKeeper session and the availableNow target there), and
``read`` in executor workers (see :mod:`sparklog.datasource.reader`).

**Group offsets.** With ``option("group", G)`` every finished micro-batch's end offsets are written
to ZooKeeper at ``consumers/G/offsets/<topic>/<partition>`` (the next offset to read, Kafka's
convention), so ``sparklog groups describe G`` shows the query's lag, and ``startingOffsets=group``
resumes from them. They are written from two places: ``commit(end)`` (Spark calls it for a batch
when it plans the following one) and ``latestOffset(start, ...)``, whose ``start`` is always the end
of the last batch Spark has finished and recorded in its commit log. Spark calls ``latestOffset``
once more after the last batch of a ``Trigger.AvailableNow`` run (to learn that nothing is left),
so that run's final batch is committed too, before the query terminates: no
``StreamingQueryListener`` is needed. (A query stopped with ``stop()`` between triggers commits its
last batch when it next starts.) Group commits are advisory: Spark's checkpoint stays the source of
truth for the query itself.

**Admission control** (Kafka's options). ``maxOffsetsPerTrigger`` (alias ``maxRecordsPerTrigger``)
caps a micro-batch; ``minOffsetsPerTrigger`` holds a micro-batch back until that many offsets wait or
``maxTriggerDelay`` (default 15m) passed since the last one, as Kafka's source does (its first
trigger is never held back). PySpark's read limits cannot be combined, so the default read limit is
``ReadMinRows`` or ``ReadMaxRows`` and this reader applies both options itself under any limit but
``ReadAllAvailable``. ``Trigger.AvailableNow`` honours the maximum, never the minimum (it would wait
for records that never come).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from sparklog.client.cluster_client import ClusterClient
from sparklog.datasource import connections, offsets
from sparklog.datasource.options import ReadOptions, check_stream_read
from sparklog.datasource.reader import check_schema, plan_partitions, read_partition
from sparklog.errors import InvalidRequest, SparklogError, UnknownTopic

log = logging.getLogger("sparklog.datasource")


class SparklogStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: ReadOptions, schema: StructType) -> None:
        check_stream_read(options)
        self.schema = check_schema(options, schema)
        self.options = options
        self._target: offsets.Offsets | None = None  # availableNow: where this run stops
        self._latest: offsets.Offsets | None = None
        self._committed: offsets.Offsets | None = None
        self._last_trigger_ms = 0.0  # minOffsetsPerTrigger: when the last micro-batch was admitted

    # The reader itself is pickled to executors for read(): only options and schema travel.
    def __getstate__(self) -> dict[str, Any]:
        return {
            "options": self.options,
            "schema": self.schema,
            "_target": None,
            "_latest": None,
            "_committed": None,
            "_last_trigger_ms": 0.0,
        }

    @property
    def client(self) -> ClusterClient:
        return connections.cluster_client(self.options.address)

    def _listed(self, tps: list[offsets.TP]) -> dict[offsets.TP, dict[str, Any]]:
        """list_offsets of every partition; partitions whose topic vanished are left out."""

        def one(tp: offsets.TP) -> dict[str, Any] | None:
            try:
                return self.client.list_offsets(*tp)
            except UnknownTopic:
                return None

        results = offsets.with_retries(self.options, "offsets", lambda: connections.parallel(one, tps))
        return {tp: r for tp, r in zip(tps, results, strict=True) if r is not None}

    def _listed_available(
        self, tps: list[offsets.TP]
    ) -> tuple[dict[offsets.TP, dict[str, Any]], dict[offsets.TP, SparklogError]]:
        """list_offsets of the partitions whose leaders answer (asked ``fetchOffset.numRetries``
        more times, ``fetchOffset.retryIntervalMs`` apart), and why each of the others did not
        (a retriable error: no leader, broker down). Partitions whose topic vanished are left out;
        any other error is raised."""
        listed, failed = self.client.list_offsets_once(tps)
        for _ in range(self.options.fetch_offset_retries):
            if not any(error.retriable for error in failed.values()):
                break
            time.sleep(self.options.fetch_offset_retry_interval_ms / 1000)
            again, failed = self.client.list_offsets_once([tp for tp, e in failed.items() if e.retriable])
            listed.update(again)
        for error in failed.values():
            if not error.retriable and not isinstance(error, UnknownTopic):
                raise error
        return listed, {tp: error for tp, error in failed.items() if error.retriable}

    # ------------------------------------------------------------------------------------------ offsets
    def initialOffset(self) -> dict:
        tps = offsets.discover(self.client, self.options.subscription)
        listed = self._listed(tps)
        begin = offsets.starting_offsets(self.client, self.options, listed, streaming=True)
        return offsets.to_json(begin)

    def getDefaultReadLimit(self) -> ReadLimit:
        low, high = self.options.min_records_per_trigger, self.options.max_records_per_trigger
        if low and not high:
            return ReadMinRows(low)
        return ReadMaxRows(high) if high else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        tps = offsets.discover(self.client, self.options.subscription)
        listed = self._listed(tps)
        self._target = {tp: int(info["high_watermark"]) for tp, info in listed.items()}

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        begin = offsets.from_json(start)
        self._commit_group(begin)  # `start` is the end of the last batch Spark finished
        tps = sorted(set(offsets.discover(self.client, self.options.subscription)) | set(begin))
        if self._target is not None:  # availableNow: nothing that arrived after the run began
            tps = [tp for tp in tps if tp in self._target or tp in begin]
        listed, unavailable = self._listed_available(tps)
        if unavailable:  # Kafka's consumers read on: these keep their position until they answer again
            log.warning(
                "sparklog: partitions %s cannot be read now (%s); this micro-batch reads the others",
                ", ".join(map(offsets.describe, sorted(unavailable))),
                next(iter(unavailable.values())),
            )
        missing = [tp for tp in begin if tp not in listed and tp not in unavailable]
        if missing:
            message = f"sparklog: partitions {', '.join(map(offsets.describe, missing))} no longer exist"
            if self.options.fail_on_data_loss:
                raise UnknownTopic(message + "; set failOnDataLoss=false to go on without them")
            log.warning("%s; going on without them (failOnDataLoss=false)", message)
        for tp in tps:
            if tp not in begin and tp in listed:  # a new partition (or topic): from its beginning
                begin[tp] = int(listed[tp]["log_start_offset"])
        known = {tp: off for tp, off in begin.items() if tp in listed}
        checked = offsets.check_data_loss(known, listed, self.options.fail_on_data_loss)
        latest = {tp: int(listed[tp]["high_watermark"]) for tp in known}
        self._latest = dict(latest)
        if self._target is not None:
            latest = {tp: min(latest[tp], self._target.get(tp, checked[tp])) for tp in latest}
        latest = {tp: max(latest[tp], checked[tp]) for tp in latest}
        if not isinstance(limit, ReadAllAvailable | ReadMaxRows | ReadMinRows):
            raise InvalidRequest(
                f"sparklog supports the read limits ReadMaxRows, ReadMinRows and ReadAllAvailable, not {limit!r}"
            )
        if not isinstance(limit, ReadAllAvailable):
            if self._hold_back(checked, latest):
                return start
            high = limit.max_rows if isinstance(limit, ReadMaxRows) else self.options.max_records_per_trigger
            if high:
                latest = offsets.limit_rows(checked, latest, high)
        # a start that data loss moved stays visible as the start of the next range (partitions()
        # reads from the log start); partitions that vanished keep their last position
        end = dict(begin)
        end.update(latest)
        return offsets.to_json(end)

    def _hold_back(self, begin: offsets.Offsets, latest: offsets.Offsets) -> bool:
        """minOffsetsPerTrigger: whether this trigger waits for more records (Kafka's rule: never
        once maxTriggerDelay has passed since the last admitted micro-batch, nor under availableNow)."""
        low = self.options.min_records_per_trigger
        now = time.time() * 1000
        if low is None or self._target is not None:
            return False
        if now - self._last_trigger_ms >= self.options.max_trigger_delay_ms:
            self._last_trigger_ms = now
            return False
        if offsets.waiting(begin, latest) < low:
            return True
        self._last_trigger_ms = now
        return False

    def reportLatestOffset(self) -> dict | None:
        return offsets.to_json(self._latest) if self._latest is not None else None

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        begin, stop = offsets.from_json(start), offsets.from_json(end)
        wanted = [tp for tp in stop if stop[tp] > begin.get(tp, -1)]
        if not wanted:
            return []
        listed = self._listed(wanted)
        for tp in wanted:
            if tp not in begin and tp in listed:
                begin[tp] = int(listed[tp]["log_start_offset"])
        known = {tp: begin[tp] for tp in wanted if tp in listed and tp in begin}
        checked = offsets.check_data_loss(known, listed, self.options.fail_on_data_loss)
        stop = {tp: stop[tp] for tp in known}
        return list(plan_partitions(self.options, self.schema, self.client, checked, stop))

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(partition)

    def commit(self, end: dict) -> None:
        self._commit_group(offsets.from_json(end))

    def stop(self) -> None:
        pass

    # ------------------------------------------------------------------------------------------ groups
    def _commit_group(self, position: offsets.Offsets) -> None:
        group = self.options.group
        if group is None or not position:
            return
        if self._committed is not None:
            changed = {tp: off for tp, off in position.items() if self._committed.get(tp) != off}
        else:
            changed = dict(position)
        if not changed:
            return
        try:
            self.client.view.commit_offsets(group, changed)
        except SparklogError as exc:  # advisory: the query's checkpoint is what counts
            log.warning("sparklog: could not commit offsets of group %s: %s", group, exc)
            return
        self._committed = {**(self._committed or {}), **changed}
