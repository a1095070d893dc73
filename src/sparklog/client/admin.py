"""The Admin client: topics and consumer groups (what the CLI's ``topics`` and ``groups`` use)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from sparklog.client.cluster_client import DEFAULT_ZOOKEEPER, ClusterClient
from sparklog.coordination.cluster import TopicMetadata
from sparklog.errors import InvalidRequest, UnknownGroup
from sparklog.schemas.value_schema import ValueSchema
from sparklog.security.client_config import ClientSecurity


class Admin:
    """Creates, describes, alters and deletes topics; describes and resets consumer groups."""

    def __init__(self, zookeeper: str = DEFAULT_ZOOKEEPER, config: Mapping[str, Any] | None = None) -> None:
        security = ClientSecurity.from_config(config)
        self._client = ClusterClient(zookeeper, retries=3, retry_timeout_s=5.0, security=security)
        self.cluster = self._client.cluster

    def create_topic(
        self,
        name: str,
        partitions: int = 1,
        replication_factor: int = 1,
        configs: Mapping[str, Any] | None = None,
        value_schema: Any = None,
    ) -> TopicMetadata:
        """Create a topic; with ``value_schema`` (Avro record schema, JSON text or dict) a typed one.
        Refused: names breaking the naming rule or starting ``__sparklog`` (reserved for sparklog's
        internal topics; also for :meth:`alter_topic` and :meth:`delete_topic`) with
        :class:`~sparklog.errors.InvalidTopic`, and more than ``num.partitions.max`` (10,000)
        partitions with :class:`~sparklog.errors.InvalidPartitions`."""
        return self.cluster.create_topic(name, partitions, replication_factor, configs, value_schema)

    def register_schema(self, topic: str, schema: Any) -> ValueSchema:
        """Add a value schema version to a topic (checked under its ``schema.compatibility``)."""
        self.cluster.topic(topic)
        return self._client.registry.register(topic, schema)

    def schemas(self, topic: str) -> list[ValueSchema]:
        """Every value schema version of a topic, oldest first ([] for a plain topic)."""
        self.cluster.topic(topic)
        return self._client.registry.all(topic)

    def list_topics(self) -> list[str]:
        return self.cluster.topics()

    def delete_topic(self, name: str) -> None:
        self.cluster.delete_topic(name)

    def alter_topic(self, name: str, configs: Mapping[str, Any]) -> TopicMetadata:
        return self.cluster.alter_topic_configs(name, configs)

    def describe_topic(self, name: str) -> dict[str, Any]:
        """Per partition: leader, replicas, in-sync replicas, log start and end offsets."""
        meta = self.cluster.topic(name)
        partitions = []
        for p, replicas in enumerate(meta.replicas):
            state = self.cluster.partition_state(name, p)
            entry: dict[str, Any] = {
                "partition": p,
                "leader": state.leader,
                "leader_epoch": state.leader_epoch,
                "replicas": replicas,
                "isr": state.isr,
            }
            try:
                offsets = self._client.list_offsets(name, p)
                entry.update(log_start_offset=offsets["log_start_offset"], log_end_offset=offsets["log_end_offset"])
            except Exception as exc:  # a partition whose leader is down still gets described
                entry.update(log_start_offset=None, log_end_offset=None, error=str(exc).splitlines()[0])
            partitions.append(entry)
        return {"topic": name, "partitions": partitions, "configs": meta.configs}

    def reassign_partitions(
        self, topic: str, targets: Mapping[int, list[int]], wait: bool = False, timeout_s: float = 300.0
    ) -> dict[int, list[int]]:
        """Move partitions onto new replicas while producers and consumers keep running; with
        ``wait``, return once the controller has finished (the new replicas are in sync and the old
        ones gone). Returns the topic's replica assignment."""
        self.cluster.request_reassignment(topic, targets)
        deadline = time.monotonic() + timeout_s
        while wait and self.cluster.pending_reassignment(topic) is not None:
            if time.monotonic() > deadline:
                raise TimeoutError(f"the reassignment of {topic!r} did not finish in {timeout_s:.0f} s")
            time.sleep(0.2)
        return dict(enumerate(self.cluster.topic(topic).replicas))

    def list_groups(self) -> list[str]:
        return self.cluster.groups()

    def describe_group(self, group: str) -> list[dict[str, Any]]:
        """Per partition the group committed: committed offset, log end offset, lag."""
        committed = self.cluster.committed_offsets(group)
        if not committed:
            raise UnknownGroup(f"consumer group {group!r} has no committed offsets")
        rows = []
        for (topic, p), offset in sorted(committed.items()):
            end = self._client.list_offsets(topic, p)["high_watermark"]
            rows.append(
                {
                    "topic": topic,
                    "partition": p,
                    "committed_offset": offset,
                    "log_end_offset": end,
                    "lag": max(0, end - offset),
                }
            )
        return rows

    def reset_group(
        self,
        group: str,
        topic: str,
        *,
        to_earliest: bool = False,
        to_latest: bool = False,
        to_offset: int | None = None,
        to_time: int | None = None,
    ) -> dict[tuple[str, int], int]:
        """Move a group's committed offsets of a topic (exactly one target); returns the new offsets."""
        chosen = [to_earliest, to_latest, to_offset is not None, to_time is not None]
        if sum(chosen) != 1:
            raise InvalidRequest("choose exactly one of --to-earliest, --to-latest, --to-offset, --to-time")
        new: dict[tuple[str, int], int] = {}
        for p in range(self.cluster.topic(topic).partitions):
            offsets = self._client.list_offsets(topic, p, timestamp=to_time)
            start, end = offsets["log_start_offset"], offsets["high_watermark"]
            if to_earliest:
                target = start
            elif to_latest:
                target = end
            elif to_offset is not None:
                target = min(max(to_offset, start), end)
            else:
                found = offsets.get("offset_for_time")
                target = end if found is None else found
            new[(topic, p)] = target
        self.cluster.commit_offsets(group, new)
        return new

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> Admin:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
