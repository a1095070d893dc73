"""OffsetCommit: a group's committed offsets, stored where sparklog's own consumers keep theirs
(ZooKeeper, ``consumers/<group>/offsets/<topic>/<partition>``), so ``sparklog groups describe``,
sparklog consumers and Kafka consumers of one group see the same positions.

A member of a group managed by the coordinator commits with its generation and member id, which
must be the group's current ones (a member that fell out of the group must not overwrite the
offsets of the partitions' new owners); generation -1 without a member id is a commit from
outside group management (manual assignment, tools), allowed while the group has no members.
Topics and partitions must exist. The commit's metadata string and leader epoch are not kept
(OffsetFetch answers an empty metadata string and leader epoch -1); ``retention_time_ms`` is
ignored: committed offsets stay until the group or its offsets are deleted. Version 10 names
topics by id, which sparklog's topics do not have."""

from __future__ import annotations

from kafka.protocol.consumer import OffsetCommitRequest, OffsetCommitResponse

from sparklog.errors import InvalidGroupId, SparklogError
from sparklog.kafka import error_codes
from sparklog.kafka.api import ApiSpec, Message, RequestContext
from sparklog.kafka.authorization import GROUP, TOPIC
from sparklog.kafka.broker_access import TopicPartition
from sparklog.kafka.group_placement import Placement
from sparklog.names import check_group_id

API = ApiSpec(OffsetCommitRequest, OffsetCommitResponse, 2, 9)

Topic = OffsetCommitResponse.OffsetCommitResponseTopic
Partition = Topic.OffsetCommitResponsePartition


def _group_error(request: Message, ctx: RequestContext) -> int:
    if refused := ctx.may.refusal(GROUP, request.group_id):
        return refused
    if not Placement(ctx).here(request.group_id):
        return error_codes.NOT_COORDINATOR
    try:
        check_group_id(request.group_id)
    except InvalidGroupId:
        return error_codes.INVALID_GROUP_ID
    return ctx.listener.groups.validate_commit(
        request.group_id, request.generation_id_or_member_epoch, request.member_id or "", ctx.api_version
    )


def handle(request: Message, ctx: RequestContext) -> Message:
    errors: dict[TopicPartition, int] = {}
    group_error = _group_error(request, ctx)
    if group_error != error_codes.NONE:
        errors = {(t.name, p.partition_index): group_error for t in request.topics for p in t.partitions}
    else:
        topics = {
            info.name: info
            for info in ctx.broker.cluster(list({t.name for t in request.topics}), ctx.listener.protocol).topics
        }
        offsets: dict[TopicPartition, int] = {}
        for t in request.topics:
            info = topics[t.name]
            for p in t.partitions:
                key = (t.name, p.partition_index)
                if refused := ctx.may.refusal(TOPIC, t.name):
                    errors[key] = refused
                elif info.error is not None:
                    errors[key] = error_codes.error_code(info.error)
                elif not 0 <= p.partition_index < len(info.partitions):
                    errors[key] = error_codes.UNKNOWN_TOPIC_OR_PARTITION
                elif p.committed_offset < 0:
                    errors[key] = error_codes.INVALID_REQUEST
                else:
                    offsets[key] = p.committed_offset
                    errors[key] = error_codes.NONE
        if offsets:
            try:
                ctx.broker.commit_offsets(request.group_id, offsets)
            except SparklogError as exc:
                code = error_codes.error_code(exc)
                errors.update(dict.fromkeys(offsets, code))
    return ctx.response(
        API,
        throttle_time_ms=0,
        topics=[
            Topic(
                name=t.name,
                partitions=[
                    Partition(partition_index=p.partition_index, error_code=errors[(t.name, p.partition_index)])
                    for p in t.partitions
                ],
            )
            for t in request.topics
        ],
    )
