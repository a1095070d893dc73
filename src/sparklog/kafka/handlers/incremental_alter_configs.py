"""IncrementalAlterConfigs: a topic's configs changed through sparklog's own alter (the whole
result validated as one ``TopicConfig``, then one compare-and-set of the topic's znode; the
brokers pick it up by watch), as ``sparklog topics alter --config/--delete-config`` changes them.
``SET`` sets a value, ``DELETE`` removes the override (the default applies again; sparklog's
``partitioner`` cannot be removed); ``APPEND`` and ``SUBTRACT`` (list configs) are refused with
``INVALID_REQUEST``, as is a broker's config: a broker's settings are its properties file's.
``validate_only`` checks and changes nothing."""

from __future__ import annotations

from kafka.protocol.admin import IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse

from sparklog.errors import InvalidRequest, SparklogError
from sparklog.kafka import admin
from sparklog.kafka.api import ApiSpec, Message, RequestContext

API = ApiSpec(IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse, 0, 1)

SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
OPERATION_NAMES = {SET: "SET", DELETE: "DELETE", APPEND: "APPEND", SUBTRACT: "SUBTRACT"}

Result = IncrementalAlterConfigsResponse.AlterConfigsResourceResponse


def changes(configs: list[Message]) -> tuple[dict[str, str], list[str]]:
    """The values set and the overrides deleted, each config named once."""
    values: dict[str, str] = {}
    deleted: list[str] = []
    seen: set[str] = set()
    for config in configs:
        name, operation = config.name, config.config_operation
        if name in seen:
            raise InvalidRequest(f"config {name!r:.100} is changed twice in one request")
        seen.add(name)
        if operation == SET:
            if config.value is None:
                raise InvalidRequest(f"SET of config {name!r:.100} has no value")
            values[name] = config.value
        elif operation == DELETE:
            deleted.append(name)
        elif operation in (APPEND, SUBTRACT):
            raise InvalidRequest(
                f"{OPERATION_NAMES[operation]} of config {name!r:.100} is not supported: topic configs are changed "
                "with SET and DELETE"
            )
        else:
            raise InvalidRequest(f"unknown config operation {operation} for {name!r:.100} (SET 0, DELETE 1)")
    return values, deleted


def refuse_unless_topic(resource_type: int) -> None:
    if resource_type == admin.RESOURCE_BROKER:
        raise InvalidRequest(
            "broker configs are not changed while a broker runs: set them in its properties file and restart it"
        )
    if resource_type != admin.RESOURCE_TOPIC:
        raise InvalidRequest(
            f"{admin.resource_name(resource_type)} configs are not altered here: only topic (2) configs are"
        )


def _alter(ctx: RequestContext, resource: Message, validate_only: bool) -> Message:
    named = {"resource_type": resource.resource_type, "resource_name": resource.resource_name}
    try:
        admin.check_config_resource(ctx.may, resource.resource_type, resource.resource_name)
        refuse_unless_topic(resource.resource_type)
        values, deleted = changes(resource.configs)
        ctx.broker.alter_topic_configs(resource.resource_name, values, deleted, validate_only)
    except SparklogError as exc:
        return Result(**named, **admin.error_fields(exc))
    return Result(**named, **admin.error_fields(None))


def handle(request: Message, ctx: RequestContext) -> Message:
    responses = [_alter(ctx, resource, request.validate_only) for resource in request.resources]
    return ctx.response(API, throttle_time_ms=0, responses=responses)
