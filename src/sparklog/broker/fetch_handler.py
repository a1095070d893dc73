"""Fetch (``do_get``): a consumer's or a follower's fetch of one partition, a consumer's fetch of
many partitions of a topic (:mod:`sparklog.protocol.multi_fetch`), and a follower broker's fetch of every
partition it follows here (:mod:`sparklog.broker.replication.fetch_request`).

A consumer's fetch below a lake-enabled partition's local log start reads its Delta table (the
union read); a typed topic's values go out in the consumer's view of the schema, projected to the
fields it asked for. An open consumer stream is checked again before each message, and a waiting
one about every quarter second, so a revoked Read ends it."""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa
import pyarrow.flight as flight

from sparklog.broker.consumer_messages import consumer_messages
from sparklog.broker.fetch_follower import FetchFollower, next_offset
from sparklog.broker.flight_errors import guarded
from sparklog.broker.lake.union_read import from_lake
from sparklog.broker.log.batch_codec import BatchHeader
from sparklog.broker.multi_fetch_server import MultiFetchResponse
from sparklog.broker.partition import Partition
from sparklog.broker.replication.fetch_request import FRAMED
from sparklog.broker.replication.replica_fetch_server import ReplicaFetchResponse
from sparklog.broker.request_fields import int_field, topic_field
from sparklog.broker.served_call import CallMeter, ServedBroker, ServedCall, Throttled, unthrottled
from sparklog.broker.typed_values import ConsumerView
from sparklog.errors import InvalidRequest, SparklogError
from sparklog.protocol import fetch_columns, wire

MAX_FETCH_BYTES = 64 << 20
MAX_WAIT_MS = 30_000


def throttled_messages(messages: Iterator[Any], throttled: Throttled) -> Iterator[Any]:
    """A consumer fetch's messages, each sent once its bytes are within the consumer byte rate."""
    for message in messages:
        throttled("fetch", message[0].get_total_buffer_size())
        yield message


def checked_messages(messages: Iterator[Any], check: Callable[[], None]) -> Iterator[Any]:
    """A consumer fetch's messages, each sent only if the caller may still read (an open stream
    ends with the authorization error as soon as its Read ACL goes or its session ends, however
    long it stays open); checked once more at the end, so a stream its wait ended for a
    revocation (:func:`gone_or_revoked`) ends with the error too."""
    for message in messages:
        check()
        yield message
    check()


def metered_messages(messages: Iterator[Any], topic: str, meter: CallMeter) -> Iterator[Any]:
    """``messages`` (batch, metadata) as they go to a consumer, each batch counted once (rows and
    bytes: the broker's messages and bytes out)."""
    for message in messages:
        batch = message[0]
        meter.fetched(topic, batch.num_rows, batch.nbytes)
        yield message


def gone_or_revoked(context: flight.ServerCallContext, check: Callable[[], None]) -> Callable[[], bool]:
    """What a waiting fetch asks every ``WAIT_SLICE_S``: its client went away, or it may no longer
    read (so a revocation ends an idle stream within about a second, not at its next record)."""

    def gone() -> bool:
        if context.is_cancelled():
            return True
        try:
            check()
        except SparklogError:
            return True
        return False

    return gone


