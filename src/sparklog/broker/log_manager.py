"""The partition logs a broker holds: one directory ``<topic>-<partition>`` each under its data dir."""

from __future__ import annotations

import concurrent.futures
import shutil
import threading
import weakref
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from sparklog.broker.log import PartitionLog, compact
from sparklog.broker.log.producer_state import DEFAULT_PRODUCER_ID_EXPIRATION_MS
from sparklog.broker.log.segment import DEFAULT_SEGMENT_IDLE_S, SEGMENT_CACHE
from sparklog.config import TopicConfig
from sparklog.records import versioned_schema

if TYPE_CHECKING:
    from sparklog.schemas.value_schema import ValueSchema

CLOSE_THREADS = 8


class LogManager:
    """Opens partition logs on first use (recovering them if the broker died), keeps them open,
    applies retention and compaction, and closes them cleanly on shutdown.

    ``producer_id_expiration_ms`` is Kafka's ``producer.id.expiration.ms``: the maintenance pass
    forgets a producer id that has not written to a partition for that long (a producer that comes
    back later is treated as new). ``segment_idle_s``: the pass also drops the memory maps and loaded
    indexes of the non-active segments not read for that long (they load again on the next read;
    such segments hold no open file in any case, see ``segment.py``).
    """

    def __init__(
        self,
        data_dir: str | Path,
        producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS,
        segment_idle_s: float = DEFAULT_SEGMENT_IDLE_S,
        on_flush: Callable[[float], None] | None = None,
    ) -> None:
        """``on_flush(seconds)``: told how long each log's flush took (the broker's metrics)."""
        self.on_flush = on_flush
        if producer_id_expiration_ms < 1:
            raise ValueError(f"producer_id_expiration_ms must be >= 1, got {producer_id_expiration_ms}")
        self.data_dir = Path(data_dir)
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self.segment_idle_s = segment_idle_s
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._logs: dict[tuple[str, int], PartitionLog] = {}
        self._lock = threading.Lock()
        # after a compaction pass: the log's (start, end, config) then, and when a kept tombstone expires
        self._compacted: weakref.WeakKeyDictionary[PartitionLog, tuple[tuple[int, int, TopicConfig], int | None]] = (
            weakref.WeakKeyDictionary()
        )

    def directory(self, topic: str, partition: int) -> Path:
        return self.data_dir / f"{topic}-{partition}"

    def get(
        self, topic: str, partition: int, config: TopicConfig, value_schemas: Sequence[ValueSchema] = ()
    ) -> PartitionLog:
        """The open log of a partition, opened (and recovered if needed) on first use. A typed
        topic's ``value_schemas`` (oldest first) give the stored types."""
        key = (topic, partition)
        log = self._logs.get(key)
        if log is not None:
            if log.config != config:
                log.config = config
            return log
        with self._lock:
            log = self._logs.get(key)
            if log is None:
                if value_schemas:
                    latest = value_schemas[-1]
                    older = [versioned_schema(v.arrow_type, v.version) for v in value_schemas[:-1]]
                    log = PartitionLog(
                        self.directory(topic, partition),
                        config,
                        value_type=latest.arrow_type,
                        schema_version=latest.version,
                        older_schemas=older,
                        on_flush=self.on_flush,
                    )
                else:
                    log = PartitionLog(self.directory(topic, partition), config, on_flush=self.on_flush)
                self._logs[key] = log
            return log

    def set_value_schemas(self, topic: str, value_schemas: Sequence[ValueSchema]) -> None:
        """A typed topic got a new schema version: its open logs take it for new appends."""
        if not value_schemas:
            return
        latest = value_schemas[-1]
        for (name, _p), log in list(self._logs.items()):
            if name == topic:
                log.set_value_type(latest.arrow_type, latest.version)

    def open_logs(self) -> dict[tuple[str, int], PartitionLog]:
        return dict(self._logs)

    def delete_topic(self, topic: str) -> None:
        """Close and remove every local partition of ``topic``."""
        with self._lock:
            for key in [k for k in self._logs if k[0] == topic]:
                self._logs.pop(key).close()
            for path in self.data_dir.glob(f"{topic}-*"):
                suffix = path.name[len(topic) + 1 :]
                if suffix.isdigit():
                    shutil.rmtree(path, ignore_errors=True)

    def delete_partition(self, topic: str, partition: int) -> None:
        """Close and remove one local partition."""
        with self._lock:
            log = self._logs.pop((topic, partition), None)
        if log is not None:
            log.close()
        shutil.rmtree(self.directory(topic, partition), ignore_errors=True)

    def maintain(self) -> None:
        """One pass of retention, compaction, producer id expiration and time-based flushing over
        the open logs, then idle segments drop their memory maps."""
        for log in list(self._logs.values()):
            if log.closed:
                continue
            self.expire_producers(log)
            log.apply_retention()
            if log.config.compacted:
                self._compact(log)
            if log.config.flush_ms >= 0 and log.clock() - log.last_flush_ms >= log.config.flush_ms:
                log.flush()
        SEGMENT_CACHE.release_idle(self.segment_idle_s)

    def _compact(self, log: PartitionLog) -> None:
        """Compact, unless nothing was appended, truncated or deleted since the last pass and no
        tombstone it kept has expired since: then the pass would read the whole log to change
        nothing (an idle compacted partition costs a comparison)."""
        extent = (log.log_start_offset, log.log_end_offset, log.config)
        last = self._compacted.get(log)
        if last is not None and last[0] == extent and (last[1] is None or log.clock() < last[1]):
            return
        result = compact(log)
        self._compacted[log] = ((log.log_start_offset, log.log_end_offset, log.config), result.tombstones_due_ms)

    def expire_producers(self, log: PartitionLog) -> int:
        """Forget the producer ids idle for ``producer_id_expiration_ms`` by the log's clock."""
        with log.lock:
            return log.producers.remove_expired(log.clock(), self.producer_id_expiration_ms)

    def close(self) -> None:
        """Close every log (their fsyncs several at a time: a shutdown with thousands of written
        partitions waits on the disk, not on Python)."""
        with self._lock:
            logs = list(self._logs.values())
            with concurrent.futures.ThreadPoolExecutor(CLOSE_THREADS, thread_name_prefix="sparklog-close") as pool:
                for future in [pool.submit(log.close) for log in logs]:
                    future.result()
            self._logs.clear()
