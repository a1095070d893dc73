"""DescribeUserScramCredentials: users' SCRAM credentials as ``sparklog users list`` lists them
(their mechanism, SCRAM-SHA-256, and iterations; never a salt or key): every user (no names, or
none), or each user named, as in Kafka: one named twice is ``DUPLICATE_RESOURCE``, one without a
credential (or with a name no user can have) ``RESOURCE_NOT_FOUND``. Describe on the cluster when
the brokers enforce ACLs."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

from kafka.protocol.admin import DescribeUserScramCredentialsRequest, DescribeUserScramCredentialsResponse

from sparklog.errors import SparklogError
from sparklog.kafka import admin, error_codes, security_admin
from sparklog.kafka.api import ApiSpec, Message, RequestContext
from sparklog.names import check_user_name
from sparklog.security.credential_store import MAX_USERS

API = ApiSpec(DescribeUserScramCredentialsRequest, DescribeUserScramCredentialsResponse, 0, 0)

Result = DescribeUserScramCredentialsResponse.DescribeUserScramCredentialsResult
Info = Result.CredentialInfo


def _found(user: str, iterations: int) -> Message:
    info = Info(mechanism=security_admin.SCRAM_SHA_256, iterations=iterations)
    return Result(user=user, credential_infos=[info], **admin.error_fields(None))


def _missing(user: str, fields: Mapping[str, object]) -> Message:
    return Result(user=user, credential_infos=[], **fields)


def _named(ctx: RequestContext, names: list[str]) -> list[Message]:
    counts = Counter(names)
    invalid: dict[str, SparklogError] = {}
    for name in counts:
        try:
            check_user_name(name)
        except SparklogError as exc:
            invalid[name] = exc
    found = ctx.broker.scram_iterations([n for n, count in counts.items() if count == 1 and n not in invalid])
    results = []
    for name in counts:
        if counts[name] > 1:
            message = f"user {name!r:.100} is named more than once: describe each user once"
            results.append(_missing(name, security_admin.error(error_codes.DUPLICATE_RESOURCE, message)))
        elif name in invalid:
            results.append(_missing(name, admin.error_fields(invalid[name])))
        elif name in found:
            results.append(_found(name, found[name]))
        else:
            message = f"user {name!r:.100} has no SCRAM credential"
            results.append(_missing(name, security_admin.error(error_codes.RESOURCE_NOT_FOUND, message)))
    return results


def handle(request: Message, ctx: RequestContext) -> Message:
    names = [user.name for user in request.users or ()]
    refused = security_admin.refused_on_cluster(ctx) or security_admin.too_many(len(names), MAX_USERS, "users")
    if refused is not None:
        results = [_missing(name, refused) for name in dict.fromkeys(names)]
        return ctx.response(API, throttle_time_ms=0, results=results, **refused)
    try:
        if names:
            results = _named(ctx, names)
        else:
            results = [_found(user, n) for user, n in ctx.broker.scram_iterations(None).items()]
    except SparklogError as exc:
        return ctx.response(API, throttle_time_ms=0, results=[], **admin.error_fields(exc))
    return ctx.response(API, throttle_time_ms=0, results=results, **admin.error_fields(None))
