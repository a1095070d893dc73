"""DescribeGroups: each group's state, protocol and members as its coordinator holds them (the
chosen protocol, members' metadata and assignments only while Stable, as Kafka answers). A group
known only by its committed offsets is ``Empty``; one not known at all is ``Dead``, and from
version 6 GROUP_ID_NOT_FOUND. Authorized operations are not computed (the listener has no ACLs)."""

from __future__ import annotations

from kafka.protocol.admin import DescribeGroupsRequest, DescribeGroupsResponse

from sparklog.errors import SparklogError
from sparklog.kafka import error_codes
from sparklog.kafka.api import ApiSpec, Message, RequestContext
from sparklog.kafka.authorization import GROUP
from sparklog.kafka.coordinator import GroupState
from sparklog.kafka.group_placement import Placement

API = ApiSpec(DescribeGroupsRequest, DescribeGroupsResponse, 0, 6)

Described = DescribeGroupsResponse.DescribedGroup
Member = Described.DescribedGroupMember


def _empty(group: str, error: int, state: str, message: str | None = None) -> Message:
    return Described(
        error_code=error,
        error_message=message,
        group_id=group,
        group_state=state,
        protocol_type="",
        protocol_data="",
        members=[],
    )


def handle(request: Message, ctx: RequestContext) -> Message:
    placement = Placement(ctx)
    stored: set[str] | None = None
    out = []
    for group in request.groups:
        if refused := ctx.may.refusal(GROUP, group):
            out.append(_empty(group, refused, ""))
            continue
        if not placement.here(group):
            out.append(_empty(group, error_codes.NOT_COORDINATOR, ""))
            continue
        summary = ctx.listener.groups.describe(group)
        if summary is not None:
            members = [
                Member(
                    member_id=m.member_id,
                    group_instance_id=m.group_instance_id,
                    client_id=m.client_id,
                    client_host=m.client_host,
                    member_metadata=m.metadata,
                    member_assignment=m.assignment,
                )
                for m in summary.members
            ]
            out.append(
                Described(
                    error_code=error_codes.NONE,
                    group_id=group,
                    group_state=summary.state.value,
                    protocol_type=summary.protocol_type,
                    protocol_data=summary.protocol_name,
                    members=members,
                )
            )
            continue
        try:
            if stored is None:
                stored = set(ctx.broker.groups())
        except SparklogError as exc:
            out.append(_empty(group, error_codes.error_code(exc), "", str(exc)))
            continue
        if group in stored:
            out.append(_empty(group, error_codes.NONE, GroupState.EMPTY.value))
        elif ctx.api_version >= 6:
            out.append(
                _empty(group, error_codes.GROUP_ID_NOT_FOUND, GroupState.DEAD.value, f"Group {group} not found.")
            )
        else:
            out.append(_empty(group, error_codes.NONE, GroupState.DEAD.value))
    return ctx.response(API, throttle_time_ms=0, groups=out)
