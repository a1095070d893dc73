"""ListGroups: the groups this broker coordinates (a Kafka admin client asks every broker):
the classic groups it holds in memory with their state, and groups known only by their committed
offsets in ZooKeeper (sparklog's own consumers' among them), listed ``Empty`` with no protocol
type. Version 4 filters by state, version 5 by type (every group here is ``classic``)."""

from __future__ import annotations

from kafka.protocol.admin import ListGroupsRequest, ListGroupsResponse

from sparklog.errors import SparklogError
from sparklog.kafka import error_codes
from sparklog.kafka.api import ApiSpec, Message, RequestContext
from sparklog.kafka.authorization import CLUSTER, GROUP
from sparklog.kafka.coordinator import GroupState
from sparklog.kafka.group_placement import Placement

API = ApiSpec(ListGroupsRequest, ListGroupsResponse, 0, 5)

GROUP_TYPE = "classic"


def handle(request: Message, ctx: RequestContext) -> Message:
    placement = Placement(ctx)

    every = ctx.may.allowed(CLUSTER)  # Describe on the cluster lists every group, else those described

    def here(group: str) -> bool:
        chosen = placement.coordinator(group)
        mine = chosen is not None and chosen.broker_id == placement.broker_id
        return mine and (every or ctx.may.allowed(GROUP, group))

    try:
        stored = ctx.broker.groups()
    except SparklogError as exc:
        return ctx.response(API, throttle_time_ms=0, error_code=error_codes.error_code(exc), groups=[])
    listed: dict[str, tuple[str, str]] = {g: ("", GroupState.EMPTY.value) for g in stored if here(g)}
    for group in ctx.listener.groups.group_ids():
        summary = ctx.listener.groups.describe(group)
        if summary is not None and here(group):
            listed[group] = (summary.protocol_type, summary.state.value)
    states = {s.lower() for s in request.states_filter or ()} if ctx.api_version >= 4 else set()
    types = {t.lower() for t in request.types_filter or ()} if ctx.api_version >= 5 else set()
    if types and GROUP_TYPE not in types:
        listed = {}
    L = ListGroupsResponse.ListedGroup
    return ctx.response(
        API,
        throttle_time_ms=0,
        error_code=error_codes.NONE,
        groups=[
            L(group_id=group, protocol_type=protocol_type, group_state=state, group_type=GROUP_TYPE)
            for group, (protocol_type, state) in sorted(listed.items())
            if not states or state.lower() in states
        ],
    )
