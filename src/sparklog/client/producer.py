"""The Producer: per-record ``send()`` batched in the background, and columnar ``send_batch()``.

Records are accumulated per topic and partitioned at flush time, a whole column at once (stable
key hash, explicit partition, or a sticky round-robin partition for unkeyed records). Each
partition has one open Flight ``do_put`` stream to its leader, acknowledged batch by batch.
"""

from __future__ import annotations

import concurrent.futures
import functools
import itertools
import operator
import queue
import secrets
import threading
import time
from collections.abc import Mapping, Sequence
from time import time_ns
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.flight as flight

from sparklog import wire
from sparklog.client.cluster_client import DEFAULT_ZOOKEEPER, ClusterClient
from sparklog.client.partitioner import partitions_for_keys
from sparklog.coordination.cluster import BrokerInfo
from sparklog.errors import BrokerNotAvailable, InvalidRecord, InvalidRequest, RequestTimedOut
from sparklog.records import HEADER_TYPE, to_wire_batch, wire_batch_of_rows, wire_schema
from sparklog.schemas.codec import decode_avro
from sparklog.schemas.value_schema import ValueSchema

ACKS = ("0", "1", "all")
IN_FLIGHT_WAIT_S = 0.05  # how long the sender waits for groups in flight before sending the next


class RecordMetadata(NamedTuple):
    """Where a sent record landed (offset -1 with ``acks=0``)."""

    topic: str
    partition: int
    offset: int


class BatchMetadata(NamedTuple):
    """Where a slice of a ``send_batch`` table landed."""

    topic: str
    partition: int
    base_offset: int
    last_offset: int


class _Flush:
    """The fate of one accumulated group of records: partition and offset per record, or an error."""

    def __init__(self, topic: str) -> None:
        self.topic = topic
        self.done = threading.Event()
        self.partitions: np.ndarray | None = None
        self.offsets: np.ndarray | None = None
        self.error: BaseException | None = None  # the whole group failed (before partitioning)
        self.partition_errors: dict[int, BaseException] = {}  # a partition's rows failed, others did not


class ProduceFuture(tuple[_Flush, int]):
    """The future of one ``send()``: ``result()`` gives its :class:`RecordMetadata`. (A tuple of its
    group's fate and its row in the group: built by ``tuple``'s own constructor, as ``send()``
    makes one per record.)"""

    __slots__ = ()

    def done(self) -> bool:
        return self[0].done.is_set()

    def result(self, timeout: float | None = None) -> RecordMetadata:
        flush, index = self
        if not flush.done.wait(timeout):
            raise TimeoutError("the record was not acknowledged in time")
        if flush.error is not None:
            raise flush.error
        assert flush.partitions is not None and flush.offsets is not None
        partition = int(flush.partitions[index])
        failed = flush.partition_errors.get(partition)
        if failed is not None:
            raise failed
        return RecordMetadata(flush.topic, partition, int(flush.offsets[index]))


class _Accumulator:
    """Records of one topic waiting to be sent, column by column: values and timestamps always;
    keys, headers and explicit partitions only once a record has one (earlier rows get None)."""

    def __init__(self, topic: str) -> None:
        self.topic = topic
        self.values: list[Any] = []
        self.timestamps: list[int] = []
        self.keys: list[bytes | None] | None = None
        self.headers: list[Mapping[str, bytes] | None] | None = None
        self.partitions: list[int | None] | None = None
        self.rare = False  # a record had a key, headers or a partition: every later one records its own
        self.bytes = 0
        self.since = time.monotonic()  # when its linger started (a flush makes it due at once)
        self.created = self.since  # the delivery timeout counts from here
        self.flush = _Flush(topic)

    def add_rare(self, key: bytes | None, headers: Mapping[str, bytes] | None, partition: int | None) -> None:
        """The optional fields of the record just appended."""
        self.rare = True
        n = len(self.values) - 1
        self.keys = _late_column(self.keys, key, n)
        self.headers = _late_column(self.headers, headers, n)
        self.partitions = _late_column(self.partitions, partition, n)


