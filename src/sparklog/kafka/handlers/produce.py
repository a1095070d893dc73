"""Produce: each partition's record batch (one per partition, message format v2, as Kafka 3+
requires) checked whole before anything is stored: its size against ``max.message.bytes`` before
it is decompressed, its CRC, its records, then appended as sparklog records (key, value, headers,
timestamp) with the next offsets of the log. An idempotent producer's id and epoch and the batch's
first sequence go to the log's producer state, so a retried batch is answered with its first
offsets instead of being stored twice (a batch of a producer id with a negative sequence, which
would escape that, is ``INVALID_RECORD``, as in Kafka). ``acks=all`` waits (up to the request's
timeout, for all of the request's partitions together) until the high watermark covers each
batch; ``acks=0`` gets no response, as in Kafka."""

from __future__ import annotations

import time

import numpy as np
import pyarrow as pa
from kafka.protocol.producer import ProduceRequest, ProduceResponse

from sparklog.errors import InvalidRecord, InvalidRequest, NotLeader, RecordTooLarge, SparklogError
from sparklog.kafka import error_codes
from sparklog.kafka.api import ApiSpec, Message, RequestContext
from sparklog.kafka.authorization import TOPIC
from sparklog.kafka.broker_access import Appended
from sparklog.kafka.record_batch import (
    CONTROL_MASK,
    NO_PRODUCER_ID,
    TRANSACTIONAL_MASK,
    BatchHeader,
    decode_batch,
    split_batches,
)

API = ApiSpec(ProduceRequest, ProduceResponse, 3, 12)  # 13 names topics by id only

ACKS = {-1: "all", 0: "0", 1: "1"}
EPOCH_BITS = 15  # a producer's epoch within the id the log keeps (its id shifted left by this)
MAX_PRODUCER_ID = 1 << (62 - EPOCH_BITS)  # the ids InitProducerId hands out are below this


def log_producer_id(producer_id: int, producer_epoch: int) -> int:
    """The id the log's producer state keeps for a Kafka producer id and epoch: a new epoch (a
    producer that bumped it after a timeout restarts its sequences at 0) is a new producer."""
    if producer_id == NO_PRODUCER_ID:
        return -1
    if not 0 <= producer_id < MAX_PRODUCER_ID or not 0 <= producer_epoch < (1 << EPOCH_BITS):
        raise InvalidRecord(f"producer id {producer_id} epoch {producer_epoch} was not handed out by this cluster")
    return (producer_id << EPOCH_BITS) | producer_epoch


def produced_records(records: bytes, max_message_bytes: int) -> tuple[BatchHeader, pa.RecordBatch]:
    """A partition's record set as the one batch it must hold and its records as sparklog's
    columns; refused (nothing stored) if anything about it is wrong."""
    if len(records) > max_message_bytes:  # before anything is decompressed or decoded
        raise RecordTooLarge(
            f"a record batch of {len(records)} bytes is larger than max.message.bytes={max_message_bytes}"
        )
    batches = split_batches(records)
    if len(batches) != 1:
        raise InvalidRecord(f"a produce request holds one record batch per partition, not {len(batches)}")
    header, data = batches[0]
    if header.attributes & (TRANSACTIONAL_MASK | CONTROL_MASK):
        raise InvalidRecord("transactional and control batches are not supported")
    decoded = decode_batch(data, max_bytes=max_message_bytes)
    found = decoded.records
    count = found.num_rows
    deltas = found.column("offset_delta").to_numpy()
    if count == 0 or header.last_offset_delta != count - 1 or not np.array_equal(deltas, np.arange(count)):
        raise InvalidRecord(
            f"a record batch of {header.records_count} records must number them 0..{header.records_count - 1}"
        )
    columns = ["timestamp", "key", "value", "headers"]
    return header, pa.RecordBatch.from_arrays([found.column(c) for c in columns], names=columns)


def _append(ctx: RequestContext, topic: str, partition: int, records: bytes | None, acks: str) -> Appended:
    if records is None:
        raise InvalidRecord("a partition's records are missing")
    logs = ctx.broker
    header, batch = produced_records(records, logs.max_message_bytes(topic, partition))
    producer = log_producer_id(header.producer_id, header.producer_epoch)
    if producer >= 0 and header.base_sequence < 0:  # the log would take it as a batch without a producer
        raise InvalidRecord(
            f"producer {header.producer_id}'s batch has sequence {header.base_sequence}: sequences start at 0"
        )
    return logs.append(topic, partition, batch, acks, producer, header.base_sequence if producer >= 0 else -1)


def handle(request: Message, ctx: RequestContext) -> Message | None:
    acks = ACKS.get(request.acks)
    deadline = time.monotonic() + max(0, request.timeout_ms) / 1000
    results: list[tuple[str, int, Appended | BaseException]] = []
    for topic_data in request.topic_data:
        for part in topic_data.partition_data:
            outcome: Appended | BaseException
            try:
                if acks is None:
                    raise InvalidRequest(f"acks must be -1, 0 or 1, got {request.acks}")
                if request.transactional_id is not None:
                    raise InvalidRequest("transactions are not supported")
                ctx.may.check(TOPIC, topic_data.name)
                if ctx.stopping():
                    raise NotLeader("the broker is shutting down")
                outcome = _append(ctx, topic_data.name, part.index, part.records, acks)
            except SparklogError as exc:
                outcome = exc
            results.append((topic_data.name, part.index, outcome))
    if acks == "0":
        return None
    if acks == "all":
        waiting = time.monotonic()
        for i, (topic, partition, outcome) in enumerate(results):
            if isinstance(outcome, Appended) and not outcome.duplicate:
                try:
                    ctx.broker.await_replicated(topic, partition, outcome, deadline)
                except SparklogError as exc:
                    results[i] = (topic, partition, exc)
        ctx.remote_s = time.monotonic() - waiting
    return _response(ctx, request.acks, results)


def _response(ctx: RequestContext, acks: int, results: list[tuple[str, int, Appended | BaseException]]) -> Message:
    T = ProduceResponse.TopicProduceResponse
    P = T.PartitionProduceResponse
    by_topic: dict[str, list[Message]] = {}
    for topic, partition, outcome in results:
        if isinstance(outcome, Appended):
            entry = P(
                index=partition,
                error_code=error_codes.NONE,
                base_offset=outcome.base_offset,
                log_append_time_ms=outcome.log_append_time_ms,
                log_start_offset=outcome.log_start_offset,
                record_errors=[],
                error_message=None,
            )
        else:
            code = error_codes.INVALID_REQUIRED_ACKS if acks not in ACKS else error_codes.error_code(outcome)
            entry = P(
                index=partition,
                error_code=code,
                base_offset=-1,
                log_append_time_ms=-1,
                log_start_offset=-1,
                record_errors=[],
                error_message=error_codes.error_message(outcome),
            )
        by_topic.setdefault(topic, []).append(entry)
    return ctx.response(
        API,
        responses=[T(name=name, partition_responses=parts) for name, parts in by_topic.items()],
        throttle_time_ms=0,
    )
