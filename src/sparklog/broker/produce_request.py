"""The leader's side of a produce request covering many partitions (Kafka's ProduceRequest).

A producer keeps one ``do_put`` stream per broker (and value type: a Flight stream has one schema,
and every plain topic shares the wire schema) and sends on it the batches of every partition that
broker leads. Each batch names its partition in its app metadata; the last batch of a request says
``"end"``, and the broker answers the request with one put metadata message holding a result per
batch, in order: offsets, or the error of that batch alone (a partition led elsewhere, too few
replicas, a refused batch), so one partition's trouble never fails the others. The wire is in
:mod:`sparklog.protocol.wire`.

Every batch of a request is appended as it arrives; with ``acks=all`` the request's answer waits
(one deadline for the whole request) until the high watermark covers each appended batch, so the
request's partitions replicate together instead of one after the other, and it waits on the
stream's answer thread (:mod:`sparklog.broker.produce_answers`) while the next requests of the
stream are read and appended: a producer pipelines its requests to a broker on one stream.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple, Protocol

import pyarrow as pa
import pyarrow.flight as flight

from sparklog.broker.log.batch_validation import MAX_BATCH_ROWS, check_produced
from sparklog.broker.partition import ACK_TIMEOUT_S, Partition
from sparklog.broker.produce_answers import PipelinedAnswers
from sparklog.broker.typed_values import conform_produced
from sparklog.errors import InvalidRequest, NotLeader, SparklogError
from sparklog.names import check_topic_name
from sparklog.protocol import wire
from sparklog.protocol.record_frames import Frame, frames
from sparklog.schemas.value_schema import ValueSchema

ValueSchemas = Sequence[ValueSchema]  # a typed topic's versions, oldest first


class ProduceTimer(Protocol):
    """Where each produce request's time goes (the broker's metrics)."""

    def produce_request(
        self, listener: str, local_s: float, remote_s: float, throttle_s: float, total_s: float, version: int = -1
    ) -> None: ...


class ProduceTarget(Protocol):
    """What serving a produce request needs from the broker."""

    broker_id: int
    metrics: ProduceTimer

    def leader_partition(self, topic: str, p: int, for_write: bool = False) -> Partition: ...

    @property
    def value_schemas(self) -> Mapping[str, ValueSchemas]: ...


def append_produced(
    partition: Partition,
    data: pa.RecordBatch,
    value_schemas: ValueSchemas | None,
    writer_version: int | None,
    acks: str,
    producer_id: int,
    sequence: int,
    wait: bool = True,
) -> Any:
    """Append one produced batch as the partition's leader (a typed topic's values first checked and
    converted to its latest schema version); the :class:`AppendInfo`. ``wait``: with ``acks=all``,
    return only once the high watermark covers it."""
    if value_schemas:  # fully validated before the conversion reads it (untyped: by the log)
        check_produced(data, partition.log.config.max_message_bytes)
        data = conform_produced(data, value_schemas, writer_version)
    min_isr = partition.log.config.min_insync_replicas
    return partition.append_as_leader(data, acks, producer_id, sequence, min_isr, wait=wait)


class _Appended(NamedTuple):
    partition: Partition
    base_offset: int
    last_offset: int
    leader_epoch: int  # the epoch it was appended in: acknowledged only while still leading in it


class _Request(NamedTuple):
    pending: list[_Appended | SparklogError]  # each batch appended, or its error
    throttled_s: float  # how long the request waited for its producer's quota
    started: float  # time.monotonic() as its first batch was read
    local_s: float  # spent appending its batches


def _int_field(meta: dict[str, Any], name: str, default: int | None = None) -> int:
    value = meta.get(name, default)
    if not wire.is_int64(value):
        raise InvalidRequest(f"a produced batch's '{name}' must be a 64-bit integer, got {value!r:.100}")
    return value


class ProduceRequestStream:
    """Serves one producer's stream of multi-partition produce requests."""

    def __init__(self, target: ProduceTarget, acks: str, schema: pa.Schema, stopping: Callable[[], bool]) -> None:
        self.target = target
        self.acks = acks
        self.schema = schema  # the records' (every frame of the stream holds a batch of it)
        self.stopping = stopping
        self._may_write: Callable[[str], None] = lambda _topic: None
        self._session: Callable[[], None] = lambda: None

    def serve(
        self,
        reader: flight.MetadataRecordBatchReader,
        writer: flight.FlightMetadataWriter,
        may_write: Callable[[str], None] = lambda _topic: None,
        throttled: Callable[[int], float] = lambda _size: 0.0,
        session: Callable[[], None] = lambda: None,
    ) -> None:
        """``may_write(topic)``: raises AuthorizationFailed if the caller may not write ``topic``
        (that batch fails alone, as any refused batch). ``throttled(size)``: makes the request wait
        while the producer is over its byte rate (client quotas), returning the seconds it waited;
        called with each request's bytes before its answer, which then says ``"throttle_ms"``.
        ``session()``: raises once the caller's session has ended (its user removed, its password
        changed), checked before each batch: the error ends the whole stream."""
        self._may_write = may_write
        self._session = session
        answers = None
        if self.acks == "all":  # answered by their own thread, in order, while the next ones append
            answers = PipelinedAnswers(self._answer, writer.write, "sparklog-produce-answers")
        failed_stream = True
        try:
            self._serve(reader, writer, throttled, answers)
            failed_stream = False
        finally:
            if answers is not None:
                answers.close(abandon=failed_stream)

    def _serve(
        self,
        reader: flight.MetadataRecordBatchReader,
        writer: flight.FlightMetadataWriter,
        throttled: Callable[[int], float],
        answers: PipelinedAnswers | None,
    ) -> None:
        pending: list[_Appended | SparklogError] = []
        size = 0
        failed: dict[tuple[str, str], SparklogError] = {}  # a partition's first failed batch in the request
        started = local_s = 0.0
        for frame in frames(reader):
            began = time.monotonic()
            if not pending:
                started = began
            self._session()
            meta = frame.metadata
            tp = (str(meta.get("t")), str(meta.get("p")))
            earlier = failed.get(tp)
            if earlier is not None:  # the batches behind a failed one are not appended (order)
                pending.append(earlier)
            else:
                try:
                    pending.append(self._append(frame))
                    # what it declared passed the limit: a refused frame's claim is not charged
                    size += frame.declared.decoded_bytes
                except SparklogError as exc:  # this batch only
                    pending.append(exc)
                    failed[tp] = exc
            local_s += time.monotonic() - began
            if meta.get("end") is True:
                request = _Request(pending, throttled(size), started, local_s)
                if answers is not None:
                    answers.put(request)
                elif self.acks != "0":
                    writer.write(self._answer(request))
                else:
                    self._timed(request, 0.0)
                pending, failed, size, local_s = [], {}, 0, 0.0

    def _answer(self, request: _Request) -> pa.Buffer:
        """A request's answer (with ``acks=all`` once the high watermark covers its batches)."""
        waiting = time.monotonic()
        answer: dict[str, Any] = {"r": self._results(request.pending)}
        remote_s = time.monotonic() - waiting if self.acks == "all" else 0.0
        if request.throttled_s > 0:
            answer["throttle_ms"] = max(1, round(request.throttled_s * 1000))
        encoded = pa.py_buffer(wire.encode(answer))
        self._timed(request, remote_s)
        return encoded

    def _timed(self, request: _Request, remote_s: float) -> None:
        total_s = time.monotonic() - request.started
        self.target.metrics.produce_request("flight", request.local_s, remote_s, request.throttled_s, total_s)

    def _append(self, frame: Frame) -> _Appended:
        meta = frame.metadata
        if self.stopping():
            raise NotLeader(f"broker {self.target.broker_id} is shutting down")
        topic = check_topic_name(meta.get("t"))
        self._may_write(topic)
        p = _int_field(meta, "p")
        producer_id = _int_field(meta, "pid", -1)
        sequence = _int_field(meta, "seq", -1)
        writer_version = meta.get("sv")
        if writer_version is not None and not wire.is_int64(writer_version):
            raise InvalidRequest(f"'sv' must be an integer, got {writer_version!r:.100}")
        partition = self.target.leader_partition(topic, p, for_write=True)
        batch = frame.decode(self.schema, partition.log.config.max_message_bytes, MAX_BATCH_ROWS)
        info = append_produced(
            partition,
            batch,
            self.target.value_schemas.get(topic),
            writer_version,
            self.acks,
            producer_id,
            sequence,
            wait=False,
        )
        return _Appended(partition, info.base_offset, info.last_offset, info.leader_epoch)

    def _results(self, pending: list[_Appended | SparklogError]) -> list[dict[str, Any]]:
        """Each batch's answer; with ``acks=all`` once the high watermark covers it (one deadline
        for the whole request)."""
        deadline = time.monotonic() + ACK_TIMEOUT_S
        results: list[dict[str, Any]] = []
        for item in pending:
            if isinstance(item, _Appended) and self.acks == "all":
                min_isr = item.partition.log.config.min_insync_replicas
                try:
                    item.partition.await_high_watermark(item.last_offset + 1, min_isr, item.leader_epoch, deadline)
                except SparklogError as exc:
                    item = exc
            if isinstance(item, SparklogError):
                results.append({"e": item.code, "m": str(item)[: wire.MAX_ERROR_MESSAGE]})
            else:
                results.append({"b": item.base_offset, "l": item.last_offset})
        return results
