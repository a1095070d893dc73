"""DescribeLogDirs: this broker's log dir (sparklog's one data dir, by its absolute path) with the
partition replicas it holds, each with the bytes of its log segments (local ones: what the lake
holds is not counted, as Kafka leaves remote storage out) and how far its log end is behind the high
watermark it knows; from version 4 the volume's total and usable bytes. Every replica, or those of
the topics and partitions named (one not held here is left out, as in Kafka). Describe on the
cluster when the brokers enforce ACLs (refused: ``CLUSTER_AUTHORIZATION_FAILED``, from version 3 in
the response's own error code; before, an empty answer, as in Kafka)."""

from __future__ import annotations

from collections.abc import Sequence

from kafka.protocol.admin import DescribeLogDirsRequest, DescribeLogDirsResponse

from sparklog.kafka import security_admin
from sparklog.kafka.api import ApiSpec, Message, RequestContext
from sparklog.kafka.broker_access import ReplicaSize

API = ApiSpec(DescribeLogDirsRequest, DescribeLogDirsResponse, 1, 5)

Result = DescribeLogDirsResponse.DescribeLogDirsResult
Topic = Result.DescribeLogDirsTopic
Partition = Topic.DescribeLogDirsPartition


def _wanted(request: Message, replicas: Sequence[ReplicaSize]) -> list[ReplicaSize]:
    if request.topics is None:
        return list(replicas)
    named = {(t.topic, p) for t in request.topics for p in t.partitions}
    return [r for r in replicas if (r.topic, r.partition) in named]


def _topics(replicas: list[ReplicaSize]) -> list[Message]:
    by_topic: dict[str, list[Message]] = {}
    for replica in sorted(replicas, key=lambda r: (r.topic, r.partition)):
        by_topic.setdefault(replica.topic, []).append(
            Partition(
                partition_index=replica.partition,
                partition_size=replica.size_bytes,
                offset_lag=replica.offset_lag,
                is_future_key=False,
            )
        )
    return [Topic(name=name, partitions=partitions) for name, partitions in by_topic.items()]


def handle(request: Message, ctx: RequestContext) -> Message:
    refused = security_admin.refused_on_cluster(ctx)
    if refused is not None:
        return ctx.response(API, throttle_time_ms=0, error_code=refused["error_code"], results=[])
    log_dir = ctx.broker.log_dir()
    result = Result(
        error_code=0,
        log_dir=log_dir.path,
        topics=_topics(_wanted(request, log_dir.replicas)),
        total_bytes=log_dir.total_bytes,
        usable_bytes=log_dir.usable_bytes,
        is_cordoned=False,
    )
    return ctx.response(API, throttle_time_ms=0, error_code=0, results=[result])
