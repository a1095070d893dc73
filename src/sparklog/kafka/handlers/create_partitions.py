"""CreatePartitions: a topic grown to ``count`` partitions through sparklog's own path (the new
partitions get the topic's replication factor on the live brokers, or the brokers an assignment
names), as ``sparklog topics alter --partitions`` grows it. A count at or below the current one is
``INVALID_PARTITIONS`` (partitions are never removed); ``validate_only`` checks and adds nothing.
The answer waits (at most ``timeout_ms``) until this broker's view of the cluster has the new
partitions."""

from __future__ import annotations

from kafka.protocol.admin import CreatePartitionsRequest, CreatePartitionsResponse

from sparklog.errors import SparklogError
from sparklog.kafka import admin
from sparklog.kafka.api import ApiSpec, Message, RequestContext
from sparklog.kafka.authorization import TOPIC

API = ApiSpec(CreatePartitionsRequest, CreatePartitionsResponse, 0, 3)

Result = CreatePartitionsResponse.CreatePartitionsTopicResult


def _grow(ctx: RequestContext, topic: Message, validate_only: bool, deadline: float | None) -> Message:
    replicas = None if topic.assignments is None else [list(a.broker_ids) for a in topic.assignments]
    try:
        ctx.may.check(TOPIC, topic.name)
        ctx.broker.create_partitions(topic.name, topic.count, replicas or None, validate_only, deadline)
    except SparklogError as exc:
        return Result(name=topic.name, **admin.error_fields(exc))
    return Result(name=topic.name, **admin.error_fields(None))


def handle(request: Message, ctx: RequestContext) -> Message:
    deadline = admin.deadline(request.timeout_ms)
    results = admin.once_each(
        request.topics,
        lambda topic: topic.name,
        lambda topic: _grow(ctx, topic, request.validate_only, deadline),
        lambda name, exc: Result(name=name, **admin.error_fields(exc)),
    )
    return ctx.response(API, throttle_time_ms=0, results=results)
