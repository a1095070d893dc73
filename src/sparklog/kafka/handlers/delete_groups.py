"""DeleteGroups: a group without members goes, with its committed offsets (refused with
NON_EMPTY_GROUP while Kafka consumers are members, or sparklog's own consumers read through it;
GROUP_ID_NOT_FOUND for a group neither held here nor with offsets)."""

from __future__ import annotations

from kafka.protocol.admin import DeleteGroupsRequest, DeleteGroupsResponse

from sparklog.errors import InvalidGroupId, SparklogError
from sparklog.kafka import error_codes
from sparklog.kafka.api import ApiSpec, Message, RequestContext
from sparklog.kafka.authorization import GROUP
from sparklog.kafka.group_placement import Placement
from sparklog.names import check_group_id

API = ApiSpec(DeleteGroupsRequest, DeleteGroupsResponse, 0, 2)

Result = DeleteGroupsResponse.DeletableGroupResult


def _delete(ctx: RequestContext, placement: Placement, group: str) -> int:
    if refused := ctx.may.refusal(GROUP, group):
        return refused
    if not placement.here(group):
        return error_codes.NOT_COORDINATOR
    try:
        check_group_id(group)
    except InvalidGroupId:
        return error_codes.INVALID_GROUP_ID
    coordinator = ctx.listener.groups
    held = coordinator.describe(group) is not None
    error = coordinator.delete(group)
    if error != error_codes.NONE:
        return error
    try:
        stored = group in ctx.broker.groups()
        ctx.broker.delete_offsets(group)
    except SparklogError as exc:
        return error_codes.error_code(exc)
    return error_codes.NONE if held or stored else error_codes.GROUP_ID_NOT_FOUND


def handle(request: Message, ctx: RequestContext) -> Message:
    placement = Placement(ctx)
    results = [Result(group_id=g, error_code=_delete(ctx, placement, g)) for g in request.groups_names]
    return ctx.response(API, throttle_time_ms=0, results=results)
