"""AlterClientQuotas: users' quotas set and removed rate by rate, in the quotas ``sparklog
quotas`` manages and every broker with ``authorizer.enabled`` enforces. The entity is one ``user``
(a name, or null: the default of every user without its own); the keys are sparklog's rates,
``producer_byte_rate``, ``consumer_byte_rate`` (bytes/s) and ``request_rate`` (requests/s), each a
positive number, set or removed (``remove``) while the user's other rates stay. Kafka's
``request_percentage`` (a share of the broker's request threads' time) cannot be honestly turned
into a rate of requests and is refused, as are ``client-id`` and ``ip`` entities (sparklog's
quotas are per user): ``INVALID_REQUEST`` naming what is supported, as is an entity listed twice
or a key twice in one entry. ``validate_only`` checks and writes nothing. Each entry has its own
result. AlterConfigs on the cluster when the brokers enforce ACLs."""

from __future__ import annotations

from kafka.protocol.admin import AlterClientQuotasRequest, AlterClientQuotasResponse

from sparklog.errors import InvalidRequest, InvalidUserName, SparklogError
from sparklog.kafka import admin, security_admin
from sparklog.kafka.api import ApiSpec, Message, RequestContext
from sparklog.names import check_user_name
from sparklog.security.quotas import MAX_QUOTAS, RATES

API = ApiSpec(AlterClientQuotasRequest, AlterClientQuotasResponse, 0, 1)

Result = AlterClientQuotasResponse.EntryData
Entity = Result.EntityData

USER = "user"
_REFUSED_KEYS = {
    "request_percentage": "request_percentage (a share of the broker's request threads' time) has no sparklog "
    "counterpart: sparklog limits a user's requests per second with request_rate",
    "controller_mutation_rate": "controller_mutation_rate is not supported: sparklog does not throttle topic changes",
}


def user_of(entity: list[Message]) -> str | None:
    """The user an entity names (None: the default), if it is one user."""
    kinds = [part.entity_type for part in entity]
    if kinds != [USER]:
        shown = ", ".join(repr(kind) for kind in kinds)[:100] or "no entity type"
        raise InvalidRequest(f"sparklog's quotas are per user: the entity must be one 'user', got {shown}")
    name: str | None = entity[0].entity_name
    if name is not None:
        try:
            check_user_name(name)
        except InvalidUserName as exc:  # not RESOURCE_NOT_FOUND: the request is bad, not a user missing
            raise InvalidRequest(str(exc)) from None
    return name


def rates_of(ops: list[Message]) -> dict[str, float | None]:
    """An entry's operations as rate -> value (None: removed), each key once and one of sparklog's."""
    rates: dict[str, float | None] = {}
    for op in ops:
        key = op.key
        if key in rates:
            raise InvalidRequest(f"quota key {key!r:.100} is given twice for one entity")
        if key not in RATES:
            reason = _REFUSED_KEYS.get(key, f"unknown quota key {key!r:.100}")
            raise InvalidRequest(f"{reason}; sparklog's user quotas are {', '.join(RATES)}")
        value = op.value
        rates[key] = None if op.remove else int(value) if float(value).is_integer() else value  # 1048576, not .0
    return rates


def _alter(ctx: RequestContext, entry: Message, validate_only: bool) -> Message:
    try:
        ctx.broker.alter_client_quota(user_of(entry.entity), rates_of(entry.ops), validate_only)
    except SparklogError as exc:
        return Result(entity=entry.entity, **admin.error_fields(exc))
    return Result(entity=entry.entity, **admin.error_fields(None))


def _named(entry: Message) -> str:
    return ", ".join(f"{part.entity_type}={part.entity_name or '<default>'}" for part in entry.entity)


def handle(request: Message, ctx: RequestContext) -> Message:
    entries = request.entries
    refused = security_admin.refused_on_cluster(ctx) or security_admin.too_many(len(entries), MAX_QUOTAS, "entries")
    if refused is not None:
        return ctx.response(API, throttle_time_ms=0, entries=[Result(entity=e.entity, **refused) for e in entries])
    entities = {_named(entry): entry.entity for entry in entries}
    results = admin.once_each(
        entries,
        _named,
        lambda entry: _alter(ctx, entry, request.validate_only),
        lambda name, exc: Result(entity=entities[name], **admin.error_fields(exc)),
    )
    return ctx.response(API, throttle_time_ms=0, entries=results)
