"""DescribeAcls: the ACLs a filter matches, from the ACLs in ZooKeeper that every broker enforces
and ``sparklog acls list`` lists, grouped by resource pattern (Kafka's numbers:
:mod:`sparklog.kafka.security_admin`). A filter naming a resource type or operation sparklog has
no ACLs of (DelegationToken, IdempotentWrite...) matches none; a number Kafka does not have is
``INVALID_REQUEST``. Answered whether or not the brokers enforce ACLs (``authorizer.enabled``), as
sparklog's own ACL administration is; Describe on the cluster when they do."""

from __future__ import annotations

from kafka.protocol.admin import DescribeAclsRequest, DescribeAclsResponse

from sparklog.errors import SparklogError
from sparklog.kafka import admin, security_admin
from sparklog.kafka.api import ApiSpec, Message, RequestContext
from sparklog.security.acls import AclBinding, ResourcePattern

API = ApiSpec(DescribeAclsRequest, DescribeAclsResponse, 1, 3)

Resource = DescribeAclsResponse.DescribeAclsResource
Description = Resource.AclDescription


def _resources(ctx: RequestContext, request: Message) -> list[Message]:
    by_pattern: dict[ResourcePattern, list[AclBinding]] = {}
    for acl_filter in security_admin.filters_of(request):
        for binding in ctx.broker.describe_acls(acl_filter):
            found = by_pattern.setdefault(binding.pattern, [])
            if binding not in found:  # one binding matched by two filters of a MATCH on any type
                found.append(binding)
    return [
        Resource(
            **security_admin.pattern_numbers(pattern),
            acls=[Description(**security_admin.entry_numbers(binding)) for binding in bindings],
        )
        for pattern, bindings in by_pattern.items()
    ]


def handle(request: Message, ctx: RequestContext) -> Message:
    refused = security_admin.refused_on_cluster(ctx)
    if refused is not None:
        return ctx.response(API, throttle_time_ms=0, resources=[], **refused)
    try:
        resources = _resources(ctx, request)
    except SparklogError as exc:
        return ctx.response(API, throttle_time_ms=0, resources=[], **admin.error_fields(exc))
    return ctx.response(API, throttle_time_ms=0, resources=resources, **admin.error_fields(None))
