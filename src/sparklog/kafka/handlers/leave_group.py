"""LeaveGroup: members leave a group at once (from version 3 several, each with its own error;
a member may be named by its ``group.instance.id`` alone), so the others rebalance without
waiting out a session timeout."""

from __future__ import annotations

from kafka.protocol.consumer import LeaveGroupRequest, LeaveGroupResponse

from sparklog.kafka import error_codes
from sparklog.kafka.api import ApiSpec, Message, RequestContext
from sparklog.kafka.authorization import GROUP
from sparklog.kafka.group_placement import Placement

API = ApiSpec(LeaveGroupRequest, LeaveGroupResponse, 0, 5)

MemberResponse = LeaveGroupResponse.MemberResponse


def handle(request: Message, ctx: RequestContext) -> Message:
    batched = ctx.api_version >= 3
    if batched:
        leaving = [(m.member_id or "", m.group_instance_id) for m in request.members]
    else:
        leaving = [(request.member_id or "", None)]
    if refused := ctx.may.refusal(GROUP, request.group_id):
        return ctx.response(API, throttle_time_ms=0, error_code=refused, members=[])
    if not Placement(ctx).here(request.group_id):
        return ctx.response(API, throttle_time_ms=0, error_code=error_codes.NOT_COORDINATOR, members=[])
    errors = ctx.listener.groups.leave(request.group_id, leaving)
    if not batched:
        return ctx.response(API, throttle_time_ms=0, error_code=errors[0])
    members = [
        MemberResponse(member_id=member_id, group_instance_id=instance_id, error_code=error)
        for (member_id, instance_id), error in zip(leaving, errors, strict=True)
    ]
    return ctx.response(API, throttle_time_ms=0, error_code=error_codes.NONE, members=members)
