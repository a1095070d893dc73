"""SyncGroup: after a join phase, the leader hands in every member's assignment and each member
gets its own (a member's request waits for the leader's). Assignments are opaque bytes here: the
consumers' own protocol (range, round robin, cooperative sticky...) computes them."""

from __future__ import annotations

from kafka.protocol.consumer import SyncGroupRequest, SyncGroupResponse

from sparklog.kafka import error_codes
from sparklog.kafka.api import ApiSpec, Message, RequestContext
from sparklog.kafka.authorization import GROUP
from sparklog.kafka.coordinator import SyncResult
from sparklog.kafka.group_placement import Placement

API = ApiSpec(SyncGroupRequest, SyncGroupResponse, 0, 5)


def handle(request: Message, ctx: RequestContext) -> Message:
    if refused := ctx.may.refusal(GROUP, request.group_id):
        result = SyncResult(refused)
    elif not Placement(ctx).here(request.group_id):
        result = SyncResult(error_codes.NOT_COORDINATOR)
    else:
        named = ctx.api_version >= 5  # the request names the protocol it expects
        result = ctx.listener.groups.sync(
            request.group_id,
            request.generation_id,
            request.member_id,
            {a.member_id: bytes(a.assignment) for a in request.assignments},
            request.protocol_type if named else None,
            request.protocol_name if named else None,
        )
    return ctx.response(
        API,
        throttle_time_ms=0,
        error_code=result.error,
        protocol_type=result.protocol_type,
        protocol_name=result.protocol_name,
        assignment=result.assignment,
    )
