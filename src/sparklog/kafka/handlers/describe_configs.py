"""DescribeConfigs: a topic's configs (resource type 2), every one sparklog knows with the value
in effect (read from ZooKeeper, so an alter just answered shows), each either set on the topic
(``DYNAMIC_TOPIC_CONFIG``) or the default (``DEFAULT_CONFIG``), with their synonyms when asked (the
value set, then the default it overrides); and the broker's few settings (resource type 4: its
id, the default partition count and replication factor of topics created without them). Only the
keys named, when the request names some. Other resource types are ``INVALID_REQUEST``."""

from __future__ import annotations

from collections.abc import Sequence

from kafka.protocol.admin import DescribeConfigsRequest, DescribeConfigsResponse

from sparklog.errors import InvalidRequest, SparklogError
from sparklog.kafka import admin
from sparklog.kafka.api import ApiSpec, Message, RequestContext
from sparklog.kafka.broker_access import ConfigEntry

API = ApiSpec(DescribeConfigsRequest, DescribeConfigsResponse, 1, 4)

Result = DescribeConfigsResponse.DescribeConfigsResult


def broker_entries(ctx: RequestContext, name: str) -> Sequence[ConfigEntry]:
    """This broker's settings, named by its id (or "": the defaults every broker has, which are
    the same), as in Kafka a broker describes only its own."""
    if name and name != str(ctx.broker.broker_id):
        raise InvalidRequest(
            f"broker {name!r:.40} was asked of broker {ctx.broker.broker_id}: a broker describes its own configs "
            "(send the request to that broker) or, named '', the defaults"
        )
    return ctx.broker.broker_configs()


def _entries(ctx: RequestContext, resource: Message) -> Sequence[ConfigEntry]:
    if resource.resource_type == admin.RESOURCE_TOPIC:
        return ctx.broker.topic_configs(resource.resource_name)
    if resource.resource_type == admin.RESOURCE_BROKER:
        return broker_entries(ctx, resource.resource_name)
    raise InvalidRequest(
        f"{admin.resource_name(resource.resource_type)} configs are not described here: only topic (2) and "
        "broker (4) configs are"
    )


def _describe(ctx: RequestContext, resource: Message, synonyms: bool) -> Message:
    named = {"resource_type": resource.resource_type, "resource_name": resource.resource_name}
    try:
        admin.check_config_resource(ctx.may, resource.resource_type, resource.resource_name)
        entries = _entries(ctx, resource)
    except SparklogError as exc:
        return Result(configs=[], **named, **admin.error_fields(exc))
    keys = resource.configuration_keys
    if keys:  # null or empty: every config
        wanted = set(keys)
        entries = [e for e in entries if e.name in wanted]
    return Result(configs=[admin.describe_entry(e, synonyms) for e in entries], **named, **admin.error_fields(None))


def handle(request: Message, ctx: RequestContext) -> Message:
    results = [_describe(ctx, resource, request.include_synonyms) for resource in request.resources]
    return ctx.response(API, throttle_time_ms=0, results=results)