def _late_column(column: list[Any] | None, value: Any, before: int) -> list[Any] | None:
    """``column`` with ``value`` appended; started (``before`` Nones first) by the first non-None."""
    if column is None:
        if value is None:
            return None
        column = [None] * before
    column.append(value)
    return column


class _PartitionStream:
    """An open ``do_put`` stream to a partition's leader, driven by its own thread.

    Flight cannot cancel a ``do_put`` from the client side, and a write or an ack read on a frozen
    broker blocks until that broker answers. So the stream's calls run on its thread and the caller
    waits for each with a deadline; a stream whose call timed out is abandoned (its thread closes
    it whenever the broker answers or the connection dies)."""

    def __init__(
        self,
        client: flight.FlightClient,
        broker: BrokerInfo,
        topic: str,
        partition: int,
        acks: str,
        producer_id: int,
        value_schema: ValueSchema | None,
    ) -> None:
        command: dict[str, Any] = {
            "type": wire.PRODUCE,
            "topic": topic,
            "partition": partition,
            "acks": acks,
            "producer_id": producer_id,
        }
        if value_schema is not None:
            command["schema_version"] = value_schema.version
        self.broker = broker
        self.acks = acks
        self.producer_id = producer_id
        self.value_schema = value_schema
        self._client = client
        self._descriptor = flight.FlightDescriptor.for_command(wire.encode(command))
        self._value_type = value_schema.arrow_type if value_schema is not None else pa.binary()
        self._writer: Any = None
        self._reader: Any = None
        # one batch at a time (its lane waits for each): a job in, then its outcome out, through
        # C-level queues (a Future per batch cost a Condition and its Python locking each way)
        self._jobs: queue.SimpleQueue[tuple[pa.RecordBatch, int] | None] = queue.SimpleQueue()
        self._outcomes: queue.SimpleQueue[tuple[int, int] | BaseException] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name=f"sparklog-put-{topic}-{partition}", daemon=True)
        self._thread.start()

    def send(self, batch: pa.RecordBatch, sequence: int, timeout: float) -> tuple[int, int]:
        """Write one batch and wait at most ``timeout`` seconds for its acknowledgement: (base
        offset, last offset), or (-1, -1) with ``acks=0``. After a timeout the stream is not used
        again (its late outcome is never read)."""
        self._jobs.put((batch, sequence))
        try:
            outcome = self._outcomes.get(timeout=max(timeout, 0.0))
        except queue.Empty:
            raise RequestTimedOut(
                f"broker {self.broker.broker_id} did not acknowledge a produce request within {timeout:.1f} s"
            ) from None
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    def _run(self) -> None:
        while (job := self._jobs.get()) is not None:
            try:
                outcome: tuple[int, int] | BaseException = self._send_now(*job)
            except BaseException as exc:  # handed to the waiting caller
                outcome = exc
            self._outcomes.put(outcome)
        self._close_now()

    def _send_now(self, batch: pa.RecordBatch, sequence: int) -> tuple[int, int]:
        if self._writer is None:
            self._writer, self._reader = self._client.do_put(self._descriptor, wire_schema(self._value_type))
        self._writer.write_with_metadata(batch, pa.py_buffer(wire.encode({"sequence": sequence})))
        if self.acks == "0":
            return -1, -1
        ack = self._reader.read()
        if ack is None:  # the broker ended the stream: its error comes with closing our side
            try:
                self._writer.close()
            except flight.FlightError as exc:
                raise wire.from_flight_error(exc, f"broker {self.broker.broker_id}") from None
            raise BrokerNotAvailable(f"broker {self.broker.broker_id} closed the produce stream without an ack")
        result = wire.decode(ack)
        return int(result["base_offset"]), int(result["last_offset"])

    def _close_now(self) -> None:
        if self._writer is None:
            return
        try:
            self._writer.done_writing()
            self._writer.close()
        except (flight.FlightError, pa.ArrowException, OSError):
            pass

    def close(self) -> None:
        """End the stream once its current call returns (``join`` waits for that)."""
        self._jobs.put(None)

    def join(self, wait_s: float) -> None:
        if wait_s > 0:
            self._thread.join(wait_s)


