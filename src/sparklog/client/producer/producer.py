"""The Producer: per-record ``send()`` batched in the background, and columnar ``send_batch()``.

Records given to ``send()`` gather per topic (:mod:`record_accumulator`) until their linger is over
or a batch is full; then a whole column at a time they are partitioned (:mod:`row_routing`: stable
key hash, explicit partition, or sticky batches for unkeyed records) and cut into wire batches
(:mod:`produce_batch`) queued per partition. ``send_batch()`` tables take the same path at once.
One sender thread (:mod:`sender`) sends every broker the batches of all the partitions it leads in
one request at a time, over one stream per broker (:mod:`broker_stream`).
"""

from __future__ import annotations

import concurrent.futures
import operator
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from time import time_ns
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from sparklog.client.client_metrics import PRODUCER_PREFIX, ProducerMetrics, default_client_id, register
from sparklog.client.cluster_address import resolve
from sparklog.client.cluster_client import DEFAULT_ZOOKEEPER, ClusterClient
from sparklog.client.producer.broker_stream import BrokerProduceStream
from sparklog.client.producer.futures import BatchMetadata, GroupOutcome, ProduceFuture
from sparklog.client.producer.produce_batch import PartitionRows, wire_batches
from sparklog.client.producer.record_accumulator import TopicRecords
from sparklog.client.producer.row_routing import RowRouter, place, rows_by_partition, take_rows
from sparklog.client.producer.sender import Sender
from sparklog.coordination.cluster import BrokerInfo
from sparklog.errors import InvalidConfig, InvalidRecord, InvalidRequest
from sparklog.partitioner_names import partitioner_name
from sparklog.records import HEADER_TYPE, wire_batch_of_rows
from sparklog.schemas.codec import decode_avro
from sparklog.schemas.value_schema import ValueSchema

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

ACKS = ("0", "1", "all")
PARTITIONER_SETTING = "partitioner"  # librdkafka's name; the one producer setting ``config`` takes beyond the client's
IN_FLIGHT_WAIT_S = 0.05  # how long the linger thread waits for groups in flight before taking the next


