"""The Consumer: pulls record batches by offset from partition leaders, alone or in a group.

Without a group it reads every partition of its topics (or the ones given). With a group, kazoo's
``SetPartitioner`` recipe shares the partitions among the live members (each partition read by
exactly one member; a member that dies loses its ephemeral node and its partitions move), and
positions start from the offsets committed in ZooKeeper. Commits are explicit (``commit()``).
"""

from __future__ import annotations

import queue
import time
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.flight as flight
from kazoo.recipe.partitioner import SetPartitioner

from sparklog import fetch_columns, wire
from sparklog.client.cluster_client import DEFAULT_ZOOKEEPER, ClusterClient, fetch_connection
from sparklog.client.fetch_stream import FetchStream
from sparklog.errors import InvalidRequest, OffsetOutOfRange
from sparklog.schemas.codec import encode_avro
from sparklog.schemas.projection import parse_fields

TopicPartition = tuple[str, int]
OFFSET = 2  # the offset column of a polled batch (after topic and partition)
RESETS = ("earliest", "latest", "none")


class Record(NamedTuple):
    topic: str
    partition: int
    offset: int
    timestamp: Any
    key: bytes | None
    value: Any
    headers: list[tuple[str, bytes]] | None


class Consumer:
    """Reads topics as Arrow record batches (``poll_batches``) or records (``poll``).

    For typed topics values arrive as Arrow structs in the latest schema version (older records are
    evolved by the broker); ``fields`` (e.g. ``["user", "address.zip"]``) asks the broker for only
    those columns, and ``value_format="avro"`` gives Avro single-object encoded bytes instead.

    ``session_timeout_s`` is the ZooKeeper session: a member that dies is noticed (and its
    partitions reassigned) after about that long (ZooKeeper enforces at least 2 ticks, 4 s by default).
    A fetch that fails with a retriable error (leader moved, broker down) is retried for up to
    ``retry_timeout_s``.

    Each assigned partition has one fetch open at its leader, which sends new records as they are
    appended (:mod:`sparklog.client.fetch_stream`); ``max_bytes`` bounds both one response and how
    far a partition is read ahead of ``poll_batches``; ``max_wait_ms`` is how long an open fetch
    waits for new records before it is renewed.
    """

    def __init__(
        self,
        topics: str | Iterable[str],
        group: str | None = None,
        zookeeper: str = DEFAULT_ZOOKEEPER,
        auto_offset_reset: str = "latest",
        partitions: Iterable[int] | None = None,
        max_bytes: int = 8 << 20,
        max_wait_ms: int = 500,
        session_timeout_s: float = 10.0,
        retry_timeout_s: float = 30.0,
        fields: str | Sequence[str] | None = None,
        value_format: str = "arrow",
    ) -> None:
        if auto_offset_reset not in RESETS:
            raise InvalidRequest(f"auto_offset_reset must be one of {', '.join(RESETS)}, got {auto_offset_reset!r}")
        self.topics = [topics] if isinstance(topics, str) else list(topics)
        if not self.topics:
            raise InvalidRequest("a consumer needs at least one topic")
        if value_format not in ("arrow", "avro"):
            raise InvalidRequest(f"value_format must be 'arrow' or 'avro', got {value_format!r}")
        self.fields = parse_fields(fields) if fields else None
        if self.fields and value_format == "avro":
            raise InvalidRequest("value_format='avro' returns whole values: it cannot be combined with fields")
        self.value_format = value_format
        self.group = group
        self.auto_offset_reset = auto_offset_reset
        self.max_bytes = max_bytes
        self.max_wait_ms = max_wait_ms
        self._client = ClusterClient(zookeeper, session_timeout_s=session_timeout_s, retry_timeout_s=retry_timeout_s)
        self._positions: dict[TopicPartition, int] = {}
        self._assigned: list[TopicPartition] = []
        self._partition_columns = _PartitionColumns()
        self._restorer = fetch_columns.Restorer()
        self._fetches: dict[TopicPartition, FetchStream] = {}  # each assigned partition's open fetch
        self._results: queue.SimpleQueue[tuple[FetchStream, pa.RecordBatch | None]] = queue.SimpleQueue()
        self._failed: BaseException | None = None  # a fetch's error, raised by the next poll
        self._partitioner: SetPartitioner | None = None
        all_partitions = [
            (t, p)
            for t in self.topics
            for p in range(self._client.topic(t).partitions)
            if partitions is None or p in set(partitions)
        ]
        if group is None:
            self._assign(all_partitions)
        else:
            path = f"{self._client.cluster.layout.group(group)}/partitioner/{'+'.join(sorted(self.topics))}"
            self._partitioner = SetPartitioner(
                self._client.cluster.zk,
                path,
                [f"{t}:{p}" for t, p in all_partitions],
                time_boundary=0.5,
            )
            self._follow_group(wait=True)

    # ----------------------------------------------------------------- assignment
    def _follow_group(self, wait: bool = False) -> None:
        part = self._partitioner
        if part is None:
            return
        if part.failed:
            raise InvalidRequest(f"lost membership of group {self.group!r}")
        if part.release:
            self._assigned, self._positions = [], {}
            self._cancel_fetches()
            part.release_set()
        if part.allocating:
            if not wait and not self._assigned:
                part.wait_for_acquire(timeout=0.5)
            elif wait:
                part.wait_for_acquire(timeout=30)
        if part.acquired and not self._assigned:
            owned = []
            for item in part:
                topic, p = str(item).rsplit(":", 1)
                owned.append((topic, int(p)))
            self._assign(owned)

    def _assign(self, partitions: list[TopicPartition]) -> None:
        self._assigned = sorted(partitions)
        committed = self._client.cluster.committed_offsets(self.group) if self.group else {}
        for tp in self._assigned:
            if tp in committed:
                self._positions[tp] = committed[tp]
            else:
                self._positions[tp] = self._reset_position(tp)

    def _reset_position(self, tp: TopicPartition) -> int:
        if self.auto_offset_reset == "none":
            raise OffsetOutOfRange(f"no committed offset for {tp[0]}-{tp[1]} and auto_offset_reset=none")
        offsets = self._client.list_offsets(*tp)
        return offsets["log_start_offset"] if self.auto_offset_reset == "earliest" else offsets["high_watermark"]

    def assignment(self) -> list[TopicPartition]:
        """The (topic, partition) pairs this consumer reads now."""
        self._follow_group()
        return list(self._assigned)

    # ----------------------------------------------------------------- fetching
    def _ticket(self, topic: str, partition: int, offset: int) -> flight.Ticket:
        return flight.Ticket(
            wire.encode(
                {
                    "topic": topic,
                    "partition": partition,
                    "offset": offset,
                    "max_bytes": self.max_bytes,
                    "max_wait_ms": self.max_wait_ms,
                    "compact": True,  # columns with nothing in them travel empty (sparklog.fetch_columns)
                    "follow": True,  # the stream stays open for later records (broker.fetch_follower)
                    **({"fields": self.fields} if self.fields else {}),
                }
            )
        )

    def _open_fetch(self, tp: TopicPartition) -> FetchStream:
        topic, partition = tp
        return FetchStream(
            tp,
            self._positions[tp],
            lambda offset: self._ticket(topic, partition, offset),
            self._restorer,
            self._partition_columns,
            lambda request: self._client.call_leader(topic, partition, request, connection=fetch_connection(partition)),
            self._results,
            self.max_bytes,
        )

    def poll_batches(self, timeout: float = 1.0) -> list[pa.RecordBatch]:
        """Record batches from the current positions (columns ``topic``, ``partition``, ``offset``,
        ``timestamp``, ``key``, ``value``, ``headers``), waiting up to ``timeout`` s for new data;
        positions move past what is returned.

        Every assigned partition always has a fetch open at its leader (a stream that the broker
        keeps sending new records on), read ahead on its own thread by up to ``max_bytes``, so new
        records are returned as soon as any partition has them.
        """
        self._follow_group()
        if self._failed is not None:
            failed, self._failed = self._failed, None
            raise failed
        deadline = time.monotonic() + timeout
        out: list[pa.RecordBatch] = []
        while True:
            for tp in self._assigned:
                if tp not in self._fetches:
                    self._fetches[tp] = self._open_fetch(tp)
            remaining = deadline - time.monotonic()
            try:  # wait for the first batch only; then take what is there
                if remaining > 0 and not out:
                    fetch, batch = self._results.get(timeout=remaining)
                else:
                    fetch, batch = self._results.get_nowait()
            except queue.Empty:
                return out
            if batch is not None:
                fetch.taken(batch)
            if self._fetches.get(fetch.tp) is not fetch:
                continue  # a seek or reassignment replaced this fetch: drop what it read
            if batch is None:
                del self._fetches[fetch.tp]
                if fetch.error is not None:
                    if out:  # the batches read before it are returned first
                        self._failed = fetch.error
                        return out
                    raise fetch.error
                continue
            position = self._positions[fetch.tp]
            batch = self._trim(batch, position)
            if batch.num_rows:
                if self.value_format == "avro":
                    batch = self._as_avro(fetch.tp[0], batch)
                out.append(batch)
                self._positions[fetch.tp] = batch.column(OFFSET)[-1].as_py() + 1

    def _cancel_fetches(self) -> None:
        for fetch in self._fetches.values():
            fetch.cancel()
        self._fetches = {}

    def _as_avro(self, topic: str, batch: pa.RecordBatch) -> pa.RecordBatch:
        """Values of a typed topic as Avro single-object encoded bytes (for existing Avro tooling)."""
        schema = self._client.value_schema(topic)
        if schema is None:
            return batch
        i = batch.schema.get_field_index("value")
        return batch.set_column(i, pa.field("value", pa.binary()), encode_avro(batch.column(i), schema))

    @staticmethod
    def _trim(batch: pa.RecordBatch, position: int) -> pa.RecordBatch:
        first = batch.column(OFFSET)[0].as_py() if batch.num_rows else position
        if first >= position:
            return batch
        return batch.filter(pc.greater_equal(batch.column(OFFSET), position))

    def poll(self, timeout: float = 1.0) -> list[Record]:
        """Like ``poll_batches`` but as :class:`Record` tuples (convenient, not the fast path)."""
        out = []
        for batch in self.poll_batches(timeout):
            for row in batch.to_pylist():
                headers = [(h["key"], h["value"]) for h in row["headers"]] if row["headers"] else None
                out.append(
                    Record(
                        row["topic"],
                        row["partition"],
                        row["offset"],
                        row["timestamp"],
                        row["key"],
                        row["value"],
                        headers,
                    )
                )
        return out

    # ----------------------------------------------------------------- positions
    def _tp(self, partition: int, topic: str | None) -> TopicPartition:
        tp = (topic or self.topics[0], partition)
        if tp not in self._positions:
            raise InvalidRequest(f"{tp[0]}-{tp[1]} is not assigned to this consumer")
        return tp

    def position(self, partition: int, topic: str | None = None) -> int:
        """The offset of the next record this consumer will read from the partition."""
        return self._positions[self._tp(partition, topic)]

    def seek(self, partition: int, offset: int, topic: str | None = None) -> None:
        if offset < 0:
            raise InvalidRequest(f"offset must be >= 0, got {offset}")
        self._move(self._tp(partition, topic), offset)

    def _move(self, tp: TopicPartition, offset: int) -> None:
        """A new position; the fetch open from the old one is cancelled (what it read is dropped),
        so the next poll fetches from here at once."""
        self._positions[tp] = offset
        fetch = self._fetches.pop(tp, None)
        if fetch is not None:
            fetch.cancel()

    def seek_to_beginning(self) -> None:
        for tp in self._assigned:
            self._move(tp, self._client.list_offsets(*tp)["log_start_offset"])

    def seek_to_end(self) -> None:
        for tp in self._assigned:
            self._move(tp, self._client.list_offsets(*tp)["high_watermark"])

    def seek_to_time(self, timestamp_ms: int) -> None:
        """Every assigned partition to its first record at or after the time (its end if none)."""
        for tp in self._assigned:
            offsets = self._client.list_offsets(*tp, timestamp=timestamp_ms)
            found = offsets.get("offset_for_time")
            self._move(tp, offsets["high_watermark"] if found is None else found)

    def commit(self, offsets: dict[TopicPartition, int] | None = None) -> None:
        """Commit the current positions (or the given offsets) of the group to ZooKeeper."""
        if self.group is None:
            raise InvalidRequest("commit() needs a consumer group (group=...)")
        self._client.cluster.commit_offsets(self.group, offsets if offsets is not None else dict(self._positions))

    def committed(self) -> dict[TopicPartition, int]:
        return self._client.cluster.committed_offsets(self.group) if self.group else {}

    def close(self) -> None:
        self._assigned = []
        if self._partitioner is not None:
            self._partitioner.finish()
            self._partitioner = None
        fetches = list(self._fetches.values())
        self._cancel_fetches()
        for fetch in fetches:
            fetch.join(5.0)
        self._client.close()

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _PartitionColumns:
    """The ``topic`` (dictionary-encoded: one string, not one per row) and ``partition`` columns
    put in front of fetched batches. Both are constant per partition, so they are built once
    (grown when a longer batch comes) and sliced for each batch: no per-batch allocation."""

    FIELDS = (pa.field("topic", pa.dictionary(pa.int32(), pa.string())), pa.field("partition", pa.int32()))

    def __init__(self) -> None:
        self._columns: dict[TopicPartition, tuple[pa.Array, pa.Array]] = {}

    def __call__(self, tp: TopicPartition, n: int) -> list[pa.Array]:
        """The ``topic`` and ``partition`` columns of ``n`` rows of ``tp``."""
        columns = self._columns.get(tp)
        if columns is None or len(columns[0]) < n:
            size = max(n, 2 * len(columns[0]) if columns else 0)
            topic = pa.DictionaryArray.from_arrays(
                pa.array(np.zeros(size, dtype=np.int32)), pa.array([tp[0]], pa.string())
            )
            columns = self._columns[tp] = (topic, pa.array(np.full(size, tp[1], dtype=np.int32)))
        topic, partition = columns
        return [topic.slice(0, n), partition.slice(0, n)]
