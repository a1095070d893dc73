"""AlterUserScramCredentials: users' SCRAM credentials set or removed as ``sparklog users`` sets
and removes them. An upsertion carries what Kafka's clients send: the user, mechanism, iterations,
salt and salted password (never the password); the broker derives the stored and server keys.
Each user has its own result, as in Kafka: a user named twice in the request (upserted or deleted)
is ``DUPLICATE_RESOURCE``; SCRAM-SHA-512 is ``UNSUPPORTED_SASL_MECHANISM`` (sparklog's
credentials are SCRAM-SHA-256 only), as is a mechanism Kafka does not have; iterations outside
Kafka's 4096-16384, an empty or unusable name, a salt or salted password of the wrong size
``UNACCEPTABLE_CREDENTIAL``; deleting a user without a credential ``RESOURCE_NOT_FOUND``. Alter on
the cluster when the brokers enforce ACLs."""

from __future__ import annotations

from collections import Counter

from kafka.protocol.admin import AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse

from sparklog.errors import SparklogError
from sparklog.kafka import admin, error_codes, security_admin
from sparklog.kafka.api import ApiSpec, Message, RequestContext
from sparklog.names import check_user_name
from sparklog.security.credential_store import MAX_USERS

API = ApiSpec(AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse, 0, 0)

Result = AlterUserScramCredentialsResponse.AlterUserScramCredentialsResult
Fields = dict[str, object]


def _mechanism_refused(mechanism: int) -> Fields | None:
    if mechanism == security_admin.SCRAM_SHA_256:
        return None
    named = "SCRAM-SHA-512 is" if mechanism == security_admin.SCRAM_SHA_512 else f"SCRAM mechanism {mechanism} is"
    return security_admin.error(
        error_codes.UNSUPPORTED_SASL_MECHANISM,
        f"{named} not supported: sparklog's users have SCRAM-SHA-256 credentials (mechanism "
        f"{security_admin.SCRAM_SHA_256})",
    )


def _delete(ctx: RequestContext, deletion: Message) -> Fields:
    refused = _mechanism_refused(deletion.mechanism)
    if refused is not None:
        return refused
    try:
        removed = ctx.broker.delete_scram_credential(check_user_name(deletion.name))
    except SparklogError as exc:  # a name no user can have: RESOURCE_NOT_FOUND
        return admin.error_fields(exc)
    if not removed:
        message = f"user {deletion.name!r:.100} has no SCRAM credential to delete"
        return security_admin.error(error_codes.RESOURCE_NOT_FOUND, message)
    return admin.error_fields(None)


def _upsert(ctx: RequestContext, upsertion: Message) -> Fields:
    if not upsertion.name:
        return security_admin.error(error_codes.UNACCEPTABLE_CREDENTIAL, "a user name must not be empty")
    refused = _mechanism_refused(upsertion.mechanism)
    if refused is not None:
        return refused
    try:
        check_user_name(upsertion.name)
    except SparklogError as exc:
        return security_admin.error(error_codes.UNACCEPTABLE_CREDENTIAL, str(exc))
    salt, salted = bytes(upsertion.salt), bytes(upsertion.salted_password)
    try:  # the store checks iterations, salt and salted password before it writes
        ctx.broker.upsert_scram_credential(upsertion.name, salt, salted, upsertion.iterations)
    except SparklogError as exc:
        return admin.error_fields(exc)
    return admin.error_fields(None)


def handle(request: Message, ctx: RequestContext) -> Message:
    entries = [*((d, _delete) for d in request.deletions), *((u, _upsert) for u in request.upsertions)]
    counts = Counter(entry.name for entry, _ in entries)
    refused = security_admin.refused_on_cluster(ctx) or security_admin.too_many(len(entries), MAX_USERS, "users")
    if refused is not None:
        return ctx.response(API, throttle_time_ms=0, results=[Result(user=name, **refused) for name in counts])
    results = []
    answered: set[str] = set()
    for entry, alter in entries:
        name = entry.name
        if name in answered:
            continue
        answered.add(name)
        if counts[name] > 1:
            message = f"user {name!r:.100} is altered more than once in the request: alter each user once"
            results.append(Result(user=name, **security_admin.error(error_codes.DUPLICATE_RESOURCE, message)))
        else:
            results.append(Result(user=name, **alter(ctx, entry)))
    return ctx.response(API, throttle_time_ms=0, results=results)
