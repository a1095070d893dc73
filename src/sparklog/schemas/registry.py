"""Versions of typed topics' value schemas in ZooKeeper: ``<root>/schemas/<topic>/<version>`` holds
the Avro schema as JSON text; versions count from 1.

A new version is accepted only when the schema parses (fastavro), maps to Arrow, and is compatible
with the latest version under the topic's ``schema.compatibility`` (read from ``topics/<topic>``;
BACKWARD when the topic does not exist yet or does not say). Registering the latest schema again
returns that version (idempotent). Concurrent registrations are serialized by ZooKeeper: the version
znode is created, never overwritten; the loser re-checks against the winner and takes the next number.

Versions never change once written, so they are cached; :meth:`SchemaRegistry.latest` and
:meth:`versions` always ask ZooKeeper and drop the cache of a topic whose schema node was recreated
(a topic deleted and created again); :meth:`get` and :meth:`by_fingerprint` use the cache first.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Callable
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError

from sparklog.config import TopicConfig
from sparklog.coordination.zk_layout import ZkLayout
from sparklog.errors import IncompatibleSchema, UnknownSchema
from sparklog.lake.layout import check_value_columns
from sparklog.names import check_topic_name
from sparklog.schemas.compatibility import Problem, check, normalize_mode
from sparklog.schemas.value_schema import ValueSchema


class _TopicCache:
    def __init__(self, czxid: int) -> None:
        self.czxid = czxid
        self.versions: dict[int, ValueSchema] = {}


class SchemaRegistry:
    """Register and look up value schema versions of typed topics (kazoo client + sparklog's layout)."""

    def __init__(self, zk: KazooClient, layout: ZkLayout | None = None) -> None:
        self.zk = zk
        self.layout = layout or ZkLayout()
        self._lock = threading.Lock()
        self._topics: dict[str, _TopicCache] = {}

    @classmethod
    def from_cluster(cls, cluster: Any) -> SchemaRegistry:
        """From a started :class:`sparklog.coordination.cluster.ClusterMetadata`."""
        return cls(cluster.zk, cluster.layout)

    # ------------------------------------------------------------------ writes
    def register(self, topic: str, schema: Any, compatibility: str | None = None) -> ValueSchema:
        """Add ``schema`` (JSON text, object or :class:`ValueSchema`) as the topic's next version and
        return it (``.version``). Raises :class:`SchemaError` (malformed or unmappable),
        :class:`IncompatibleSchema` (naming the fields) or :class:`InvalidConfig` (bad mode)."""
        _check_topic(topic)
        candidate = ValueSchema.parse(schema, topic=topic)
        config = self._config(topic)
        mode = config.schema_compatibility if compatibility is None else normalize_mode(compatibility)
        if config.lake_enabled:  # the fields become the columns of the topic's Delta table
            check_value_columns(topic, candidate.arrow_type.names)
        while True:
            latest = self.latest_or_none(topic)
            if latest is not None:
                if latest.same_as(candidate):
                    return latest
                problems = check(latest, candidate, mode, old_label=latest.label)
                if problems:
                    raise IncompatibleSchema(
                        f"schema for topic {topic!r} is not {mode} compatible with {latest.label}: "
                        + "; ".join(map(str, problems)),
                        problems,
                    )
            version = 1 if latest is None else latest.version + 1
            try:
                self.zk.create(self._path(topic, version), candidate.json.encode("utf-8"), makepath=True)
            except NodeExistsError:
                continue  # another registration won this number: check against it
            registered = ValueSchema.parse(candidate, version=version, topic=topic)
            self._remember(topic, registered)
            return registered

    def check(self, topic: str, schema: Any, compatibility: str | None = None) -> list[Problem]:
        """What :meth:`register` would object to (parse and mapping errors raise, and so do value
        fields that cannot be columns of a lake-enabled topic's table); [] if it would accept."""
        _check_topic(topic)
        candidate = ValueSchema.parse(schema, topic=topic)
        config = self._config(topic)
        mode = config.schema_compatibility if compatibility is None else normalize_mode(compatibility)
        if config.lake_enabled:
            check_value_columns(topic, candidate.arrow_type.names)
        latest = self.latest_or_none(topic)
        if latest is None or latest.same_as(candidate):
            return []
        return check(latest, candidate, mode, old_label=latest.label)

    def delete(self, topic: str) -> None:
        """Remove every version of the topic's schema (the topic becomes untyped)."""
        with contextlib.suppress(NoNodeError):
            self.zk.delete(self.layout.schemas(topic), recursive=True)
        with self._lock:
            self._topics.pop(topic, None)

    # ------------------------------------------------------------------ reads
    def compatibility(self, topic: str) -> str:
        """The topic's ``schema.compatibility`` (BACKWARD if the topic or the setting is absent)."""
        return self._config(topic).schema_compatibility

    def _config(self, topic: str) -> TopicConfig:
        """The topic's configs (the defaults if the topic does not exist)."""
        try:
            data, _ = self.zk.get(self.layout.topic(topic))
        except NoNodeError:
            return TopicConfig()
        return TopicConfig.from_dict(json.loads(data).get("configs", {}))

    def versions(self, topic: str) -> list[int]:
        """The topic's schema versions, ascending ([] for an untyped topic)."""
        _check_topic(topic)
        try:
            children, stat = self.zk.get_children(self.layout.schemas(topic), include_data=True)
        except NoNodeError:
            with self._lock:
                self._topics.pop(topic, None)
            return []
        with self._lock:
            cache = self._topics.get(topic)
            if cache is None or cache.czxid != stat.czxid:
                self._topics[topic] = _TopicCache(stat.czxid)
        return sorted(int(c) for c in children if c.isdigit())

    def latest_or_none(self, topic: str) -> ValueSchema | None:
        """The newest version, or None for an untyped topic."""
        versions = self.versions(topic)
        return self.get(topic, versions[-1]) if versions else None

    def latest(self, topic: str) -> ValueSchema:
        """The newest version (:class:`UnknownSchema` for an untyped topic)."""
        found = self.latest_or_none(topic)
        if found is None:
            raise UnknownSchema(f"topic {topic!r} has no value schema (it is not a typed topic)")
        return found

    def get(self, topic: str, version: int) -> ValueSchema:
        """One version (:class:`UnknownSchema` if there is none)."""
        _check_topic(topic)
        with self._lock:
            cache = self._topics.get(topic)
            found = cache.versions.get(version) if cache else None
        if found is not None:
            return found
        try:
            data, _ = self.zk.get(self._path(topic, version))
        except NoNodeError:
            raise UnknownSchema(f"topic {topic!r} has no schema version {version}") from None
        schema = ValueSchema.parse(data.decode("utf-8"), version=version, topic=topic)
        self._remember(topic, schema)
        return schema

    def all(self, topic: str) -> list[ValueSchema]:
        """Every version, oldest first."""
        return [self.get(topic, v) for v in self.versions(topic)]

    def by_fingerprint(self, topic: str, fingerprint: bytes) -> ValueSchema:
        """The version whose CRC-64-AVRO fingerprint (single-object encoding's 8 bytes) this is; the
        newest such version when several share it (they differ only in docs, defaults or aliases)."""
        with self._lock:
            cache = self._topics.get(topic)
            hits = [s for s in cache.versions.values() if s.fingerprint == fingerprint] if cache else []
        if not hits:
            hits = [s for s in self.all(topic) if s.fingerprint == fingerprint]
        if not hits:
            raise UnknownSchema(f"topic {topic!r} has no schema version with fingerprint {fingerprint.hex()}")
        return max(hits, key=lambda s: s.version)

    def lookup(self, topic: str) -> Callable[[bytes], ValueSchema]:
        """``fingerprint -> ValueSchema`` for :func:`sparklog.schemas.codec.decode_avro`'s ``lookup``."""
        return lambda fingerprint: self.by_fingerprint(topic, fingerprint)

    def refresh(self, topic: str | None = None) -> None:
        """Forget cached versions (of one topic or all)."""
        with self._lock:
            if topic is None:
                self._topics.clear()
            else:
                self._topics.pop(topic, None)

    # ------------------------------------------------------------------ helpers
    def _path(self, topic: str, version: int) -> str:
        return f"{self.layout.schemas(topic)}/{version}"

    def _remember(self, topic: str, schema: ValueSchema) -> None:
        with self._lock:
            cache = self._topics.get(topic)
        if cache is None:
            stat = self.zk.exists(self.layout.schemas(topic))
            if stat is None:
                return
            with self._lock:
                cache = self._topics.setdefault(topic, _TopicCache(stat.czxid))
        with self._lock:
            cache.versions[schema.version] = schema


def _check_topic(topic: str) -> None:
    check_topic_name(topic)  # InvalidTopic saying what is wrong with the name
