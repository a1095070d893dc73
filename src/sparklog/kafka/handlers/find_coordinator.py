"""FindCoordinator: the broker coordinating a consumer group (chosen by
:mod:`sparklog.kafka.group_placement` among the live brokers with a Kafka listener). Version 4
and later ask for many keys at once. Only groups (key type 0) have coordinators: transactions
(key type 1) are not supported, so their coordinator is refused as InitProducerId refuses
transactional ids."""

from __future__ import annotations

from kafka.protocol.metadata import FindCoordinatorRequest, FindCoordinatorResponse

from sparklog.kafka import error_codes
from sparklog.kafka.api import ApiSpec, Message, RequestContext
from sparklog.kafka.authorization import ApiPermissions
from sparklog.kafka.broker_access import BrokerEndpoint
from sparklog.kafka.group_placement import Placement
from sparklog.security.acls import ResourceType

API = ApiSpec(FindCoordinatorRequest, FindCoordinatorResponse, 0, 6)

GROUP = 0
TRANSACTION = 1


def find(
    placement: Placement, may: ApiPermissions, key: str, key_type: int
) -> tuple[int, str | None, BrokerEndpoint | None]:
    """(error, error message, the coordinator) for one key (Describe on the group needed)."""
    if key_type == TRANSACTION:
        return error_codes.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, "transactions are not supported", None
    if key_type != GROUP:
        return error_codes.INVALID_REQUEST, f"key type {key_type} has no coordinator here (groups: 0)", None
    if refused := may.refusal(ResourceType.GROUP, key):
        return refused, f"{may.principal} may not Describe group {key!r}", None
    chosen = placement.coordinator(key)
    if chosen is None:
        return error_codes.COORDINATOR_NOT_AVAILABLE, "no live broker has a Kafka listener", None
    return error_codes.NONE, None, chosen


def handle(request: Message, ctx: RequestContext) -> Message:
    placement = Placement(ctx)
    key_type = request.key_type if ctx.api_version >= 1 else GROUP
    if ctx.api_version < 4:
        error, message, chosen = find(placement, ctx.may, request.key, key_type)
        return ctx.response(
            API,
            throttle_time_ms=0,
            error_code=error,
            error_message=message,
            node_id=chosen.broker_id if chosen else -1,
            host=chosen.host if chosen else "",
            port=chosen.port if chosen else -1,
        )
    coordinators = []
    for key in request.coordinator_keys:
        error, message, chosen = find(placement, ctx.may, key, key_type)
        coordinators.append(
            FindCoordinatorResponse.Coordinator(
                key=key,
                node_id=chosen.broker_id if chosen else -1,
                host=chosen.host if chosen else "",
                port=chosen.port if chosen else -1,
                error_code=error,
                error_message=message,
            )
        )
    return ctx.response(API, throttle_time_ms=0, coordinators=coordinators)