class Producer:
    """Sends records to topics. Use as a context manager, or call ``close()``.

    ``acks``: ``0`` (fire and forget), ``1`` (the leader appended), ``all`` (every in-sync replica
    has it). ``linger_ms`` and ``batch_records``/``batch_bytes`` decide when ``send()`` records leave.
    A batch is retried (new leader, broker back, enough replicas again) for up to
    ``delivery_timeout_s`` before its error is raised; each request waits at most
    ``request_timeout_s`` for its acknowledgement (never past the delivery timeout), so a frozen
    leader is given up on and the batch goes to the next leader.

    The producer is idempotent: it numbers the records it sends to each partition under a random
    producer id, so when it retries a batch after a lost acknowledgement or a leader change the
    leader recognises the batch and does not append it twice. The batches of all the partitions a
    broker leads travel to it together; partitions never wait for each other's retries.

    The cluster is found through ``bootstrap_servers`` (``host:port,...``, or
    ``config={"bootstrap.servers": ...}``): brokers only, no ZooKeeper session; else through
    ``zookeeper``.

    Keyed records go to the partition the topic's partitioner picks (its config ``partitioner``:
    ``murmur2``, Kafka's, for topics created since it existed; ``fnv1a`` for older ones, see
    :mod:`sparklog.client.partitioner`). ``partitioner`` (or ``config={"partitioner": ...}``,
    librdkafka's setting: ``murmur2_random``, ``murmur2``, ``fnv1a``, ``fnv1a_random``) overrides it
    for every topic this producer writes.

    ``metrics()`` gives its figures by Kafka's names; with ``metrics_registry`` (a
    ``prometheus_client`` registry) they are collected there too, labelled ``client_id``
    (default ``producer-N``), until ``close()``.
    """

    def __init__(
        self,
        zookeeper: str = DEFAULT_ZOOKEEPER,
        acks: str | int = "1",
        linger_ms: float = 5.0,
        batch_records: int = 10_000,
        batch_bytes: int = 4 << 20,
        retries: int | None = None,
        delivery_timeout_s: float = 30.0,
        request_timeout_s: float = 30.0,
        *,
        bootstrap_servers: str | None = None,
        config: Mapping[str, Any] | None = None,
        partitioner: str | None = None,
        client_id: str | None = None,
        metrics_registry: CollectorRegistry | None = None,
    ) -> None:
        settings = dict(config or {})
        configured = settings.pop(PARTITIONER_SETTING, None)
        if configured is not None and partitioner is not None and str(configured) != partitioner:
            raise InvalidConfig(
                f"partitioner={partitioner!r} and config['{PARTITIONER_SETTING}']={configured!r} contradict"
            )
        chosen = partitioner if partitioner is not None else configured
        # None: each topic's own partitioner
        self.partitioner = None if chosen is None else partitioner_name(chosen, PARTITIONER_SETTING)
        address = resolve(zookeeper, bootstrap_servers, settings)
        acks = "all" if str(acks) in ("all", "-1") else str(acks)
        if acks not in ACKS:
            raise InvalidRequest(f"acks must be 0, 1 or all, got {acks!r}")
        self.acks = acks
        self.linger_s = linger_ms / 1000
        self.batch_records = batch_records
        self.batch_bytes = batch_bytes
        self.delivery_timeout_s = delivery_timeout_s
        self.request_timeout_s = request_timeout_s
        self._client = ClusterClient.connect(address, retries=retries, retry_timeout_s=delivery_timeout_s)
        self._router = RowRouter(batch_records)
        client = self._client

        def open_stream(broker: BrokerInfo, value_type: pa.DataType, answers: Any) -> BrokerProduceStream:
            return BrokerProduceStream(client.flight(broker), broker, value_type, acks, answers)

        self.client_id = client_id or default_client_id("producer")
        self._metrics = ProducerMetrics()
        self._sender = Sender(
            client,
            open_stream,
            acks,
            request_timeout_s,
            delivery_timeout_s,
            retries,
            batch_records,
            batch_bytes,
            metrics=self._metrics,
        )
        self._registry = metrics_registry
        self._collector = register(metrics_registry, PRODUCER_PREFIX, self.client_id, self._metrics)
        self._in_flight: set[GroupOutcome] = set()  # groups taken by the linger thread, not yet acknowledged
        self._batches_in_flight: dict[concurrent.futures.Future[list[BatchMetadata]], None] = {}  # send_batch_async
        self._pending: dict[str, TopicRecords] = {}  # each topic's group still filling
        # full groups of unkeyed records, oldest first: they leave as soon as the linger thread
        # takes them (unkeyed rows go to one partition ``batch_records`` at a time, so a full group
        # is a full batch; kept small, it converts into memory the allocator has warm, where a group
        # left to grow while others are in flight went into freshly faulted pages)
        self._full: list[TopicRecords] = []
        self._lock = threading.Lock()  # guards the accumulators (a plain lock: send() is the hot path)
        self._wake = threading.Event()  # tells the linger thread to look at the accumulators
        self._closed = False
        self._linger = threading.Thread(target=self._run_linger, name="sparklog-producer", daemon=True)
        self._linger.start()

    def threads(self) -> int:
        """The threads this producer runs now: its linger thread and the sender's."""
        return 1 + self._sender.threads()

    # ----------------------------------------------------------------- per-record path
    def send(
        self,
        topic: str,
        value: bytes | None = None,
        key: bytes | None = None,
        headers: Mapping[str, bytes] | None = None,
        partition: int | None = None,
        timestamp: int | None = None,
    ) -> ProduceFuture:
        """Queue one record; the returned future resolves to its (topic, partition, offset). A value
        a typed topic's schema refuses fails its own future (:class:`InvalidRecord`), not those of
        the records sent with it."""
        if self._closed:
            raise InvalidRequest("the producer is closed")
        if partition is not None and partition < 0:
            raise InvalidRequest(f"partition must be >= 0, got {partition}")
        if timestamp is None:
            timestamp = time_ns() // 1_000_000
        lock = self._lock
        lock.acquire()  # cheaper than ``with`` on this path, which runs once per record
        try:
            acc = self._pending.get(topic)
            if acc is None:
                acc = self._pending[topic] = TopicRecords(topic)
            values = acc.values
            values.append(value)
            acc.timestamps.append(timestamp)
            if acc.rare or key is not None or headers is not None or partition is not None:
                acc.add_rare(key, headers, partition)
            n = len(values)
            if value:
                acc.bytes += len(value)
            full = n >= self.batch_records or acc.bytes >= self.batch_bytes
            if full and acc.keys is None and acc.partitions is None:  # the next record starts a new group
                del self._pending[topic]
                self._full.append(acc)
        finally:
            lock.release()
        # a new group starts its linger, or one must leave now; is_set() first: Event.set() costs
        # a Condition round every call
        if (n == 1 or full or not self.linger_s) and not self._wake.is_set():
            self._wake.set()
        return ProduceFuture((acc.outcome, n - 1))

    def _run_linger(self) -> None:
        while True:
            self._await_in_flight()
            with self._lock:
                ready = self._take(all_=self._closed)
                oldest = min((a.since for a in self._pending.values()), default=None)
                closed = self._closed
            for acc in ready:
                self._dispatch_accumulated(acc)
            if closed and not ready:
                return
            if ready:
                continue
            # sleep until the oldest group's linger is over, or until send()/flush()/close() wakes us
            timeout = None if oldest is None else max(0.0, oldest + self.linger_s - time.monotonic())
            self._wake.wait(timeout)
            self._wake.clear()

    def _await_in_flight(self) -> None:
        """Let the groups in flight be acknowledged before the next group leaves, so that records
        arriving meanwhile go out together (a group per round trip, not a tiny group per record);
        not when a full group of unkeyed records is waiting (it leaves as it is). Bounded by
        ``IN_FLIGHT_WAIT_S``: a partition whose leader hangs delays the others' records by that
        much at most, it never holds them up."""
        with self._lock:
            if self._full:
                return
            waiting = list(self._in_flight)
        until = time.monotonic() + IN_FLIGHT_WAIT_S
        for outcome in waiting:
            if not outcome.done.wait(max(0.0, until - time.monotonic())):
                return

    def _take(self, all_: bool) -> list[TopicRecords]:
        """The full unkeyed groups, then the filling ones that are full or whose linger is over
        (``all_``: every one)."""
        now = time.monotonic()
        # a full group of keyed records is spread over the partitions: it fills while the groups
        # before it are in flight (bigger batches per partition), then it leaves
        due = [
            a
            for a in self._pending.values()
            if all_
            or len(a.values) >= self.batch_records
            or a.bytes >= self.batch_bytes
            or now - a.since >= self.linger_s
        ]
        for acc in due:
            del self._pending[acc.topic]
        ready, self._full = self._full + due, []
        return ready

    def _dispatch_accumulated(self, acc: TopicRecords) -> None:
        """Queue a group's rows on their partitions; its futures resolve once every partition has
        answered (the linger thread goes on with the next group at once)."""
        outcome = acc.outcome
        with self._lock:
            self._in_flight.add(outcome)
        try:
            value, kept, outcome.record_errors = self._value_column_of(acc.topic, acc.values)
            timestamps, keys, headers, partitions = acc.timestamps, acc.keys, acc.headers, acc.partitions
            total = len(acc.values)
            if kept is not None:  # records the topic's schema refused fail alone; the others go
                timestamps = [timestamps[i] for i in kept]
                keys, headers, partitions = (_pick(c, kept) for c in (keys, headers, partitions))
                if not kept:
                    outcome.partitions = outcome.offsets = np.full(total, -1, dtype=np.int64)
                    self._finished(outcome)
                    return
            header_column = None
            if headers is not None and headers.count(None) != len(headers):
                header_column = pa.array(
                    [None if not h else [{"key": k, "value": v} for k, v in h.items()] for h in headers],
                    HEADER_TYPE,
                )
            batch = wire_batch_of_rows(timestamps, keys, value, header_column)
            explicit = None
            if partitions is not None and partitions.count(None) != len(partitions):
                explicit = np.array([-1 if p is None else p for p in partitions], dtype=np.int64)
            deadline = acc.created + self.delivery_timeout_s
            rows = batch.num_rows

            def all_done(sends: list[PartitionRows], parts: np.ndarray) -> None:
                offsets, outcome.partition_errors = _collect(rows, sends)
                if kept is not None:  # back to the rows of the whole group (-1: refused)
                    parts, offsets = _spread(parts, kept, total), _spread(offsets, kept, total)
                outcome.partitions, outcome.offsets = parts, offsets
                self._finished(outcome)

            self._dispatch(acc.topic, pa.Table.from_batches([batch]), explicit, deadline, all_done)
        except BaseException as exc:  # every waiting future learns the failure
            outcome.error = exc
            self._finished(outcome)

    def _finished(self, outcome: GroupOutcome) -> None:
        with self._lock:
            self._in_flight.discard(outcome)
        outcome.done.set()

    # ----------------------------------------------------------------- columnar path
    def send_batch(
        self, topic: str, data: pa.Table | pa.RecordBatch | Mapping[str, Any], partition: int | None = None
    ) -> list[BatchMetadata]:
        """Send a whole Arrow table (columns ``value`` and optional ``key``, ``timestamp``,
        ``headers``) and wait for the acknowledgements; returns where each slice landed."""
        return self.send_batch_async(topic, data, partition).result()

    def send_batch_async(
        self, topic: str, data: pa.Table | pa.RecordBatch | Mapping[str, Any], partition: int | None = None
    ) -> concurrent.futures.Future[list[BatchMetadata]]:
        """Like :meth:`send_batch`, but returns at once with a future of its result (it raises the
        first failed partition's error; the other partitions' rows are stored regardless). Tables
        sent one after the other reach each partition in that order; while one is acknowledged
        the next is on its way, as Kafka's producer keeps several requests in flight."""
        if partition is not None:
            partition = operator.index(partition)  # numpy integers too
            if partition < 0:
                raise InvalidRequest(f"partition must be >= 0, got {partition}")
        self._flush_records()  # records given to send() before this table go first
        deadline = time.monotonic() + self.delivery_timeout_s
        if isinstance(data, Mapping):
            columns = dict(data)
            if "value" in columns and isinstance(columns["value"], list | tuple):
                columns["value"] = self._value_column(topic, columns["value"])
            data = pa.table(columns)
        if isinstance(data, pa.RecordBatch):
            data = pa.Table.from_batches([data])
        result: concurrent.futures.Future[list[BatchMetadata]] = concurrent.futures.Future()

        def all_done(sends: list[PartitionRows], _parts: np.ndarray | None) -> None:
            with self._lock:
                self._batches_in_flight.pop(result, None)
            errors = [s.error for s in sends if s.error is not None]
            if errors:  # every other partition was sent; report the first failure
                result.set_exception(errors[0])
            else:
                result.set_result(
                    [BatchMetadata(topic, s.partition, int(s.offsets.min()), int(s.offsets.max())) for s in sends]
                )

        with self._lock:
            self._batches_in_flight[result] = None
        try:
            self._dispatch(topic, data, partition, deadline, all_done)
        except BaseException:
            with self._lock:
                self._batches_in_flight.pop(result, None)
            raise
        return result

    def _value_column(self, topic: str, values: Sequence[Any]) -> pa.Array:
        """Python values as the topic's value column: bytes for a plain topic; for a typed topic dicts
        (checked against the schema) or Avro single-object encoded bytes (decoded)."""
        schema = self._client.value_schema(topic)
        if schema is None:
            return pa.array(values, pa.binary())
        if all(v is None or isinstance(v, Mapping) for v in values):
            return schema.from_pylist(values)
        if all(v is None or isinstance(v, bytes | bytearray | memoryview) for v in values):
            return decode_avro(pa.array(values, pa.binary()), schema, lookup=self._client.schema_lookup(topic))
        raise InvalidRecord(f"values of typed topic {topic!r} must be dicts or Avro-encoded bytes, not a mix")

    def _value_column_of(
        self, topic: str, values: Sequence[Any]
    ) -> tuple[pa.Array, list[int] | None, dict[int, BaseException]]:
        """The value column of a group of ``send()`` records. When a typed topic's schema refuses
        some of them (Kafka's serializer fails such a record alone, in ``send()``), the column of
        the others, their rows (None: every row) and each refused row's error, found by halving
        the rows that fail (a bad record costs a few columnar conversions, never one per row)."""
        try:
            return self._value_column(topic, values), None, {}
        except InvalidRecord:
            if len(values) == 1 or self._client.value_schema(topic) is None:
                raise
        kept: list[int] = []
        columns: list[pa.Array] = []
        refused: dict[int, BaseException] = {}
        spans = [(0, len(values) // 2), (len(values) // 2, len(values))]
        while spans:
            start, end = spans.pop(0)
            try:
                columns.append(self._value_column(topic, values[start:end]))
            except InvalidRecord as exc:
                if end - start == 1:
                    refused[start] = InvalidRecord(_one_record(str(exc)))
                else:
                    middle = (start + end) // 2
                    spans[:0] = [(start, middle), (middle, end)]
                continue
            kept.extend(range(start, end))
        value = pa.concat_arrays(columns) if columns else pa.array([], pa.binary())
        return value, kept, refused

    def _typed(self, topic: str, table: pa.Table) -> tuple[pa.Table, ValueSchema | None]:
        """A typed topic's table with its value column in the latest schema's type."""
        schema = self._client.value_schema(topic)
        if schema is None or "value" not in table.column_names:
            return table, schema
        value = table.column("value").combine_chunks()
        if pa.types.is_binary(value.type) or pa.types.is_large_binary(value.type):
            value = decode_avro(value.cast(pa.binary()), schema, lookup=self._client.schema_lookup(topic))
        elif value.type != schema.arrow_type:
            value = schema.conform(value)
        i = table.column_names.index("value")
        return table.set_column(i, pa.field("value", value.type), value), schema

    def _dispatch(
        self,
        topic: str,
        table: pa.Table,
        explicit: np.ndarray | int | None,
        deadline: float,
        on_done: Callable[[list[PartitionRows], np.ndarray], None],
    ) -> None:
        """Partition the rows and queue each partition's batches on the sender. ``explicit``: one
        partition for every row, or a partition per row (-1: choose), or None (choose for all).
        ``on_done(sends, parts)`` is called once every partition has answered, with each
        partition's rows (offsets or error), by partition, and the partition of every row."""
        table, value_schema = self._typed(topic, table)
        meta = self._client.topic(topic)
        n = meta.partitions
        if isinstance(explicit, int):
            if explicit >= n:
                raise InvalidRequest(f"topic {topic!r} has {n} partitions; partition {explicit} does not exist")
            parts = np.full(table.num_rows, explicit, dtype=np.int64)
            groups = [(explicit, [slice(0, table.num_rows)])] if table.num_rows else []
        else:
            keys = table.column("key").combine_chunks() if "key" in table.column_names else None
            if explicit is None and (keys is None or keys.null_count == len(keys)):
                groups = self._router.sticky_runs(table.num_rows, n)  # no per-row work at all
                parts = np.empty(table.num_rows, dtype=np.int64)
                for p, runs in groups:
                    for run in runs:
                        parts[run] = p
            else:
                partitioner = self.partitioner or meta.config.partitioner
                parts = self._router.partition_rows(topic, keys, explicit, table.num_rows, n, partitioner)
                groups = rows_by_partition(parts)
        sends: list[PartitionRows] = []
        remaining = [len(groups)]

        def one_done(_send: PartitionRows) -> None:  # on the sender's thread only
            remaining[0] -= 1
            if not remaining[0]:
                on_done(sends, parts)

        if not groups:
            on_done(sends, parts)
            return
        queued = []
        for p, rows in groups:
            part_table = take_rows(table, rows)
            send = PartitionRows(p, rows, part_table.num_rows, one_done)
            batches = wire_batches(topic, send, part_table, value_schema, deadline, self.batch_records)
            sends.append(send)
            queued.append((send, batches))
        for send, batches in queued:  # all converted first: a conversion error leaves nothing queued
            send.expect(len(batches))
            self._sender.enqueue(topic, send.partition, batches)

    # ----------------------------------------------------------------- lifecycle
    def flush(self, timeout: float | None = None) -> None:
        """Send everything queued by ``send()`` and wait for the acknowledgements (and for those of
        ``send_batch_async()`` calls)."""
        with self._lock:
            batches = list(self._batches_in_flight)
        self._flush_records(timeout)
        concurrent.futures.wait(batches, timeout)

    def _flush_records(self, timeout: float | None = None) -> None:
        with self._lock:
            waiting = [a.outcome for a in (*self._full, *self._pending.values())] + list(self._in_flight)
            for acc in self._pending.values():
                acc.since = -1e18  # due now
        if not waiting:
            return
        self._wake.set()
        for outcome in waiting:
            outcome.done.wait(timeout)

    def metrics(self) -> dict[str, float]:
        """This producer's figures so far, by Kafka's producer metric names: records sent
        (acknowledged), failed and retried, requests, bytes and batches sent, batch sizes (bytes) and
        request latency (ms, from a request's sending to its acknowledgement)."""
        return self._metrics.snapshot()

    def close(self) -> None:
        if self._closed:
            return
        self.flush()
        with self._lock:
            self._closed = True
        self._wake.set()
        self._linger.join()
        self._sender.close()
        self._client.close()
        if self._registry is not None and self._collector is not None:
            self._registry.unregister(self._collector)

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _pick(column: list[Any] | None, rows: list[int]) -> Any:
    return None if column is None else [column[i] for i in rows]


def _spread(values: np.ndarray, rows: list[int], total: int) -> np.ndarray:
    """``values`` of some rows of a group placed at those rows of an array of ``total`` (-1 elsewhere)."""
    out = np.full(total, -1, dtype=np.int64)
    out[np.asarray(rows, dtype=np.int64)] = values
    return out


def _one_record(message: str) -> str:
    """A conversion error of a single record, without the row number of its one-row batch."""
    if message.startswith("row 0: "):
        message = message[len("row 0: ") :]
    return message.replace(" at row 0 ", " ", 1)


def _collect(rows: int, sends: list[PartitionRows]) -> tuple[np.ndarray, dict[int, BaseException]]:
    """The offset of every row (-1 where its partition failed) and each failed partition's error
    (the other partitions' rows are acknowledged regardless)."""
    offsets = np.full(rows, -1, dtype=np.int64)
    errors: dict[int, BaseException] = {}
    for send in sends:
        if send.error is not None:
            errors[send.partition] = send.error
        else:
            place(offsets, send.rows, send.offsets)
    return offsets, errors
