"""What clients need from the cluster besides produce and fetch: brokers, topic metadata, leaders,
value schemas, consumer groups' committed offsets, topic administration and the Spark sink's state.

Two implementations: :class:`~sparklog.client.zookeeper_view.ZooKeeperView` reads and writes
ZooKeeper itself (watches keep it current), :class:`~sparklog.client.broker_view.BrokerView` asks
any reachable bootstrap broker (cached, refreshed on errors and after a short maximum age).
:class:`~sparklog.client.cluster_client.ClusterClient` picks one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from sparklog.coordination.cluster import BrokerInfo, PartitionState, TopicMetadata
from sparklog.schemas.value_schema import ValueSchema

TopicPartition = tuple[str, int]


class ClusterView(Protocol):
    """The cluster as a client sees it."""

    # ------------------------------------------------------------------ metadata
    def brokers(self) -> dict[int, BrokerInfo]:
        """The live brokers by id (fresh)."""
        ...

    def topics(self) -> list[str]:
        """Every topic (fresh; topics being created or deleted left out)."""
        ...

    def controller_id(self) -> int:
        """The active controller's broker id (fresh; -1: none right now)."""
        ...

    def topic(self, name: str, refresh: bool = False) -> TopicMetadata:
        """A topic's metadata (cached unless ``refresh``); UnknownTopic if it does not exist."""
        ...

    def leader(self, topic: str, partition: int, refresh: bool = False) -> tuple[int, BrokerInfo | None]:
        """A partition's leader id and, if it is live, its address (cached unless ``refresh``)."""
        ...

    def partition_states(self, topic: str) -> dict[int, PartitionState]:
        """Every partition's state (fresh): leader, epoch, in-sync replicas."""
        ...

    def suspect(self, location: str) -> None:
        """The broker at ``location`` stopped answering a request: ask the others for metadata
        first until it answers again (a host cut off from the network holds a call for its whole
        timeout)."""
        ...

    def value_schema(self, topic: str) -> ValueSchema | None:
        """The latest value schema of a typed topic (None for a plain one)."""
        ...

    def schema_lookup(self, topic: str) -> Callable[[bytes], ValueSchema]:
        """Fingerprint -> version, for Avro single-object encoded values of a typed topic."""
        ...

    def schemas(self, topic: str) -> list[ValueSchema]:
        """Every value schema version of a topic, oldest first (fresh)."""
        ...

    # ------------------------------------------------------------------ consumer groups
    def commit_offsets(self, group: str, offsets: Mapping[TopicPartition, int]) -> None: ...

    def committed_offsets(self, group: str, topic: str | None = None) -> dict[TopicPartition, int]: ...

    def groups(self) -> list[str]: ...

    def group_members(self, group: str) -> dict[tuple[str, ...], list[str]]:
        """The group's live members (their ids) by the topics they read."""
        ...

    # ------------------------------------------------------------------ administration
    def create_topic(
        self,
        name: str,
        partitions: int,
        replication_factor: int = 1,
        configs: Mapping[str, Any] | None = None,
        value_schema: Any = None,
        *,
        internal: bool = False,
    ) -> TopicMetadata: ...

    def delete_topic(self, name: str, *, internal: bool = False) -> None: ...

    def alter_topic_configs(
        self, name: str, configs: Mapping[str, Any], *, delete: Sequence[str] = (), internal: bool = False
    ) -> TopicMetadata:
        """Set ``configs`` and remove the overrides named in ``delete`` (Kafka's incremental AlterConfigs)."""
        ...

    def create_partitions(self, name: str, total: int, *, internal: bool = False) -> TopicMetadata:
        """Grow a topic to ``total`` partitions (Kafka's CreatePartitions; never fewer)."""
        ...

    def register_schema(self, topic: str, schema: Any) -> ValueSchema: ...

    # ------------------------------------------------------------------ the Spark sink's state
    def read_sink_state(self, sink_id: str) -> tuple[dict[str, Any] | None, int | None]: ...

    def write_sink_state(self, sink_id: str, state: dict[str, Any], version: int | None) -> int: ...

    def delete_sink_state(self, sink_id: str, version: int | None) -> None: ...

    def close(self) -> None: ...
