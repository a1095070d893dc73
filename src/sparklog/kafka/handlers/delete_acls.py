"""DeleteAcls: every ACL a filter matches removed from the ones in ZooKeeper that every broker
enforces and ``sparklog acls`` manages, each filter answered with the ACLs it matched (an ACL two
filters match is listed under both, as in Kafka). A filter may leave any field open (ANY, a null
name, principal or host) or MATCH every pattern covering a resource name; a bad one is
``INVALID_REQUEST`` naming what is wrong (Kafka's numbers: :mod:`sparklog.kafka.security_admin`),
and the others are applied together. Answered whether or not the brokers enforce ACLs, as
sparklog's own ACL administration is; Alter on the cluster when they do."""

from __future__ import annotations

from kafka.protocol.admin import DeleteAclsRequest, DeleteAclsResponse

from sparklog.errors import SparklogError
from sparklog.kafka import admin, security_admin
from sparklog.kafka.api import ApiSpec, Message, RequestContext
from sparklog.security.acl_store import MAX_ACLS
from sparklog.security.acls import AclBinding, AclFilter

API = ApiSpec(DeleteAclsRequest, DeleteAclsResponse, 1, 3)

Result = DeleteAclsResponse.DeleteAclsFilterResult
Matching = Result.DeleteAclsMatchingAcl


def _parsed(request_filter: Message) -> list[AclFilter] | SparklogError:
    try:
        return security_admin.filters_of(request_filter)
    except SparklogError as exc:
        return exc


def _result(parsed: list[AclFilter] | SparklogError, removed: list[AclBinding] | SparklogError) -> Message:
    """A filter's result: its error, the deletion's, or the removed ACLs it matches."""
    if isinstance(parsed, SparklogError) or isinstance(removed, SparklogError):
        failed = parsed if isinstance(parsed, SparklogError) else removed
        return Result(matching_acls=[], **admin.error_fields(failed))
    matching = [
        Matching(
            **security_admin.pattern_numbers(binding.pattern),
            **security_admin.entry_numbers(binding),
            **admin.error_fields(None),
        )
        for binding in removed
        if any(acl_filter.matches(binding) for acl_filter in parsed)
    ]
    return Result(matching_acls=matching, **admin.error_fields(None))


def handle(request: Message, ctx: RequestContext) -> Message:
    filters = request.filters
    refused = security_admin.refused_on_cluster(ctx) or security_admin.too_many(len(filters), MAX_ACLS, "filters")
    if refused is not None:
        results = [Result(matching_acls=[], **refused) for _ in filters]
        return ctx.response(API, throttle_time_ms=0, filter_results=results)
    parsed = [_parsed(request_filter) for request_filter in filters]
    valid = [acl_filter for p in parsed if not isinstance(p, SparklogError) for acl_filter in p]
    removed: list[AclBinding] | SparklogError = []
    if valid:
        try:
            removed = list(ctx.broker.delete_acls(valid))
        except SparklogError as exc:
            removed = exc
    return ctx.response(API, throttle_time_ms=0, filter_results=[_result(p, removed) for p in parsed])
