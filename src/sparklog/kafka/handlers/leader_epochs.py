"""OffsetForLeaderEpoch: where a leader epoch ends in the leader's log (the start of the next
epoch, or the log end for the current one). A consumer asks after a leader change to find whether
its position was truncated away (KIP-320)."""

from __future__ import annotations

from kafka.protocol.consumer import OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse

from sparklog.errors import SparklogError
from sparklog.kafka import error_codes
from sparklog.kafka.api import ApiSpec, Message, RequestContext
from sparklog.kafka.authorization import TOPIC

API = ApiSpec(OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse, 2, 4)

T = OffsetForLeaderEpochResponse.OffsetForLeaderTopicResult
P = T.EpochEndOffset


def _partition(ctx: RequestContext, topic: str, part: Message) -> Message:
    try:
        ctx.may.check(TOPIC, topic)
        ctx.broker.offsets(topic, part.partition, part.current_leader_epoch)  # leadership and epoch fencing
        epoch, end = ctx.broker.epoch_end(topic, part.partition, part.leader_epoch)
        return P(error_code=error_codes.NONE, partition=part.partition, leader_epoch=epoch, end_offset=end)
    except SparklogError as exc:
        return P(error_code=error_codes.error_code(exc), partition=part.partition, leader_epoch=-1, end_offset=-1)


def handle(request: Message, ctx: RequestContext) -> Message:
    topics = [T(topic=t.topic, partitions=[_partition(ctx, t.topic, p) for p in t.partitions]) for t in request.topics]
    return ctx.response(API, throttle_time_ms=0, topics=topics)