def fetch(broker: ServedBroker, call: ServedCall) -> flight.FlightDataStream:
    """A fetch of one partition, by a consumer (``replica_id`` -1) or a follower (its broker id,
    checked by the call table)."""
    request, context, recheck = call.request, call.context, call.recheck
    topic, p = topic_field(request), int_field(request, "partition")
    offset = int_field(request, "offset")
    max_bytes = min(max(int_field(request, "max_bytes", 8 << 20), 1), MAX_FETCH_BYTES)
    max_wait_ms = min(max(int_field(request, "max_wait_ms", 0), 0), MAX_WAIT_MS)
    replica_id = int_field(request, "replica_id", -1)  # -1 or a broker's own (checked)
    throttled = call.throttled if replica_id < 0 else unthrottled  # replicas are never throttled
    throttled("request", 1)
    epoch = request.get("leader_epoch")
    fields = request.get("fields")
    if fields is not None and (
        not isinstance(fields, list) or not all(isinstance(f, str) and f for f in fields) or not fields
    ):
        raise InvalidRequest(f"'fields' must be a non-empty list of field paths, got {fields!r}")
    partition = broker.leader_partition(topic, p)
    plog = partition.log
    # a consumer's fetch below a lake-enabled partition's local log start reads its table
    read = plog.read_stored if replica_id >= 0 else functools.partial(broker.union_read.read, partition)
    upto = partition.fetch_range_end(replica_id, offset, epoch if isinstance(epoch, int) else None)
    stored = read(offset, max_bytes, upto=upto)
    gone = context.is_cancelled if replica_id >= 0 else gone_or_revoked(context, recheck)
    if not stored and max_wait_ms > 0:
        partition.await_records(offset, max_wait_ms / 1000, replica_id >= 0, call.stopping, gone)
        upto = partition.fetch_range_end(replica_id, offset, epoch if isinstance(epoch, int) else None)
        stored = read(offset, max_bytes, upto=upto)
    value_schemas = broker.value_schemas.get(topic)
    if replica_id >= 0:
        # a follower copies stored batches as they are, one schema per fetch
        schema = stored[0][0].schema if stored else plog.schema
        stored = list(itertools.takewhile(lambda item: item[0].schema.equals(schema, True), stored))
        convert = None
    elif value_schemas:
        convert = ConsumerView(value_schemas, fields)
        schema = convert.schema
    elif fields:
        raise InvalidRequest(f"'fields' needs a typed topic; {topic!r} has no value schema")
    else:
        schema, convert = plog.schema, None
    compact = request.get("compact") is True and replica_id < 0
    plan = fetch_columns.plan([batch for batch, _ in stored]) if compact else fetch_columns.PLAIN
    schema = plan.sent_schema(schema)
    follower = None
    if request.get("follow") is True and replica_id < 0 and stored and not from_lake(stored, offset, plog):
        follower = FetchFollower(
            partition,
            max_bytes,
            max_wait_ms,
            plan.elision if compact else None,
            value_schemas,
            lambda: broker.value_schemas.get(topic),
            call.stopping,
            gone,
        )
    responses = _fetch_stream(partition, stored, schema, convert, replica_id >= 0, plan, follower)
    if throttled is not unthrottled:
        responses = throttled_messages(responses, throttled)
    if replica_id < 0:
        responses = metered_messages(checked_messages(responses, recheck), topic, broker.metrics)
    return flight.GeneratorStream(schema, guarded("a fetch response", responses))


def replica_fetch(broker: ServedBroker, call: ServedCall) -> flight.FlightDataStream:
    """A follower broker's fetch of every partition it follows here (never throttled)."""
    response = ReplicaFetchResponse(
        broker.leader_partition,
        broker.changes,
        call.stopping,
        call.context.is_cancelled,
        broker.fetch_sessions,
        broker.full_look_s,
    )
    return flight.GeneratorStream(FRAMED, guarded("a replica fetch", response.messages(call.request)))


def multi_fetch(broker: ServedBroker, call: ServedCall) -> flight.FlightDataStream:
    """A consumer's fetch of many partitions of one topic, one stream (``sparklog.protocol.multi_fetch``)."""
    call.throttled("request", 1)
    response = MultiFetchResponse(
        broker.leader_partition,
        broker.union_read.read,
        broker.changes,
        broker.value_schemas.get,
        call.stopping,
        gone_or_revoked(call.context, call.recheck),
    )
    schema, messages = response.open(call.request)
    if call.throttled is not unthrottled:
        messages = throttled_messages(messages, call.throttled)
    messages = checked_messages(messages, call.recheck)
    messages = metered_messages(messages, str(call.request.get("topic", "")), broker.metrics)
    return flight.GeneratorStream(schema, guarded("a multi-partition fetch", messages))


def _fetch_stream(
    partition: Partition,
    stored: list[tuple[pa.RecordBatch, BatchHeader]],
    schema: pa.Schema,
    convert: Any,
    replica: bool,
    plan: fetch_columns.ResponsePlan,
    follower: FetchFollower | None,
) -> Any:
    """Batches with per-batch metadata: the high watermark and log start (and, for a follower,
    the batch's stored header; for a compact consumer fetch, what rebuilds the columns left
    out); an empty batch carries them when there is no data. With a ``follower``, the later
    responses of a following fetch come after the first."""
    positions = {"hw": partition.high_watermark, "lso": partition.log.log_start_offset}
    if not stored:
        yield pa.RecordBatch.from_pylist([], schema=schema), pa.py_buffer(wire.encode(positions))
        return
    if replica:  # a follower gets the stored batches as they are, each with its header
        for batch, header in stored:
            yield batch, pa.py_buffer(wire.encode({**positions, "h": header.encode(crc=b"00000000")}))
        return
    while True:
        shared = pa.py_buffer(wire.encode(positions))  # unless a message needs more, all carry the same
        for batch, extra in consumer_messages(stored, schema, convert, plan):
            yield batch, pa.py_buffer(wire.encode({**positions, **extra})) if extra else shared
        if follower is None or (more := follower.next_response(next_offset(stored))) is None:
            return
        stored, plan = more
        positions = {"hw": partition.high_watermark, "lso": partition.log.log_start_offset}
