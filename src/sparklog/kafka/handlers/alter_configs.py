"""AlterConfigs (the legacy API, before IncrementalAlterConfigs): a topic's overrides replaced by
the ones given, every other one back to its default (sparklog's ``partitioner`` excepted: a Kafka
client does not know it, and removing it would move every key), through sparklog's own alter and
its checks. Broker configs are refused, as in IncrementalAlterConfigs; ``validate_only`` checks
and changes nothing."""

from __future__ import annotations

from kafka.protocol.admin import AlterConfigsRequest, AlterConfigsResponse

from sparklog.errors import SparklogError
from sparklog.kafka import admin
from sparklog.kafka.api import ApiSpec, Message, RequestContext
from sparklog.kafka.handlers.incremental_alter_configs import refuse_unless_topic

API = ApiSpec(AlterConfigsRequest, AlterConfigsResponse, 0, 2)

Result = AlterConfigsResponse.AlterConfigsResourceResponse


def _replace(ctx: RequestContext, resource: Message, validate_only: bool) -> Message:
    named = {"resource_type": resource.resource_type, "resource_name": resource.resource_name}
    try:
        admin.check_config_resource(ctx.may, resource.resource_type, resource.resource_name)
        refuse_unless_topic(resource.resource_type)
        ctx.broker.replace_topic_configs(resource.resource_name, admin.config_values(resource.configs), validate_only)
    except SparklogError as exc:
        return Result(**named, **admin.error_fields(exc))
    return Result(**named, **admin.error_fields(None))


def handle(request: Message, ctx: RequestContext) -> Message:
    responses = [_replace(ctx, resource, request.validate_only) for resource in request.resources]
    return ctx.response(API, throttle_time_ms=0, responses=responses)
