"""ListOffsets: a partition's earliest offset (``-2``; in the lake's table when the lake reaches
the log), its latest (``-1``: the high watermark, as read_uncommitted and without transactions the
last stable offset is the same), or the first offset at or after a timestamp. Versions above 6
add the maximum-timestamp and tiered-storage queries, not answered here."""

from __future__ import annotations

from kafka.protocol.consumer import ListOffsetsRequest, ListOffsetsResponse

from sparklog.errors import InvalidRequest, SparklogError
from sparklog.kafka import error_codes
from sparklog.kafka.api import ApiSpec, Message, RequestContext
from sparklog.kafka.authorization import TOPIC

API = ApiSpec(ListOffsetsRequest, ListOffsetsResponse, 1, 6)

LATEST = -1
EARLIEST = -2

T = ListOffsetsResponse.ListOffsetsTopicResponse
P = T.ListOffsetsPartitionResponse


def _partition(ctx: RequestContext, topic: str, part: Message) -> Message:
    try:
        ctx.may.check(TOPIC, topic)
        offsets = ctx.broker.offsets(topic, part.partition_index, part.current_leader_epoch)
        if part.timestamp == LATEST:
            offset, timestamp = offsets.high_watermark, -1
        elif part.timestamp == EARLIEST:
            offset, timestamp = offsets.log_start_offset, -1
        elif part.timestamp >= 0:
            found = ctx.broker.offset_for_time(topic, part.partition_index, part.timestamp)
            offset, timestamp = found if found is not None else (-1, -1)
        else:
            raise InvalidRequest(f"timestamp {part.timestamp} is not a time, -1 (latest) or -2 (earliest)")
        return P(
            partition_index=part.partition_index,
            error_code=error_codes.NONE,
            timestamp=timestamp,
            offset=offset,
            leader_epoch=offsets.leader_epoch,
        )
    except SparklogError as exc:
        return P(
            partition_index=part.partition_index,
            error_code=error_codes.error_code(exc),
            timestamp=-1,
            offset=-1,
            leader_epoch=-1,
        )


def handle(request: Message, ctx: RequestContext) -> Message:
    topics = [T(name=t.name, partitions=[_partition(ctx, t.name, p) for p in t.partitions]) for t in request.topics]
    return ctx.response(API, throttle_time_ms=0, topics=topics)
