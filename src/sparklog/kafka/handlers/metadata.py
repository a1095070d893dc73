"""Metadata: the live brokers at their advertised Kafka addresses, the controller, and each named
topic's partitions (leader, leader epoch, replicas, ISR). An unknown topic is
``UNKNOWN_TOPIC_OR_PARTITION``, unless the request allows creating it (``allow_auto_topic_creation``,
v4+; always in older versions) and the broker's ``auto.create.topics.enable`` is on (Kafka's
default): then it is created with the default partitions and replication factor, as Kafka does,
and answered ``LEADER_NOT_AVAILABLE`` until its leaders are elected (clients ask again). A topic
the principal may not Describe is left out of a listing of every topic and refused when named;
creating one also needs Create on the cluster or on the topic."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Sequence

from kafka.protocol.metadata import MetadataRequest, MetadataResponse

from sparklog.errors import SparklogError, UnknownTopic
from sparklog.kafka import error_codes
from sparklog.kafka.api import ApiSpec, Message, RequestContext
from sparklog.kafka.authorization import CLUSTER, CREATE, DESCRIBE, TOPIC
from sparklog.kafka.broker_access import TopicInfo

log = logging.getLogger(__name__)

API = ApiSpec(MetadataRequest, MetadataResponse, 0, 12)  # 13 names topics by id only

NO_TOPIC_ID = uuid.UUID(int=0)  # sparklog's topics have no ids; clients then go by name
AUTO_CREATE_WAIT_S = 2.0  # how long an auto-created topic may take to reach this broker's view


def requested_topics(request: Message, version: int) -> list[str] | None:
    """The topics named (None: every topic; in version 0 an empty list means every topic)."""
    topics = request.topics
    if topics is None or (version == 0 and not topics):
        return None
    return [t.name for t in topics]


def _topic(info: TopicInfo) -> Message:
    T = MetadataResponse.MetadataResponseTopic
    P = T.MetadataResponsePartition
    if info.error is not None:
        return T(
            error_code=error_codes.error_code(info.error),
            name=info.name,
            topic_id=NO_TOPIC_ID,
            is_internal=False,
            partitions=[],
        )
    partitions = [
        P(
            error_code=error_codes.NONE if p.leader >= 0 else error_codes.LEADER_NOT_AVAILABLE,
            partition_index=p.partition,
            leader_id=p.leader,
            leader_epoch=p.leader_epoch,
            replica_nodes=list(p.replicas),
            isr_nodes=list(p.isr),
            offline_replicas=[],
        )
        for p in info.partitions
    ]
    return T(
        error_code=error_codes.NONE,
        name=info.name,
        topic_id=NO_TOPIC_ID,
        is_internal=info.internal,
        partitions=partitions,
    )


def _auto_create(ctx: RequestContext, unknown: list[str]) -> None:
    for name in unknown:
        try:
            ctx.broker.create_topic(name, None, None, None, {}, False, time.monotonic() + AUTO_CREATE_WAIT_S)
        except SparklogError as exc:  # created meanwhile by another client, or a name refused
            log.info("auto-creating topic %r: %s", name, exc)


def _may_create(ctx: RequestContext, name: str) -> bool:
    """Create on the cluster, or on the topic itself (Kafka's rule for auto-creation)."""
    return ctx.may.allowed(CLUSTER, operation=CREATE) or ctx.may.allowed(TOPIC, name, CREATE)


def _describable(ctx: RequestContext, topics: Sequence[TopicInfo], listing: bool) -> list[TopicInfo]:
    """The topics the principal may Describe; in a listing the others are left out, when named
    they are ``TOPIC_AUTHORIZATION_FAILED``."""
    kept: list[TopicInfo] = []
    for info in topics:
        try:
            ctx.may.check(TOPIC, info.name, DESCRIBE)
            kept.append(info)
        except SparklogError as exc:
            if not listing:
                kept.append(TopicInfo(info.name, exc))
    return kept


def handle(request: Message, ctx: RequestContext) -> Message:
    names = requested_topics(request, ctx.api_version)
    cluster = ctx.broker.cluster(names, ctx.listener.protocol)
    allowed = ctx.api_version < 4 or request.allow_auto_topic_creation
    if names and allowed and ctx.listener.auto_create_topics:
        unknown = [
            t.name
            for t in cluster.topics
            if isinstance(t.error, UnknownTopic)
            and ctx.may.allowed(TOPIC, t.name, DESCRIBE)
            and _may_create(ctx, t.name)
        ]
        if unknown:
            _auto_create(ctx, unknown)
            cluster = ctx.broker.cluster(names, ctx.listener.protocol)
    B = MetadataResponse.MetadataResponseBroker
    return ctx.response(
        API,
        throttle_time_ms=0,
        brokers=[B(node_id=b.broker_id, host=b.host, port=b.port, rack=None) for b in cluster.brokers],
        cluster_id=cluster.cluster_id,
        controller_id=cluster.controller_id,
        topics=[_topic(t) for t in _describable(ctx, cluster.topics, names is None)],
    )
