"""Heartbeat: a member keeps its session in the group; REBALANCE_IN_PROGRESS tells it to rejoin,
ILLEGAL_GENERATION and UNKNOWN_MEMBER_ID that it fell out of the group."""

from __future__ import annotations

from kafka.protocol.consumer import HeartbeatRequest, HeartbeatResponse

from sparklog.kafka import error_codes
from sparklog.kafka.api import ApiSpec, Message, RequestContext
from sparklog.kafka.authorization import GROUP
from sparklog.kafka.group_placement import Placement

API = ApiSpec(HeartbeatRequest, HeartbeatResponse, 0, 4)


def handle(request: Message, ctx: RequestContext) -> Message:
    if refused := ctx.may.refusal(GROUP, request.group_id):
        error = refused
    elif not Placement(ctx).here(request.group_id):
        error = error_codes.NOT_COORDINATOR
    else:
        error = ctx.listener.groups.heartbeat(request.group_id, request.generation_id, request.member_id)
    return ctx.response(API, throttle_time_ms=0, error_code=error)
