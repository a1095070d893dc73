"""CreateTopics: topics created through sparklog's own creation (the checks, the chunked
all-or-nothing write, the replicas spread over the live brokers) as ``sparklog topics create``
creates them. ``-1`` partitions or replication factor is the broker's default (sparklog's: 1 and
1); a replica assignment is taken partition by partition instead; configs are sparklog's topic
configs (Kafka's names; one sparklog does not know is ``INVALID_CONFIG``); ``validate_only`` runs
every check and creates nothing. Each topic has its own result and error (``TOPIC_ALREADY_EXISTS``,
``INVALID_TOPIC_EXCEPTION``, ``INVALID_PARTITIONS``, ``INVALID_REPLICATION_FACTOR``,
``INVALID_CONFIG``...); from version 5 a created topic's result says its partitions, replication
factor and every config. The answer waits (at most ``timeout_ms``) until this broker's view of the
cluster has the new topics, so the client's next Metadata request finds them."""

from __future__ import annotations

from kafka.protocol.admin import CreateTopicsRequest, CreateTopicsResponse

from sparklog.errors import InvalidReplicaAssignment, InvalidRequest, SparklogError
from sparklog.kafka import admin
from sparklog.kafka.api import ApiSpec, Message, RequestContext
from sparklog.kafka.authorization import CLUSTER, TOPIC
from sparklog.kafka.broker_access import CreatedTopic

API = ApiSpec(CreateTopicsRequest, CreateTopicsResponse, 2, 7)

BROKER_DEFAULT = -1  # num_partitions / replication_factor: the broker's default

Result = CreateTopicsResponse.CreatableTopicResult
ResultConfig = Result.CreatableTopicConfigs


def replica_assignment(topic: Message) -> list[list[int]] | None:
    """The topic's explicit assignment as each partition's brokers in partition order (None: the
    broker assigns them); the indexes must be 0..n-1, each once."""
    if not topic.assignments:
        return None
    if topic.num_partitions != BROKER_DEFAULT or topic.replication_factor != BROKER_DEFAULT:
        raise InvalidRequest(
            "a replica assignment was given together with num_partitions or replication_factor: "
            "give one or the other (those two -1 with an assignment)"
        )
    by_index = {a.partition_index: list(a.broker_ids) for a in topic.assignments}
    if len(by_index) != len(topic.assignments) or sorted(by_index) != list(range(len(by_index))):
        indexes = sorted(a.partition_index for a in topic.assignments)
        raise InvalidReplicaAssignment(
            f"the replica assignment must name partitions 0 to {len(topic.assignments) - 1} once each; "
            f"it names {indexes[:20]}"
        )
    return [by_index[p] for p in range(len(by_index))]


def _created(version: int, name: str, created: CreatedTopic) -> Message:
    if version < 5:
        return Result(name=name, **admin.error_fields(None))
    configs = [
        ResultConfig(
            name=e.name,
            value=e.value,
            read_only=e.read_only,
            config_source=admin.SOURCE_NUMBERS[e.source],
            is_sensitive=False,
        )
        for e in created.configs
    ]
    return Result(
        name=name,
        num_partitions=created.partitions,
        replication_factor=created.replication_factor,
        configs=configs,
        **admin.error_fields(None),
    )


def _create(ctx: RequestContext, topic: Message, validate_only: bool, deadline: float | None) -> Message:
    try:
        if not ctx.may.allowed(CLUSTER):  # Create on the cluster, else on the topic itself
            ctx.may.check(TOPIC, topic.name)
        created = ctx.broker.create_topic(
            topic.name,
            None if topic.num_partitions == BROKER_DEFAULT else topic.num_partitions,
            None if topic.replication_factor == BROKER_DEFAULT else topic.replication_factor,
            replica_assignment(topic),
            admin.config_values(topic.configs),
            validate_only,
            deadline,
        )
    except SparklogError as exc:
        return Result(name=topic.name, **admin.error_fields(exc))
    return _created(ctx.api_version, topic.name, created)


def handle(request: Message, ctx: RequestContext) -> Message:
    deadline = admin.deadline(request.timeout_ms)
    results = admin.once_each(
        request.topics,
        lambda topic: topic.name,
        lambda topic: _create(ctx, topic, request.validate_only, deadline),
        lambda name, exc: Result(name=name, **admin.error_fields(exc)),
    )
    return ctx.response(API, throttle_time_ms=0, topics=results)
