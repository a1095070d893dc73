"""Metadata: the live brokers at their advertised Kafka addresses, the controller, and each named
topic's partitions (leader, leader epoch, replicas, ISR). Topics are not created by asking for
them (``allow_auto_topic_creation`` is ignored: topics are created with CreateTopics or
``sparklog topics create``); an unknown topic is ``UNKNOWN_TOPIC_OR_PARTITION``."""

from __future__ import annotations

import uuid

from kafka.protocol.metadata import MetadataRequest, MetadataResponse

from sparklog.kafka import error_codes
from sparklog.kafka.api import ApiSpec, Message, RequestContext
from sparklog.kafka.broker_access import TopicInfo

API = ApiSpec(MetadataRequest, MetadataResponse, 0, 12)  # 13 names topics by id only

NO_TOPIC_ID = uuid.UUID(int=0)  # sparklog's topics have no ids; clients then go by name


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


def handle(request: Message, ctx: RequestContext) -> Message:
    cluster = ctx.broker.cluster(requested_topics(request, ctx.api_version))
    B = MetadataResponse.MetadataResponseBroker
    return ctx.response(
        API,
        throttle_time_ms=0,
        brokers=[B(node_id=b.broker_id, host=b.host, port=b.port, rack=None) for b in cluster.brokers],
        cluster_id=cluster.cluster_id,
        controller_id=cluster.controller_id,
        topics=[_topic(t) for t in cluster.topics],
    )