def _rows_by_partition(parts: np.ndarray) -> list[tuple[int, list[slice] | np.ndarray]]:
    """The rows of each partition: as runs of contiguous rows when there are few runs (sticky
    batches, explicit partitions: taken zero-copy), else as row indices (key-hashed rows)."""
    if not len(parts):
        return []
    bounds = np.flatnonzero(parts[1:] != parts[:-1]) + 1
    if len(bounds) + 1 > max(8, len(parts) // 256):
        return [(int(p), np.flatnonzero(parts == p)) for p in np.unique(parts)]
    starts = np.concatenate(([0], bounds)).tolist()
    ends = np.concatenate((bounds, [len(parts)])).tolist()
    runs: dict[int, list[slice]] = {}
    for p, start, end in zip(parts[starts].tolist(), starts, ends, strict=True):
        runs.setdefault(p, []).append(slice(start, end))
    return sorted(runs.items())


def _take_rows(table: pa.Table, rows: list[slice] | np.ndarray) -> pa.Table:
    if not isinstance(rows, list):
        return table.take(pa.array(rows))
    if len(rows) == 1 and rows[0].stop - rows[0].start == table.num_rows:
        return table
    return pa.concat_tables([table.slice(r.start, r.stop - r.start) for r in rows])


class _LaneJob(NamedTuple):
    table: pa.Table
    deadline: float
    value_schema: ValueSchema | None
    done: concurrent.futures.Future[np.ndarray]


class _PartitionLane:
    """One partition's sends, in order, on its own thread, so that a slow or failed partition (a
    dead leader, too few replicas) never holds up the others. Tables queued while a send is in
    flight go out together in the next one: the natural batching of a busy producer."""

    def __init__(self, name: str, send: Any) -> None:
        self._send = send  # (tables, deadline, value schema) -> the offset of every row
        self._jobs: queue.SimpleQueue[_LaneJob | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(
        self, table: pa.Table, deadline: float, value_schema: ValueSchema | None
    ) -> concurrent.futures.Future[np.ndarray]:
        done: concurrent.futures.Future[np.ndarray] = concurrent.futures.Future()
        self._jobs.put(_LaneJob(table, deadline, value_schema, done))
        return done

    def _run(self) -> None:
        while (first := self._jobs.get()) is not None:
            jobs, last = [first], False
            while len(jobs) < 1024:
                try:
                    job = self._jobs.get_nowait()
                except queue.Empty:
                    break
                if job is None:
                    last = True
                    break
                jobs.append(job)
            start = 0
            for i in range(1, len(jobs) + 1):  # runs of jobs with the same value schema go together
                if i == len(jobs) or jobs[i].value_schema != jobs[start].value_schema:
                    self._send_together(jobs[start:i])
                    start = i
            if last:
                return

    def _send_together(self, jobs: list[_LaneJob]) -> None:
        try:
            offsets = self._send([j.table for j in jobs], min(j.deadline for j in jobs), jobs[0].value_schema)
        except BaseException as exc:  # every job of the send learns it
            for job in jobs:
                job.done.set_exception(exc)
            return
        at = 0
        for job in jobs:
            job.done.set_result(offsets[at : at + job.table.num_rows])
            at += job.table.num_rows

    def close(self) -> None:
        """Finish what is queued, then stop."""
        self._jobs.put(None)
        self._thread.join()


class Producer:
    """Sends records to topics. Use as a context manager, or call ``close()``.

    ``acks``: ``0`` (fire and forget), ``1`` (the leader appended), ``all`` (every in-sync replica
    has it). ``linger_ms`` and ``batch_records``/``batch_bytes`` decide when ``send()`` records leave.
    A batch is retried (new leader, broker back, enough replicas again) for up to
    ``delivery_timeout_s`` before its error is raised; each attempt waits at most
    ``request_timeout_s`` for its acknowledgement (never past the delivery timeout), so a frozen
    leader is given up on and the batch goes to the next leader.

    The producer is idempotent: it numbers the records it sends to each partition under a random
    producer id, so when it retries a batch after a lost acknowledgement or a leader change the
    leader recognises the batch and does not append it twice. Rows for several partitions (a
    large ``send_batch`` table, or a flush of ``send()`` records) go to their leaders in parallel.
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
    ) -> None:
        acks = "all" if str(acks) in ("all", "-1") else str(acks)
        if acks not in ACKS:
            raise InvalidRequest(f"acks must be 0, 1 or all, got {acks!r}")
        self.acks = acks
        self.linger_s = linger_ms / 1000
        self.batch_records = batch_records
        self.batch_bytes = batch_bytes
        self.delivery_timeout_s = delivery_timeout_s
        self.request_timeout_s = request_timeout_s
        self._client = ClusterClient(zookeeper, retries=retries, retry_timeout_s=delivery_timeout_s)
        self._sequences: dict[tuple[str, int], tuple[int, int]] = {}  # partition -> (producer id, next seq)
        self._lanes: dict[tuple[str, int], _PartitionLane] = {}
        self._in_flight: set[_Flush] = set()  # groups taken by the sender, not yet acknowledged
        self._streams: dict[tuple[str, int], _PartitionStream] = {}
        self._batches_in_flight: dict[concurrent.futures.Future[list[BatchMetadata]], None] = {}  # send_batch_async
        self._pending: dict[str, _Accumulator] = {}
        self._sticky = itertools.count()
        self._lock = threading.Lock()  # guards the accumulators (a plain lock: send() is the hot path)
        self._wake = threading.Event()  # tells the sender thread to look at the accumulators
        self._closed = False
        self._sender = threading.Thread(target=self._run_sender, name="sparklog-producer", daemon=True)
        self._sender.start()

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
        """Queue one record; the returned future resolves to its (topic, partition, offset)."""
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
                acc = self._pending[topic] = _Accumulator(topic)
            values = acc.values
            values.append(value)
            acc.timestamps.append(timestamp)
            if acc.rare or key is not None or headers is not None or partition is not None:
                acc.add_rare(key, headers, partition)
            n = len(values)
            if value:
                acc.bytes += len(value)
            full = n >= self.batch_records or acc.bytes >= self.batch_bytes
        finally:
            lock.release()
        # a new group starts its linger, or must leave now; is_set() first: a full group stays full
        # until the sender takes it, and Event.set() costs a Condition round every call
        if (n == 1 or full or not self.linger_s) and not self._wake.is_set():
            self._wake.set()
        return ProduceFuture((acc.flush, n - 1))

    def _run_sender(self) -> None:
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
        arriving meanwhile go out together (a group per round trip, not a tiny group per record).
        Bounded by ``IN_FLIGHT_WAIT_S``: a partition whose leader hangs delays the others' records
        by that much at most, it never holds them up."""
        with self._lock:
            waiting = list(self._in_flight)
        until = time.monotonic() + IN_FLIGHT_WAIT_S
        for flush in waiting:
            if not flush.done.wait(max(0.0, until - time.monotonic())):
                return

    def _take(self, all_: bool) -> list[_Accumulator]:
        now = time.monotonic()
        ready = [
            a
            for a in self._pending.values()
            if all_
            or len(a.values) >= self.batch_records
            or a.bytes >= self.batch_bytes
            or now - a.since >= self.linger_s
        ]
        for acc in ready:
            del self._pending[acc.topic]
        return ready

    def _dispatch_accumulated(self, acc: _Accumulator) -> None:
        """Hand a group's rows to their partitions' lanes; its futures resolve when every lane has
        answered (the sender thread goes on with the next group at once)."""
        flush = acc.flush
        with self._lock:
            self._in_flight.add(flush)
        try:
            header_column = None
            if acc.headers is not None and acc.headers.count(None) != len(acc.headers):
                header_column = pa.array(
                    [None if not h else [{"key": k, "value": v} for k, v in h.items()] for h in acc.headers],
                    HEADER_TYPE,
                )
            value = self._value_column(acc.topic, acc.values)
            batch = wire_batch_of_rows(acc.timestamps, acc.keys, value, header_column)
            explicit = None
            if acc.partitions is not None and acc.partitions.count(None) != len(acc.partitions):
                explicit = np.array([-1 if p is None else p for p in acc.partitions], dtype=np.int64)
            deadline = acc.created + self.delivery_timeout_s
            parts, sends = self._dispatch(acc.topic, pa.Table.from_batches([batch]), explicit, deadline)
            if parts is None:  # sticky runs: the partition of every row from its run
                parts = np.empty(batch.num_rows, dtype=np.int64)
                for p, runs, _future in sends:
                    for run in runs:
                        parts[run] = p
        except BaseException as exc:  # every waiting future learns the failure
            flush.error = exc
            self._finished(flush)
            return
        remaining = [len(sends)]

        def one_done(_future: concurrent.futures.Future[Any]) -> None:
            with self._lock:
                remaining[0] -= 1
                if remaining[0]:
                    return
            flush.partitions = parts
            flush.offsets, flush.partition_errors = self._collect(len(parts), sends)
            self._finished(flush)

        for _p, _rows, future in sends:
            future.add_done_callback(one_done)

    def _finished(self, flush: _Flush) -> None:
        with self._lock:
            self._in_flight.discard(flush)
        flush.done.set()

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
        _parts, sends = self._dispatch(topic, data, partition, deadline)
        result: concurrent.futures.Future[list[BatchMetadata]] = concurrent.futures.Future()
        remaining = itertools.count(len(sends) - 1, -1)

        def one_done(_future: concurrent.futures.Future[Any]) -> None:
            if next(remaining):  # itertools.count is atomic under the GIL
                return
            out: list[BatchMetadata] = []
            errors: dict[int, BaseException] = {}
            for p, _rows, future in sends:
                error = future.exception()
                if error is not None:  # this partition only
                    errors[p] = error
                    continue
                offsets = future.result()
                out.append(BatchMetadata(topic, p, int(offsets.min()), int(offsets.max())))
            with self._lock:
                self._batches_in_flight.pop(result, None)
            if errors:  # every other partition was sent; report the first failure
                result.set_exception(next(iter(errors.values())))
            else:
                result.set_result(out)

        if not sends:
            result.set_result([])
            return result
        with self._lock:
            self._batches_in_flight[result] = None
        for _p, _rows, future in sends:
            future.add_done_callback(one_done)
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
        self, topic: str, table: pa.Table, explicit: np.ndarray | int | None, deadline: float
    ) -> tuple[np.ndarray | None, list[tuple[int, list[slice] | np.ndarray, concurrent.futures.Future[np.ndarray]]]]:
        """Partition the rows and queue each partition's rows on its lane (partitions proceed in
        parallel, each in order). ``explicit``: one partition for every row, or a partition per row
        (-1: choose), or None (choose for all). Returns the partition of every row when ``explicit``
        was an array, and (partition, rows, future of the rows' offsets) per partition, by partition."""
        table, value_schema = self._typed(topic, table)
        n = self._client.topic(topic).partitions
        if isinstance(explicit, int):
            if explicit >= n:
                raise InvalidRequest(f"topic {topic!r} has {n} partitions; partition {explicit} does not exist")
            parts, groups = None, [(explicit, [slice(0, table.num_rows)])] if table.num_rows else []
        else:
            keys = table.column("key").combine_chunks() if "key" in table.column_names else None
            if explicit is None and (keys is None or keys.null_count == len(keys)):
                parts, groups = None, self._sticky_runs(table.num_rows, n)  # no per-row work at all
            else:
                parts = self._partition_rows(topic, keys, explicit, table.num_rows, n)
                groups = _rows_by_partition(parts)
        sends = []
        for p, rows in groups:
            sends.append((p, rows, self._lane(topic, p).submit(_take_rows(table, rows), deadline, value_schema)))
        return parts, sends

    def _partition_rows(
        self, topic: str, keys: pa.Array | None, explicit: np.ndarray | None, rows: int, n: int
    ) -> np.ndarray:
        """The partition of every row: the given one, else the key's hash, else sticky batches."""
        parts = np.full(rows, -1, dtype=np.int64) if explicit is None else explicit.copy()
        bad = parts >= n
        if bad.any():
            raise InvalidRequest(f"topic {topic!r} has {n} partitions; partition {int(parts[bad][0])} does not exist")
        free = parts < 0
        if free.any():
            if keys is not None and keys.null_count < len(keys):
                hashed = partitions_for_keys(keys, n)
                keyed = free & ~np.asarray(keys.is_null().to_numpy(zero_copy_only=False))
                parts[keyed] = hashed[keyed]
                free &= ~keyed
            # sticky: unkeyed records go to one partition a batch at a time, the next batch to the next
            chunk = (np.cumsum(free) - 1) // self.batch_records
            parts[free] = (next(self._sticky) + chunk[free]) % n
        return parts

    def _sticky_runs(self, rows: int, n: int) -> list[tuple[int, list[slice]]]:
        """Rows of an unkeyed table, a batch at a time to one partition, the next batch to the next."""
        first = next(self._sticky)
        runs: dict[int, list[slice]] = {}
        for i, start in enumerate(range(0, rows, self.batch_records)):
            runs.setdefault((first + i) % n, []).append(slice(start, min(start + self.batch_records, rows)))
        return sorted(runs.items())

    def _lane(self, topic: str, partition: int) -> _PartitionLane:
        lane = self._lanes.get((topic, partition))
        if lane is None:
            with self._lock:  # one lane per partition
                lane = self._lanes.get((topic, partition))
                if lane is None:
                    lane = self._lanes[(topic, partition)] = _PartitionLane(
                        f"sparklog-send-{topic}-{partition}",
                        functools.partial(self._send_to_partition, topic, partition),
                    )
        return lane

    @staticmethod
    def _collect(
        n: int, sends: list[tuple[int, list[slice] | np.ndarray, concurrent.futures.Future[np.ndarray]]]
    ) -> tuple[np.ndarray, dict[int, BaseException]]:
        """The offset of every row (-1 where its partition failed) and each failed partition's error
        (the other partitions' rows are acknowledged regardless)."""
        offsets = np.full(n, -1, dtype=np.int64)
        errors: dict[int, BaseException] = {}
        for p, rows, future in sends:
            try:
                got = future.result()
            except Exception as exc:  # this partition only
                errors[p] = exc
                continue
            if isinstance(rows, list):  # runs, in the order their rows were sent
                at = 0
                for run in rows:
                    offsets[run] = got[at : at + run.stop - run.start]
                    at += run.stop - run.start
            else:
                offsets[rows] = got
        return offsets, errors

    def _send_to_partition(
        self,
        topic: str,
        partition: int,
        tables: list[pa.Table],
        deadline: float,
        value_schema: ValueSchema | None = None,
    ) -> np.ndarray:
        """Send the tables' rows, in order, to one partition in batches of at most ``batch_records``
        (small tables packed together, large ones sliced zero-copy), each acknowledged by
        ``deadline`` (a ``time.monotonic()`` value); the offset of every row."""
        value_type = value_schema.arrow_type if value_schema is not None else pa.binary()
        offsets = np.empty(sum(t.num_rows for t in tables), dtype=np.int64)
        at = 0
        small: list[pa.RecordBatch] = []

        def send(batch: pa.RecordBatch) -> None:
            nonlocal at
            base, _last = self._send_one(topic, partition, batch, deadline, value_schema)
            offsets[at : at + batch.num_rows] = np.arange(base, base + batch.num_rows) if base >= 0 else -1
            at += batch.num_rows

        def send_small() -> None:
            if small:
                send(small[0] if len(small) == 1 else pa.concat_batches(small))
                small.clear()

        def as_batch(table: pa.Table) -> pa.RecordBatch:
            return to_wire_batch(table, value_type)

        for table in tables:
            if table.num_rows + sum(b.num_rows for b in small) > self.batch_records:
                send_small()
            if table.num_rows >= self.batch_records:
                # each batch made from its own slice of the table: slicing one batch made of the
                # whole table would copy it all first, and a slice drags its parent's buffers along
                # (a 10,000-row slice of 600,000 rows went out as 6 MB instead of 1 MB)
                for start in range(0, table.num_rows, self.batch_records):
                    send(as_batch(table.slice(start, self.batch_records)))
            elif table.num_rows:
                small.append(as_batch(table))
        send_small()
        return offsets

    def _send_one(
        self,
        topic: str,
        partition: int,
        batch: pa.RecordBatch,
        deadline: float,
        value_schema: ValueSchema | None = None,
    ) -> tuple[int, int]:
        """Send one batch to a partition's leader (retrying, idempotently) and wait for its ack.

        Each partition has its own producer id and sequence: a retried batch keeps its sequence, so
        the leader drops it if it already has it."""
        key = (topic, partition)
        # only this partition's lane sends to it: its sequence needs no lock
        producer_id, sequence = self._sequences.get(key) or (secrets.randbits(62), 0)

        def attempt(client: flight.FlightClient, broker: BrokerInfo) -> tuple[int, int]:
            left = deadline - time.monotonic()
            if left <= 0:  # waited behind other batches for the whole delivery timeout: not sent
                raise RequestTimedOut(f"delivery timeout of {self.delivery_timeout_s} s passed before sending")
            stream = self._streams.get(key)
            if stream is not None and (
                stream.broker != broker or stream.producer_id != producer_id or stream.value_schema != value_schema
            ):
                stream.close()
                stream = None
            if stream is None:
                stream = _PartitionStream(client, broker, topic, partition, self.acks, producer_id, value_schema)
                self._streams[key] = stream
            try:
                return stream.send(batch, sequence, min(self.request_timeout_s, left))
            except BaseException:
                self._streams.pop(key, None)
                stream.close()
                raise

        try:
            result = self._client.call_leader(topic, partition, attempt, deadline)
        except BaseException:
            # the batch's fate is unknown: the next batches go under a new producer id, so
            # that they are not refused as out of sequence
            self._sequences.pop(key, None)
            raise
        self._sequences[key] = (producer_id, sequence + batch.num_rows)
        return result

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
            waiting = [a.flush for a in self._pending.values()] + list(self._in_flight)
            for acc in self._pending.values():
                acc.since = -1e18  # due now
        if not waiting:
            return
        self._wake.set()
        for flush in waiting:
            flush.done.wait(timeout)

    def close(self) -> None:
        if self._closed:
            return
        self.flush()
        with self._lock:
            self._closed = True
        self._wake.set()
        self._sender.join()
        for lane in self._lanes.values():
            lane.close()
        for stream in self._streams.values():
            stream.close()
        give_up = time.monotonic() + 2.0  # a frozen broker's stream is left behind, not waited for
        for stream in self._streams.values():
            stream.join(give_up - time.monotonic())
        self._streams.clear()
        self._client.close()

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
