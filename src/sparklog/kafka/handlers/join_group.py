"""JoinGroup: a member enters a consumer group's join phase (:mod:`sparklog.kafka.coordinator`)
and waits for it to complete; the answer carries the new generation, the chosen protocol, the
leader, and (the leader's only) every member's metadata to compute the assignment from. From
version 4 a member without an id is given one first (MEMBER_ID_REQUIRED) and joins again with it.
Group ids follow sparklog's naming rule (they name ZooKeeper znodes): others are INVALID_GROUP_ID."""

from __future__ import annotations

from kafka.protocol.consumer import JoinGroupRequest, JoinGroupResponse

from sparklog.errors import InvalidGroupId
from sparklog.kafka import error_codes
from sparklog.kafka.api import ApiSpec, Message, RequestContext
from sparklog.kafka.authorization import GROUP
from sparklog.kafka.coordinator import JoinRequest, JoinResult
from sparklog.kafka.group_placement import Placement
from sparklog.names import check_group_id

API = ApiSpec(JoinGroupRequest, JoinGroupResponse, 0, 9)

Member = JoinGroupResponse.JoinGroupResponseMember


def _answer(ctx: RequestContext, result: JoinResult) -> Message:
    nullable = ctx.api_version >= 7  # protocol type and name may be null from version 7
    return ctx.response(
        API,
        throttle_time_ms=0,
        error_code=result.error,
        generation_id=result.generation_id,
        protocol_type=result.protocol_type,
        protocol_name=result.protocol_name if nullable or result.protocol_name is not None else "",
        leader=result.leader,
        skip_assignment=False,
        member_id=result.member_id,
        members=[
            Member(member_id=m.member_id, group_instance_id=m.group_instance_id, metadata=m.metadata)
            for m in result.members
        ],
    )


def handle(request: Message, ctx: RequestContext) -> Message:
    version = ctx.api_version
    member_id = request.member_id or ""
    if refused := ctx.may.refusal(GROUP, request.group_id):
        return _answer(ctx, JoinResult(refused, member_id))
    if not Placement(ctx).here(request.group_id):
        return _answer(ctx, JoinResult(error_codes.NOT_COORDINATOR, member_id))
    try:
        check_group_id(request.group_id)
    except InvalidGroupId:
        return _answer(ctx, JoinResult(error_codes.INVALID_GROUP_ID, member_id))
    join = JoinRequest(
        group_id=request.group_id,
        member_id=member_id,
        protocol_type=request.protocol_type or "",
        protocols=tuple((p.name, bytes(p.metadata)) for p in request.protocols),
        session_timeout_ms=request.session_timeout_ms,
        rebalance_timeout_ms=request.rebalance_timeout_ms if version >= 1 else -1,
        group_instance_id=request.group_instance_id if version >= 5 else None,
        client_id=ctx.client_id or "",
        client_host=f"/{ctx.peer[0]}",
        require_known_member_id=version >= 4,
    )
    return _answer(ctx, ctx.listener.groups.join(join))
