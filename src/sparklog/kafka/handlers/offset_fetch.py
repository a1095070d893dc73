"""OffsetFetch: a group's committed offsets (see :mod:`.offset_commit` for where they live), for
the partitions named or, with no topics named (version 2 on), every one the group committed.
A partition without a commit answers offset -1, as Kafka does; metadata strings are not kept
(always ""), nor leader epochs (-1). Version 8 on asks for many groups at once. Offsets are read
from ZooKeeper on each request, so a commit by any client (a sparklog consumer, ``sparklog
groups reset``) is seen at once. ``require_stable`` has nothing to wait for: there are no
transactional commits."""

from __future__ import annotations

from collections.abc import Sequence

from kafka.protocol.consumer import OffsetFetchRequest, OffsetFetchResponse

from sparklog.errors import SparklogError
from sparklog.kafka import error_codes
from sparklog.kafka.api import ApiSpec, Message, RequestContext
from sparklog.kafka.authorization import GROUP, TOPIC
from sparklog.kafka.group_placement import Placement

API = ApiSpec(OffsetFetchRequest, OffsetFetchResponse, 1, 9)  # 10 names topics by id only

NO_OFFSET = -1

# (topic, [(partition, committed offset, error)])
Offsets = list[tuple[str, list[tuple[int, int, int]]]]


def group_offsets(
    ctx: RequestContext, placement: Placement, group: str, topics: Sequence[tuple[str, Sequence[int]]] | None
) -> tuple[int, Offsets]:
    """(group error, offsets by topic) of one group: a topic the principal may not Describe is
    left out of every topic's offsets, and refused when named."""
    if refused := ctx.may.refusal(GROUP, group):
        return refused, []
    if not placement.here(group):
        return error_codes.NOT_COORDINATOR, []
    try:
        if topics is None:
            committed = ctx.broker.committed_offsets(group)
            by_topic: dict[str, list[tuple[int, int, int]]] = {}
            for (topic, partition), offset in sorted(committed.items()):
                if not ctx.may.allowed(TOPIC, topic):
                    continue
                by_topic.setdefault(topic, []).append((partition, offset, error_codes.NONE))
            return error_codes.NONE, list(by_topic.items())
        out: Offsets = []
        for topic, partitions in topics:
            if refused := ctx.may.refusal(TOPIC, topic):
                out.append((topic, [(p, NO_OFFSET, refused) for p in partitions]))
                continue
            try:
                committed = ctx.broker.committed_offsets(group, topic)
                error = error_codes.NONE
            except SparklogError as exc:  # a topic name ZooKeeper cannot hold: no commit can exist
                if exc.code == "COORDINATOR_NOT_AVAILABLE":
                    raise
                committed, error = {}, error_codes.error_code(exc)
            out.append((topic, [(p, committed.get((topic, p), NO_OFFSET), error) for p in partitions]))
        return error_codes.NONE, out
    except SparklogError as exc:
        return error_codes.error_code(exc), []


def _partitions(cls: type, partitions: list[tuple[int, int, int]]) -> list[Message]:
    return [
        cls(partition_index=p, committed_offset=offset, committed_leader_epoch=-1, metadata="", error_code=error)
        for p, offset, error in partitions
    ]


def handle(request: Message, ctx: RequestContext) -> Message:
    placement = Placement(ctx)
    version = ctx.api_version
    if version >= 8:
        G = OffsetFetchResponse.OffsetFetchResponseGroup
        T = G.OffsetFetchResponseTopics
        groups = []
        for asked in request.groups:
            topics = None if asked.topics is None else [(t.name, list(t.partition_indexes)) for t in asked.topics]
            error, offsets = group_offsets(ctx, placement, asked.group_id, topics)
            groups.append(
                G(
                    group_id=asked.group_id,
                    error_code=error,
                    topics=[
                        T(name=t, partitions=_partitions(T.OffsetFetchResponsePartitions, ps)) for t, ps in offsets
                    ],
                )
            )
        return ctx.response(API, throttle_time_ms=0, groups=groups)
    T1 = OffsetFetchResponse.OffsetFetchResponseTopic
    topics = None if request.topics is None else [(t.name, list(t.partition_indexes)) for t in request.topics]
    error, offsets = group_offsets(ctx, placement, request.group_id, topics)
    if error != error_codes.NONE and version < 2:  # no group error field: every partition carries it
        offsets = [(t, [(p, NO_OFFSET, error) for p in ps]) for t, ps in topics or []]
    return ctx.response(
        API,
        throttle_time_ms=0,
        error_code=error,
        topics=[T1(name=t, partitions=_partitions(T1.OffsetFetchResponsePartition, ps)) for t, ps in offsets],
    )
