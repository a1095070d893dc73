"""The producer settings a sink may be given, with Kafka's connector names (``kafka.acks``, ...):
what each means for sparklog's sink, which values it takes, and which it refuses because they would
break the sink's exactly-once guarantee.

- ``partitioner``: how keyed rows are placed, for every target topic: ``murmur2`` (Kafka's; also
  ``murmur2_random``) or ``fnv1a`` (also ``fnv1a_random``); default: each topic's own (its config
  ``partitioner``).
- ``kafka.partitioner.class``: Kafka's ``DefaultPartitioner`` or ``BuiltInPartitioner`` mean
  murmur2; partitioners that ignore keys (``RoundRobinPartitioner``, ``UniformStickyPartitioner``)
  and Java classes of your own are refused.
- ``kafka.acks``: ``all`` / ``-1``, the default and the only value (exactly-once needs every
  in-sync replica to have a published row); ``0`` and ``1`` are refused.
- ``kafka.enable.idempotence``: ``true``, the default and the only value (the publish step is an
  idempotent producer); ``false`` is refused.
- ``kafka.compression.type`` (``none``, ``gzip``, ``snappy``, ``lz4``, ``zstd``): accepted and
  ignored with a warning: compression is the topic's config ``compression``, applied where batches
  are stored.
- ``kafka.linger.ms``: accepted and ignored with a warning: each task stages its rows in batches of
  ``batchRecords`` as Spark hands them over; nothing waits.
- ``kafka.batch.size`` (bytes): accepted and ignored with a warning: batches hold ``batchRecords``
  rows (Kafka's 16 KB batches would make tiny columnar batches).
- ``kafka.key.serializer``, ``kafka.value.serializer``: refused with the message of Kafka's
  connector (keys and values are bytes).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping

from sparklog.errors import InvalidConfig, InvalidRequest
from sparklog.partitioner_names import MURMUR2, partitioner_name

log = logging.getLogger("sparklog.datasource")

PARTITIONER = "partitioner"
PARTITIONER_CLASS = "kafka.partitioner.class"
ACKS = "kafka.acks"
IDEMPOTENCE = "kafka.enable.idempotence"
COMPRESSION = "kafka.compression.type"
LINGER = "kafka.linger.ms"
BATCH_SIZE = "kafka.batch.size"
KEY_SERIALIZER = "kafka.key.serializer"
VALUE_SERIALIZER = "kafka.value.serializer"
PRODUCER_OPTIONS = (
    PARTITIONER,
    PARTITIONER_CLASS,
    ACKS,
    IDEMPOTENCE,
    COMPRESSION,
    LINGER,
    BATCH_SIZE,
    KEY_SERIALIZER,
    VALUE_SERIALIZER,
)

KAFKA_COMPRESSIONS = ("none", "gzip", "snappy", "lz4", "zstd")
# Kafka's partitioners that hash keys with murmur2 (BuiltInPartitioner is what Kafka uses when none is set)
MURMUR2_CLASSES = (
    "org.apache.kafka.clients.producer.internals.DefaultPartitioner",
    "org.apache.kafka.clients.producer.internals.BuiltInPartitioner",
)
KEYLESS_CLASSES = (
    "org.apache.kafka.clients.producer.RoundRobinPartitioner",
    "org.apache.kafka.clients.producer.UniformStickyPartitioner",
)
_IGNORED_BECAUSE = {
    COMPRESSION: "compression is the topic's config 'compression' in sparklog, applied where batches are stored",
    LINGER: "the sink stages each task's rows in batches of 'batchRecords' rows as Spark hands them over",
    BATCH_SIZE: "sparklog batches hold 'batchRecords' rows (set that instead)",
}


@dataclasses.dataclass(frozen=True)
class ProducerSettings:
    """What the producer settings of a write mean for the sink."""

    partitioner: str | None  # None: each target topic's own
    ignored: tuple[str, ...] = ()  # settings accepted without effect (each warned about once)


def _fail(option: str, message: str) -> InvalidRequest:
    return InvalidRequest(f"sparklog option '{option}': {message}")


def _partitioner(opts: Mapping[str, str]) -> str | None:
    chosen: dict[str, str] = {}
    if PARTITIONER in opts:
        try:
            chosen[PARTITIONER] = partitioner_name(opts[PARTITIONER], f"sparklog option '{PARTITIONER}'")
        except InvalidConfig as exc:
            raise InvalidRequest(str(exc)) from None
    if PARTITIONER_CLASS in opts:
        name = opts[PARTITIONER_CLASS].strip()
        if name in MURMUR2_CLASSES:
            chosen[PARTITIONER_CLASS] = MURMUR2
        elif name in KEYLESS_CLASSES:
            raise _fail(
                PARTITIONER_CLASS,
                f"{name} ignores keys; sparklog's sink places keyed rows by their key's hash (leave the "
                "setting out for Kafka's murmur2, or use the option 'partitioner') and spreads rows without a key",
            )
        else:
            raise _fail(
                PARTITIONER_CLASS,
                f"a Java partitioner ({name!r}) cannot run in sparklog; use the option 'partitioner' "
                "(murmur2, Kafka's default, or fnv1a), or a 'partition' column",
            )
    if len(set(chosen.values())) > 1:
        raise InvalidRequest(f"sparklog options '{PARTITIONER}' and '{PARTITIONER_CLASS}' contradict")
    return next(iter(chosen.values()), None)


def _non_negative(opts: Mapping[str, str], key: str) -> None:
    raw = opts[key].strip()
    if not raw.isdigit():
        raise _fail(key, f"must be a non-negative integer, got {opts[key]!r}")


def parse_producer_settings(opts: Mapping[str, str]) -> ProducerSettings:
    """The producer settings among ``opts`` (lower-cased names, as Spark passes them): checked,
    refused with the reason when they would break exactly-once, and a warning for each accepted
    one that changes nothing."""
    for key, what in ((KEY_SERIALIZER, "keys"), (VALUE_SERIALIZER, "value")):
        if key in opts:
            setting = key.removeprefix("kafka.")
            raise InvalidRequest(
                f"Kafka option '{setting}' is not supported as {what} are serialized with ByteArraySerializer."
            )
    if ACKS in opts:
        acks = opts[ACKS].strip().lower()
        if acks in ("0", "1"):
            raise _fail(
                ACKS,
                f"is {acks}, but the sink publishes every row exactly once, which needs acks=all (a row "
                "acknowledged before every in-sync replica has it is lost when its leader fails); leave it out",
            )
        if acks not in ("all", "-1"):
            raise _fail(ACKS, f"must be all (or -1), got {opts[ACKS]!r}")
    if IDEMPOTENCE in opts:
        value = opts[IDEMPOTENCE].strip().lower()
        if value == "false":
            raise _fail(
                IDEMPOTENCE,
                "is false, but the sink's exactly-once publish is an idempotent producer (a retried slice "
                "is recognised, not appended twice); leave it out",
            )
        if value != "true":
            raise _fail(IDEMPOTENCE, f"must be true or false, got {opts[IDEMPOTENCE]!r}")
    if COMPRESSION in opts and opts[COMPRESSION].strip().lower() not in KAFKA_COMPRESSIONS:
        raise _fail(COMPRESSION, f"must be one of {', '.join(KAFKA_COMPRESSIONS)}, got {opts[COMPRESSION]!r}")
    for key in (LINGER, BATCH_SIZE):
        if key in opts:
            _non_negative(opts, key)
    ignored = tuple(key for key in _IGNORED_BECAUSE if key in opts)
    for key in ignored:
        log.warning("sparklog sink: option '%s' has no effect (%s)", key, _IGNORED_BECAUSE[key])
    return ProducerSettings(partitioner=_partitioner(opts), ignored=ignored)
