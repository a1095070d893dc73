"""OffsetDelete: remove some of a group's committed offsets. Refused for a topic the group's
members subscribe to (GROUP_SUBSCRIBED_TO_TOPIC; read from their ``consumer`` protocol metadata,
or every topic when it cannot be read) or that sparklog's own consumers of the group read, and
for a group with members of another protocol type (NON_EMPTY_GROUP)."""

from __future__ import annotations

from kafka.protocol.consumer import OffsetDeleteRequest, OffsetDeleteResponse

from sparklog.errors import SparklogError
from sparklog.kafka import error_codes
from sparklog.kafka.api import ApiSpec, Message, RequestContext
from sparklog.kafka.authorization import GROUP, TOPIC
from sparklog.kafka.group_placement import Placement

API = ApiSpec(OffsetDeleteRequest, OffsetDeleteResponse, 0, 0)

CONSUMER_PROTOCOL = "consumer"

Topic = OffsetDeleteResponse.OffsetDeleteResponseTopic
Partition = Topic.OffsetDeleteResponsePartition


def _group_error(ctx: RequestContext, group: str) -> int:
    if refused := ctx.may.refusal(GROUP, group):
        return refused
    if not Placement(ctx).here(group):
        return error_codes.NOT_COORDINATOR
    summary = ctx.listener.groups.describe(group)
    if summary is not None and summary.members and summary.protocol_type != CONSUMER_PROTOCOL:
        return error_codes.NON_EMPTY_GROUP
    if summary is None:
        try:
            if group not in ctx.broker.groups():
                return error_codes.GROUP_ID_NOT_FOUND
        except SparklogError as exc:
            return error_codes.error_code(exc)
    return error_codes.NONE


def _topic_error(ctx: RequestContext, group: str, topic: str, partitions: list[int]) -> int:
    if refused := ctx.may.refusal(TOPIC, topic):
        return refused
    subscribed = ctx.listener.groups.subscribed_topics(group)
    if subscribed is None or topic in subscribed:
        return error_codes.GROUP_SUBSCRIBED_TO_TOPIC
    try:
        ctx.broker.delete_offsets(group, [(topic, p) for p in partitions])
    except SparklogError as exc:
        if exc.code == "NON_EMPTY_GROUP":  # sparklog's own consumers of the group read it
            return error_codes.GROUP_SUBSCRIBED_TO_TOPIC
        return error_codes.error_code(exc)
    return error_codes.NONE


def handle(request: Message, ctx: RequestContext) -> Message:
    error = _group_error(ctx, request.group_id)
    if error != error_codes.NONE:
        return ctx.response(API, throttle_time_ms=0, error_code=error, topics=[])
    topics = []
    for t in request.topics:
        partitions = [p.partition_index for p in t.partitions]
        topic_error = _topic_error(ctx, request.group_id, t.name, partitions)
        topics.append(
            Topic(name=t.name, partitions=[Partition(partition_index=p, error_code=topic_error) for p in partitions])
        )
    return ctx.response(API, throttle_time_ms=0, error_code=error_codes.NONE, topics=topics)
