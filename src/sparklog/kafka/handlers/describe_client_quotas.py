"""DescribeClientQuotas: the users' quotas ``sparklog quotas list`` lists (the default, every user
without its own, is the ``user`` entity with a null name), each rate by sparklog's key:
``producer_byte_rate``, ``consumer_byte_rate`` (bytes/s) and ``request_rate`` (requests/s; Kafka's
``request_percentage`` has no sparklog counterpart). The filter is Kafka's: components exact (a
name), default or any name of an entity type, ``strict`` for entities of those types only, bad
components ``INVALID_REQUEST`` and an entity type Kafka does not have ``UNSUPPORTED_VERSION`` (as
Kafka answers). sparklog keeps quotas per user only, so a component of ``client-id`` or ``ip``
matches nothing. DescribeConfigs on the cluster when the brokers enforce ACLs."""

from __future__ import annotations

from collections.abc import Mapping

from kafka.protocol.admin import DescribeClientQuotasRequest, DescribeClientQuotasResponse

from sparklog.errors import InvalidRequest, SparklogError
from sparklog.kafka import admin, error_codes, security_admin
from sparklog.kafka.api import ApiSpec, Message, RequestContext

API = ApiSpec(DescribeClientQuotasRequest, DescribeClientQuotasResponse, 0, 1)

Entry = DescribeClientQuotasResponse.EntryData

USER, CLIENT_ID, IP = "user", "client-id", "ip"  # Kafka's entity types
EXACT, DEFAULT, SPECIFIED = 0, 1, 2  # a component's match types
_NO_NAME = object()  # a component of any name


class _UnknownEntityType(Exception):
    """A component of an entity type Kafka does not have (Kafka: UNSUPPORTED_VERSION)."""


def components(request: Message) -> dict[str, object]:
    """The filter's components by entity type: a name, None (the default) or :data:`_NO_NAME`
    (any), checked as Kafka checks them."""
    wanted: dict[str, object] = {}
    for component in request.components:
        kind, match_type, match = component.entity_type, component.match_type, component.match
        if not kind:
            raise InvalidRequest("a filter component has an empty entity type")
        if kind in wanted:
            raise InvalidRequest(f"entity type {kind!r:.40} appears more than once in the filter")
        if kind not in (USER, CLIENT_ID, IP):
            raise _UnknownEntityType(f"unsupported entity type {kind!r:.40}; Kafka's are user, client-id and ip")
        if match_type == EXACT:
            if match is None:
                raise InvalidRequest(f"the {kind} component matches an exact name (0) but names none")
            wanted[kind] = match
        elif match_type in (DEFAULT, SPECIFIED):
            if match is not None:
                raise InvalidRequest(f"the {kind} component's match type {match_type} takes no name, got {match!r:.40}")
            wanted[kind] = None if match_type == DEFAULT else _NO_NAME
        else:
            raise InvalidRequest(f"unknown match type {match_type}: 0 (exact), 1 (default) or 2 (any)")
    if IP in wanted and (USER in wanted or CLIENT_ID in wanted):
        raise InvalidRequest("an ip component cannot be combined with a user or client-id component")
    return wanted


def _entries(ctx: RequestContext, request: Message) -> list[Message]:
    wanted = components(request)
    if set(wanted) - {USER} or (request.strict and not wanted):
        return []  # sparklog's quotas are of users alone
    quotas: Mapping[str | None, Mapping[str, float]] = ctx.broker.client_quotas()
    want = wanted.get(USER, _NO_NAME)
    return [
        Entry(
            entity=[Entry.EntityData(entity_type=USER, entity_name=user)],
            values=[Entry.ValueData(key=key, value=float(value)) for key, value in rates.items()],
        )
        for user, rates in quotas.items()
        if want is _NO_NAME or want == user
    ]


def handle(request: Message, ctx: RequestContext) -> Message:
    refused = security_admin.refused_on_cluster(ctx)
    if refused is not None:
        return ctx.response(API, throttle_time_ms=0, entries=None, **refused)
    try:
        entries = _entries(ctx, request)
    except _UnknownEntityType as exc:
        fields = security_admin.error(error_codes.UNSUPPORTED_VERSION, str(exc))
        return ctx.response(API, throttle_time_ms=0, entries=None, **fields)
    except SparklogError as exc:
        return ctx.response(API, throttle_time_ms=0, entries=None, **admin.error_fields(exc))
    return ctx.response(API, throttle_time_ms=0, entries=entries, **admin.error_fields(None))
