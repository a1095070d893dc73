"""Produce (``do_put``): a producer's stream of record batches for one partition, or its
multi-partition stream (:class:`~sparklog.broker.produce_request.ProduceRequestStream`). Each
batch is checked again against the caller's rights and quota before it is appended; with acks
other than 0 each gets its offsets back as the stream's metadata."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.flight as flight

from sparklog.broker.call_permissions import TOPIC
from sparklog.broker.log.batch_validation import MAX_BATCH_ROWS
from sparklog.broker.produce_request import ProduceRequestStream, ProduceTarget, append_produced
from sparklog.broker.request_fields import int_field, topic_field
from sparklog.broker.served_call import ServedCall
from sparklog.errors import InvalidRequest, NotLeader
from sparklog.protocol import wire
from sparklog.protocol.record_frames import frames, schema_of
from sparklog.security.acls import Operation

Reader = flight.MetadataRecordBatchReader
Writer = flight.FlightMetadataWriter


def produce_acks(request: dict[str, Any]) -> str:
    """The request's acks: ``"0"``, ``"1"`` or ``"all"`` (``-1`` is ``all``)."""
    acks = str(request.get("acks", "1"))
    if acks not in ("0", "1", "all", "-1"):
        raise InvalidRequest(f"acks must be 0, 1 or all, got {acks!r}")
    return "all" if acks == "-1" else acks


def produce_many(broker: ProduceTarget, call: ServedCall, reader: Reader, writer: Writer) -> None:
    """Batches for many partitions on one stream, each naming its partition in its metadata."""
    throttled, may = call.throttled, call.may
    stream = ProduceRequestStream(broker, produce_acks(call.request), schema_of(call.request), call.stopping)
    stream.serve(
        reader,
        writer,
        lambda topic: may.check(Operation.WRITE, TOPIC, topic),
        lambda size: throttled("produce", size),
        call.recheck,  # the row needs nothing more: the session
    )


def produce(broker: ProduceTarget, call: ServedCall, reader: Reader, writer: Writer) -> None:
    """Batches for the one partition the request names."""
    request = call.request
    acks = produce_acks(request)
    topic, p = topic_field(request), int_field(request, "partition")
    producer_id = int_field(request, "producer_id", -1)
    sequence = int_field(request, "first_sequence", -1)
    writer_version = request.get("schema_version")
    if writer_version is not None and not isinstance(writer_version, int):
        raise InvalidRequest(f"'schema_version' must be an integer, got {writer_version!r}")
    schema = schema_of(request)
    broker.leader_partition(topic, p, for_write=True)
    for frame in frames(reader):
        call.recheck()  # an open stream: the caller may still write, its session still holds
        partition = broker.leader_partition(topic, p, for_write=True)
        limit = partition.log.config.max_message_bytes
        # refused before it is charged: what a frame declares is the client's claim, and one
        # declaring more than the topic takes must not run up the producer's quota
        frame.check(limit, MAX_BATCH_ROWS)
        call.throttled("produce", frame.declared.decoded_bytes)
        if call.stopping():
            raise NotLeader(f"broker {broker.broker_id} is shutting down")
        if "sequence" in frame.metadata:
            sequence = int_field(frame.metadata, "sequence", -1)  # per batch (idempotence)
        partition = broker.leader_partition(topic, p, for_write=True)  # it may have moved while throttled
        data = frame.decode(schema, partition.log.config.max_message_bytes, MAX_BATCH_ROWS)
        value_schemas = broker.value_schemas.get(topic)
        info = append_produced(partition, data, value_schemas, writer_version, acks, producer_id, sequence)
        if sequence >= 0:
            sequence += data.num_rows
        if acks != "0":
            result = {"base_offset": info.base_offset, "last_offset": info.last_offset, "count": info.count}
            writer.write(pa.py_buffer(wire.encode(result)))
