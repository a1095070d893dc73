"""Topic configuration: Kafka's names, meanings and (mostly) defaults, validated in one place."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from sparklog.errors import InvalidConfig
from sparklog.partitioner_names import LEGACY_PARTITIONER, PARTITIONERS, partitioner_name

CLEANUP_POLICIES = ("delete", "compact", "compact,delete")
COMPRESSIONS = ("none", "lz4", "zstd")
TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")
SCHEMA_COMPATIBILITIES = ("BACKWARD", "FORWARD", "FULL", "NONE")

PARTITIONER_CONFIG = "partitioner"
_DAY_MS = 24 * 3600 * 1000
LOCAL_AS_TOTAL = -2  # local.retention.*: as retention.* (Kafka's value)
_RAISED_MINIMUMS = {"segment.ms": 1000}  # minimums raised after topics could have been created below them


@dataclasses.dataclass(frozen=True)
class TopicConfig:
    """The settings of one topic. Field names are Kafka's config names with ``.`` replaced by ``_``.

    ``-1`` means "no limit" for ``retention_ms``, ``retention_bytes``, ``flush_messages`` and ``flush_ms``.

    ``lake.enabled``: the partitions' leaders tier closed segments into the topic's Delta table
    (:mod:`sparklog.broker.lake`), and close an active segment ``segment.ms`` old even with no
    append coming (the bound on how stale a quiet partition's table is); refused with
    ``cleanup.policy=compact`` (a compacted topic's history is rewritten, an append-only table
    would keep what compaction removed).
    ``local.retention.ms`` / ``local.retention.bytes`` (KIP-405's names) bound the segments kept on
    the brokers' disks once they are in the table; ``-2`` (the default) means "as ``retention.ms`` /
    ``retention.bytes``". Without ``lake.enabled`` they do nothing.
    ``lake.compaction.min.files``: a partition's leader rewrites a run of that many consecutive small
    files of the table as one (:mod:`sparklog.broker.lake.compaction`); 0 turns compaction off.
    ``lake.compaction.lag.ms``: once nothing has been tiered into a partition for this long, its
    runs of two or more small files written longer ago than this are rewritten too, however few
    (so a quiet partition's history ends up in few files); -1: by ``lake.compaction.min.files`` only.

    ``segment.ms`` is at least 1000: every roll starts a segment (three files and a memory map), so a
    tiny value turns a busy topic into one segment per append, churning files for nothing.
    ``segment.bytes`` is at least 1024 (tests rely on segments that small).
    """

    retention_ms: int = 7 * _DAY_MS
    retention_bytes: int = -1
    segment_bytes: int = 1 << 30
    segment_ms: int = 7 * _DAY_MS
    cleanup_policy: str = "delete"
    delete_retention_ms: int = _DAY_MS
    min_insync_replicas: int = 1
    # 16 MiB: a 10,000-record batch (the producer's batch_records, the sink's batchRecords) of
    # records up to ~1.6 KB, while one request's memory stays bounded (Kafka's 1 MB is for its
    # small per-partition batches; ours are columnar and larger)
    max_message_bytes: int = 16 << 20
    compression: str = "none"
    flush_messages: int = -1
    flush_ms: int = -1
    index_interval_bytes: int = 4096
    message_timestamp_type: str = "CreateTime"
    # KIP-937: how far a CreateTime timestamp may lie before / after the broker's clock (Kafka 4's
    # defaults: no bound before, one hour after; a record dated years ahead would hold retention)
    message_timestamp_before_max_ms: int = (1 << 63) - 1
    message_timestamp_after_max_ms: int = 3_600_000
    unclean_leader_election_enable: bool = False
    schema_compatibility: str = "BACKWARD"
    # how producers and the sink place keyed records (:mod:`sparklog.client.partitioner`): topics
    # are created with ``murmur2`` (Kafka's); a topic whose configs have no entry predates it and
    # keeps ``fnv1a``, so its keys stay where they are
    partitioner: str = LEGACY_PARTITIONER
    lake_enabled: bool = False
    local_retention_ms: int = LOCAL_AS_TOTAL
    local_retention_bytes: int = LOCAL_AS_TOTAL
    lake_compaction_min_files: int = 8
    lake_compaction_lag_ms: int = 600_000

    def __post_init__(self) -> None:
        _check_choice("cleanup.policy", self.cleanup_policy, CLEANUP_POLICIES)
        _check_choice("compression", self.compression, COMPRESSIONS)
        _check_choice("message.timestamp.type", self.message_timestamp_type, TIMESTAMP_TYPES)
        _check_choice("schema.compatibility", self.schema_compatibility, SCHEMA_COMPATIBILITIES)
        _check_choice("partitioner", self.partitioner, PARTITIONERS)
        for name in ("retention.ms", "retention.bytes", "flush.messages", "flush.ms"):
            value = getattr(self, _attr(name))
            if value < -1:
                raise InvalidConfig(f"{name} must be -1 (no limit) or >= 0, got {value}")
        for name, low in (
            ("segment.bytes", 1024),
            ("segment.ms", 1000),
            ("delete.retention.ms", 0),
            ("min.insync.replicas", 1),
            ("max.message.bytes", 1),
            ("index.interval.bytes", 0),
            ("message.timestamp.before.max.ms", 0),
            ("message.timestamp.after.max.ms", 0),
            ("lake.compaction.min.files", 0),
            ("lake.compaction.lag.ms", -1),
        ):
            value = getattr(self, _attr(name))
            if value < low:
                raise InvalidConfig(f"{name} must be >= {low}, got {value}")
        for local, total in (("local.retention.ms", "retention.ms"), ("local.retention.bytes", "retention.bytes")):
            value, bound = getattr(self, _attr(local)), getattr(self, _attr(total))
            if value < LOCAL_AS_TOTAL:
                raise InvalidConfig(f"{local} must be -2 (as {total}), -1 (no limit) or >= 0, got {value}")
            if bound >= 0 and (value == -1 or value > bound):
                raise InvalidConfig(f"{local}={value} must not exceed {total}={bound}")
        if self.lake_enabled and self.compacted:
            raise InvalidConfig(
                "lake.enabled=true is not supported with cleanup.policy="
                f"{self.cleanup_policy}: a compacted topic cannot be tiered into an append-only Delta table"
            )

    @property
    def compacted(self) -> bool:
        """Whether log compaction applies (``compact`` or ``compact,delete``)."""
        return "compact" in self.cleanup_policy

    @property
    def deletes(self) -> bool:
        """Whether time/size retention applies (``delete`` or ``compact,delete``)."""
        return "delete" in self.cleanup_policy

    @property
    def local_retention(self) -> tuple[int, int]:
        """(ms, bytes) bounding the tiered segments kept locally (-1: no limit), -2 resolved."""
        ms, size = self.local_retention_ms, self.local_retention_bytes
        return (
            self.retention_ms if ms == LOCAL_AS_TOTAL else ms,
            self.retention_bytes if size == LOCAL_AS_TOTAL else size,
        )

    @classmethod
    def names(cls) -> list[str]:
        """All config names, Kafka style (``retention.ms``)."""
        return [f.name.replace("_", ".") for f in dataclasses.fields(cls)]

    @classmethod
    def value_types(cls) -> dict[str, str]:
        """Each config's value type by name: ``int``, ``bool`` or ``str``."""
        return {f.name.replace("_", "."): str(f.type) for f in dataclasses.fields(cls)}

    @classmethod
    def from_dict(cls, values: Mapping[str, Any] | None = None) -> TopicConfig:
        """Build from ``{"retention.ms": "1000", ...}``; strings are parsed, unknown names refused."""
        return cls().with_overrides(values or {})

    @classmethod
    def from_stored(cls, values: Mapping[str, Any] | None = None) -> TopicConfig:
        """Like :meth:`from_dict`, for settings stored before a minimum was raised (``segment.ms``
        was allowed down to 1 ms): such a value counts as the new minimum instead of making the
        topic unreadable. New settings still go through :meth:`from_dict`, which refuses them."""
        raised = dict(values or {})
        for name, low in _RAISED_MINIMUMS.items():
            try:
                if name in raised and int(str(raised[name]).strip()) < low:
                    raised[name] = str(low)
            except ValueError:
                pass  # not a number: from_dict says so
        return cls.from_dict(raised)

    def with_overrides(self, values: Mapping[str, Any]) -> TopicConfig:
        """A copy with the given Kafka-named settings changed (validated)."""
        fields = {f.name: f for f in dataclasses.fields(self)}
        changes: dict[str, Any] = {}
        for name, raw in values.items():
            attr = _attr(str(name))
            if attr not in fields:
                raise InvalidConfig(f"unknown topic config '{name}'; known: {', '.join(self.names())}")
            changes[attr] = _parse(str(name), raw, fields[attr].type)
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, str]:
        """Kafka-named settings as strings (what ZooKeeper stores and the CLI prints)."""
        out = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            out[f.name.replace("_", ".")] = str(value).lower() if isinstance(value, bool) else str(value)
        return out


def _attr(name: str) -> str:
    return name.replace(".", "_")


def _check_choice(name: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise InvalidConfig(f"{name} must be one of {', '.join(choices)}; got '{value}'")


def _parse(name: str, raw: Any, type_name: Any) -> Any:
    type_name = str(type_name)
    if type_name == "bool":
        if isinstance(raw, bool):
            return raw
        text = str(raw).strip().lower()
        if text in ("true", "false"):
            return text == "true"
        raise InvalidConfig(f"{name} must be true or false, got '{raw}'")
    if type_name == "int":
        if isinstance(raw, bool):
            raise InvalidConfig(f"{name} must be an integer, got {raw!r}")
        try:
            return int(str(raw).strip())
        except ValueError:
            raise InvalidConfig(f"{name} must be an integer, got '{raw}'") from None
    text = str(raw).strip()
    if name == "cleanup.policy":
        text = ",".join(sorted(p.strip() for p in text.split(",")))
    if name in ("compression",):
        text = text.lower()
    if name == "schema.compatibility":
        text = text.upper()
    if name == "partitioner":
        text = partitioner_name(text)
    return text
