"""The Admin client: topics and consumer groups (what the CLI's ``topics`` and ``groups`` use).

Given ``bootstrap_servers`` every call goes through brokers (no ZooKeeper session); only moving
partitions (:meth:`Admin.reassign_partitions`) still needs ZooKeeper (``zookeeper=``)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from sparklog.client.cluster_address import resolve
from sparklog.client.cluster_client import DEFAULT_ZOOKEEPER, ClusterClient
from sparklog.coordination.cluster import ClusterMetadata, TopicMetadata
from sparklog.errors import GroupNotEmpty, InvalidRequest, UnknownGroup, UnknownTopic
from sparklog.schemas.value_schema import ValueSchema


class Admin:
    """Creates, describes, alters and deletes topics; describes and resets consumer groups."""

    def __init__(
        self,
        zookeeper: str = DEFAULT_ZOOKEEPER,
        *,
        bootstrap_servers: str | None = None,
        config: Mapping[str, Any] | None = None,
    ) -> None:
        address = resolve(zookeeper, bootstrap_servers, config)
        self._client = ClusterClient.connect(address, retries=3, retry_timeout_s=5.0)
        self.view = self._client.view

    @property
    def cluster(self) -> ClusterMetadata:
        """ZooKeeper itself (InvalidRequest for an admin given bootstrap servers)."""
        return self._client.cluster

    def topic(self, name: str) -> TopicMetadata:
        """A topic's partitions, replicas and configs (UnknownTopic if there is none)."""
        return self.view.topic(name, refresh=True)

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
        return self.view.create_topic(name, partitions, replication_factor, configs, value_schema)

    def register_schema(self, topic: str, schema: Any) -> ValueSchema:
        """Add a value schema version to a topic (checked under its ``schema.compatibility``)."""
        return self.view.register_schema(topic, schema)

    def schemas(self, topic: str) -> list[ValueSchema]:
        """Every value schema version of a topic, oldest first ([] for a plain topic)."""
        return self.view.schemas(topic)

    def list_topics(self) -> list[str]:
        return self.view.topics()

    def delete_topic(self, name: str) -> None:
        self.view.delete_topic(name)

    def alter_topic(self, name: str, configs: Mapping[str, Any]) -> TopicMetadata:
        return self.view.alter_topic_configs(name, configs)

    def describe_topic(self, name: str) -> dict[str, Any]:
        """Per partition: leader, replicas, in-sync replicas, log start and end offsets, and for a
        lake-enabled topic ``lake_offset`` (everything below it is in the Delta table; None until its
        leader's tierer has read the table), ``lake_lag`` (log end - lake offset) and
        ``local_log_start_offset`` (the log start is then the table's first offset once the lake
        reaches the local log: the union read); and the topic's
        configs and ``partitioner`` (the one its keys are placed with, also for a topic whose configs
        name none: ``fnv1a``, it was created before murmur2)."""
        meta = self.view.topic(name, refresh=True)
        states = self.view.partition_states(name)
        partitions = []
        for p, replicas in enumerate(meta.replicas):
            state = states.get(p)
            if state is None:
                raise UnknownTopic(f"unknown partition {name}-{p}")
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
                if "lake_offset" in offsets:
                    entry.update(local_log_start_offset=offsets.get("local_log_start_offset"))
                    lake = offsets["lake_offset"]
                    entry.update(lake_offset=lake, lake_lag=None if lake is None else offsets["log_end_offset"] - lake)
            except Exception as exc:  # a partition whose leader is down still gets described
                entry.update(log_start_offset=None, log_end_offset=None, error=str(exc).splitlines()[0])
            partitions.append(entry)
        return {
            "topic": name,
            "partitions": partitions,
            "configs": meta.configs,
            "partitioner": meta.config.partitioner,
        }

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
        return self.view.groups()

    def group_members(self, group: str) -> dict[tuple[str, ...], list[str]]:
        """The group's live members (member ids) by the topics they read: ZooKeeper-native
        consumers and the members brokers host for bootstrap consumers alike. A consumer reading
        assigned partitions (``partitions=``) is no member, as in Kafka."""
        return self.view.group_members(group)

    def describe_group(self, group: str) -> list[dict[str, Any]]:
        """Per partition the group committed: committed offset, log end offset, lag."""
        committed = self.view.committed_offsets(group)
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
        """Move a group's committed offsets of a topic (exactly one target); returns the new offsets.
        Refused (:class:`GroupNotEmpty`) while members of the group read the topic: each would
        overwrite the reset with its next commit (Kafka resets only inactive groups)."""
        chosen = [to_earliest, to_latest, to_offset is not None, to_time is not None]
        if sum(chosen) != 1:
            raise InvalidRequest("choose exactly one of --to-earliest, --to-latest, --to-offset, --to-time")
        active = sorted({m for topics, ids in self.view.group_members(group).items() if topic in topics for m in ids})
        if active:
            raise GroupNotEmpty(
                f"consumer group {group!r} has {len(active)} live member(s) reading {topic!r} "
                f"({', '.join(active[:5])}{', ...' if len(active) > 5 else ''}): stop them before resetting "
                "its offsets, or their next commits overwrite the reset"
            )
        new: dict[tuple[str, int], int] = {}
        for p in range(self.view.topic(topic, refresh=True).partitions):
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
        self.view.commit_offsets(group, new)
        return new

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> Admin:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
