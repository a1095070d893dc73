"""The names of the key partitioners (murmur2, fnv1a) and the settings naming them: shared by
topic configs (:mod:`sparklog.config`), topic creation, the producer and the sink; the hashing
itself is :mod:`sparklog.client.partitioner`'s. Like :mod:`sparklog.names`, it depends on nothing
but the errors, so the core (configs, coordination) need not import the client."""

from __future__ import annotations

from sparklog.errors import InvalidConfig

MURMUR2 = "murmur2"
FNV1A = "fnv1a"
PARTITIONERS = (MURMUR2, FNV1A)
NEW_TOPIC_PARTITIONER = MURMUR2  # written into the configs of every topic created
LEGACY_PARTITIONER = FNV1A  # a topic whose configs name none was created before murmur2
_ALIASES = {MURMUR2: MURMUR2, "murmur2_random": MURMUR2, FNV1A: FNV1A, "fnv1a_random": FNV1A}
_UNSUPPORTED = ("random", "consistent", "consistent_random")  # librdkafka's others (CRC32 or keyless)


def partitioner_name(value: object, setting: str = "partitioner") -> str:
    """The partitioner a setting names (``murmur2`` or ``fnv1a``; librdkafka's names accepted),
    else InvalidConfig naming the setting."""
    text = str(value).strip().lower()
    chosen = _ALIASES.get(text)
    if chosen is not None:
        return chosen
    why = " (sparklog hashes every key)" if text in _UNSUPPORTED else ""
    raise InvalidConfig(
        f"{setting} must be murmur2 (Kafka's default; also murmur2_random) or fnv1a (also fnv1a_random), "
        f"got {value!r}{why}"
    )
