"""What a broker knows of topics: each topic's metadata and, for typed topics, its value schema
versions. The topic watcher (:mod:`sparklog.broker.topic_watcher`) keeps it current by ZooKeeper
watches; a topic a client names before its watch has fired is read on demand."""

from __future__ import annotations

from collections.abc import Sequence

from sparklog.broker.log_manager import LogManager
from sparklog.coordination.cluster import ClusterMetadata, TopicMetadata
from sparklog.schemas.registry import SchemaRegistry
from sparklog.schemas.value_schema import ValueSchema


class TopicCatalog:
    """Topic metadata and value schemas by topic name. Logs of a typed topic get its schema
    versions here, before they are opened (:meth:`log_schemas`), and again when a version is added."""

    def __init__(self, cluster: ClusterMetadata, registry: SchemaRegistry, logs: LogManager) -> None:
        self._cluster = cluster
        self._registry = registry
        self._logs = logs
        self.topics: dict[str, TopicMetadata] = {}  # known topics (watched, or read for a client first)
        self.value_schemas: dict[str, list[ValueSchema]] = {}  # typed topics: versions, oldest first
        self._schemas_read: set[str] = set()  # topics whose schema versions were read (typed or not)

    def get(self, topic: str) -> TopicMetadata | None:
        return self.topics.get(topic)

    def put(self, topic: str, meta: TopicMetadata) -> None:
        self.topics[topic] = meta

    def forget(self, topic: str) -> None:
        """The topic is gone or being deleted."""
        self.topics.pop(topic, None)
        self._schemas_read.discard(topic)

    def topic_metadata(self, topic: str) -> TopicMetadata:
        """A topic's metadata; read from ZooKeeper if no watch has brought it yet (a fresh topic)."""
        meta = self.topics.get(topic)
        if meta is None:
            meta = self.topics[topic] = self._cluster.topic(topic)  # UnknownTopic if there is none
        return meta

    def reload(self, topic: str) -> TopicMetadata:
        """Read a topic's metadata again (UnknownTopic if it is gone or not complete)."""
        meta = self.topics[topic] = self._cluster.topic(topic)
        return meta

    def schemas_of(self, topic: str) -> list[ValueSchema]:
        """A topic's value schema versions, oldest first ([] for a plain topic): as the watches keep
        them, or read now for a topic whose watch has not read them yet."""
        if topic in self._schemas_read:
            return list(self.value_schemas.get(topic, ()))
        return self._registry.all(topic)

    def log_schemas(self, topic: str) -> Sequence[ValueSchema]:
        """The schema versions a log of ``topic`` is opened with (read first if no watch has yet)."""
        if topic not in self._schemas_read:
            self.load_value_schemas(topic)
        return self.value_schemas.get(topic, ())

    def load_value_schemas(self, topic: str) -> None:
        """Read a typed topic's schema versions and give them to its open logs."""
        try:
            versions = self._registry.all(topic)
        except Exception:  # deleted meanwhile, or no schemas node: untyped
            versions = []
        self._schemas_read.add(topic)
        if versions:
            self.value_schemas[topic] = versions
            self._logs.set_value_schemas(topic, versions)
        else:
            self.value_schemas.pop(topic, None)
