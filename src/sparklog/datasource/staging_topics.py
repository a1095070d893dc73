"""The sink's staging topics, where tasks append their rows before the driver publishes them:
created on first use with settings that keep staged rows (:data:`STAGING_CONFIGS`), refused when
they exist with settings that could lose them (:func:`staging_config_problem`), and one typed
staging topic per schema version of a typed target (:func:`typed_staging_topic`)."""

from __future__ import annotations

import hashlib
import logging
import time

from sparklog.client.cluster_client import ClusterClient
from sparklog.config import TopicConfig
from sparklog.coordination.cluster import TopicMetadata
from sparklog.datasource import connections
from sparklog.datasource.options import WriteOptions
from sparklog.errors import InvalidRequest, PolicyViolation, TopicExists, UnknownTopic
from sparklog.names import is_internal
from sparklog.schemas.value_schema import ValueSchema

log = logging.getLogger("sparklog.datasource")

STAGING_RETENTION_MS = 3600 * 1000
# staged rows keep the rows' own timestamps, whatever they are: the target topic judges them (its
# message.timestamp.*.max.ms) when the publish appends them there
STAGING_CONFIGS = {
    "retention.ms": str(STAGING_RETENTION_MS),
    "segment.ms": str(600 * 1000),
    "message.timestamp.after.max.ms": str((1 << 63) - 1),
}
STAGING_MIN_RETENTION_BYTES = 1 << 30
STAGING_CREATE_WAIT_S = 60.0  # how long a task waits for a staging topic another task is creating


def staging_config_problem(config: TopicConfig) -> str | None:
    """What in a staging topic's settings could lose or alter staged rows before they are
    published (None if nothing): the sink refuses such a topic instead of staging in it."""
    if config.cleanup_policy != "delete":
        return f"cleanup.policy={config.cleanup_policy} (compaction drops staged rows that share a key); needs delete"
    if config.retention_ms != -1 and config.retention_ms < STAGING_RETENTION_MS:
        return (
            f"retention.ms={config.retention_ms} (staged rows could be deleted before they are published); "
            f"needs at least {STAGING_RETENTION_MS} or -1"
        )
    if config.retention_bytes != -1 and config.retention_bytes < STAGING_MIN_RETENTION_BYTES:
        return (
            f"retention.bytes={config.retention_bytes} (staged rows could be deleted before they are published); "
            f"needs at least {STAGING_MIN_RETENTION_BYTES} or -1"
        )
    if config.message_timestamp_type != "CreateTime":
        kind = config.message_timestamp_type
        return f"message.timestamp.type={kind} (staged rows would lose their timestamps); needs CreateTime"
    if config.unclean_leader_election_enable:
        return "unclean.leader.election.enable=true (an unclean election loses staged rows); needs false"
    return None


def check_staging_topic(meta: TopicMetadata) -> None:
    """Refuse (PolicyViolation naming the setting) a staging topic whose settings could lose or
    alter staged rows: someone else created it (before names starting ``__sparklog`` were
    reserved), or a user's own ``stagingTopic`` is set up for another purpose."""
    problem = staging_config_problem(meta.config)
    if problem is None:
        return
    whose = "sparklog's internal staging topic" if is_internal(meta.name) else "the staging topic"
    raise PolicyViolation(
        f"sparklog sink: {whose} {meta.name!r} has {problem}; nothing was written. Use another staging topic "
        "(option 'stagingTopic')" + ("" if is_internal(meta.name) else " or fix its configs")
    )


def ensure_staging_topic(client: ClusterClient, name: str, value_schema: ValueSchema | None = None) -> int:
    """The staging topic's partition count, creating the topic on first use (typed with
    ``value_schema`` as its only version, for a typed target) with the sink's settings; a topic
    that exists already must have settings that keep staged rows (:func:`check_staging_topic`).
    Names starting ``__sparklog`` are sparklog's internal topics: created through the internal path
    (users cannot create them)."""
    try:
        meta = client.topic(name, refresh=True)
    except UnknownTopic:
        brokers = len(client.view.brokers())
        try:
            meta = client.view.create_topic(
                name,
                max(4, 2 * brokers),
                min(3, max(1, brokers)),
                STAGING_CONFIGS,
                value_schema=None if value_schema is None else value_schema.json,
                internal=True,
            )
            log.info("sparklog: created the staging topic %s", name)
        except TopicExists:
            meta = _wait_for_topic(client, name)  # another task created it (or is creating it)
    check_staging_topic(meta)
    partitions = meta.partitions
    if value_schema is not None:
        staged = client.value_schema(name)
        if staged is None or not staged.same_as(value_schema):
            raise InvalidRequest(
                f"sparklog sink: the staging topic {name!r} does not have the value schema of {value_schema.label}; "
                "delete it (it only holds staged rows) and write again"
            )
    return partitions


def _wait_for_topic(client: ClusterClient, name: str) -> TopicMetadata:
    """A topic that exists or is being created (in chunks, by another task): its metadata once
    it is complete."""
    deadline = time.monotonic() + STAGING_CREATE_WAIT_S
    while True:
        try:
            return client.topic(name, refresh=True)
        except UnknownTopic:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def typed_staging_topic(staging: str, topic: str, schema: ValueSchema) -> str:
    """The staging topic of a typed target's schema version: ``<staging>.<topic>.v<version>.<hash>``."""
    digest = hashlib.sha256(schema.json.encode()).hexdigest()[:8]
    name = f"{staging}.{topic}.v{schema.version}.{digest}"
    # names were limited to 200 characters when this was written; the threshold stays so that the
    # staging topics of existing targets keep their names (the hashed form is well within today's 249)
    if len(name) > 200:
        name = f"{staging}.{hashlib.sha256(topic.encode()).hexdigest()[:16]}.v{schema.version}.{digest}"
    return name


def check_existing_staging_topic(options: WriteOptions) -> None:
    """At save()/start(): a staging topic that exists must keep staged rows (fails the write at
    once, not in its tasks); one that does not exist yet is created by the first task."""
    client = connections.cluster_client(options.address)
    try:
        meta = client.topic(options.staging_topic, refresh=True)
    except UnknownTopic:
        return
    check_staging_topic(meta)
