"""DeleteTopics: topics deleted through sparklog's own deletion (made invisible in one write,
then their znodes removed; the brokers drop their replicas and logs), as ``sparklog topics delete``
deletes them. Each topic has its own result: ``UNKNOWN_TOPIC_OR_PARTITION`` for one there is not,
``INVALID_TOPIC_EXCEPTION`` for a bad name or one of sparklog's internal topics. The answer waits
(at most ``timeout_ms``) until this broker's view of the cluster has let the topics go. Version 6
names topics by id, which sparklog's topics do not have: not served."""

from __future__ import annotations

from kafka.protocol.admin import DeleteTopicsRequest, DeleteTopicsResponse

from sparklog.errors import SparklogError
from sparklog.kafka import admin
from sparklog.kafka.api import ApiSpec, Message, RequestContext
from sparklog.kafka.authorization import TOPIC

API = ApiSpec(DeleteTopicsRequest, DeleteTopicsResponse, 1, 5)

Result = DeleteTopicsResponse.DeletableTopicResult


def _delete(ctx: RequestContext, name: str, deadline: float | None) -> Message:
    try:
        ctx.may.check(TOPIC, name)
        ctx.broker.delete_topic(name, deadline)
    except SparklogError as exc:
        return Result(name=name, **admin.error_fields(exc))
    return Result(name=name, **admin.error_fields(None))


def handle(request: Message, ctx: RequestContext) -> Message:
    deadline = admin.deadline(request.timeout_ms)
    names = list(dict.fromkeys(request.topic_names))  # a name listed twice is deleted (and answered) once
    return ctx.response(API, throttle_time_ms=0, responses=[_delete(ctx, name, deadline) for name in names])
