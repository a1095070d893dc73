"""Which partition a keyed record goes to: the topic's partitioner, by name.

- ``murmur2``: Kafka's (``toPositive(murmur2(key)) % partitions``, :mod:`.murmur2`), so a key lands
  where Kafka's producers put it. The partitioner of every topic created since sparklog had it.
- ``fnv1a``: sparklog's earlier key hash (FNV-1a 64, :mod:`.fnv1a`), kept by topics created
  before: a topic whose configs have no ``partitioner`` entry keeps ``fnv1a``, so its keys stay on
  their partitions.

A topic's partitioner is its config ``partitioner`` (``sparklog topics describe`` shows it); a
client may override it (the Producer's setting ``partitioner``, the sink's option of that name),
with librdkafka's names: ``murmur2_random`` (Kafka's Java default) and ``murmur2`` mean murmur2,
``fnv1a_random`` and ``fnv1a`` mean sparklog's fnv1a (64-bit, unlike librdkafka's 32-bit one).
Records without a key are never hashed: the producer and the sink spread them (sticky batches).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from sparklog.client.fnv1a import fnv1a, fnv1a_keys
from sparklog.client.murmur2 import murmur2_partition, murmur2_partitions
from sparklog.errors import InvalidConfig
from sparklog.partitioner_names import FNV1A, MURMUR2, NEW_TOPIC_PARTITIONER, PARTITIONERS


def partitions_for_keys(keys: pa.Array, partitions: int, partitioner: str = NEW_TOPIC_PARTITIONER) -> np.ndarray:
    """The partition of every key of a column (int64; a null key's entry means nothing)."""
    if partitioner == MURMUR2:
        return murmur2_partitions(keys, partitions)
    if partitioner == FNV1A:
        return (fnv1a_keys(keys) % np.uint64(partitions)).astype(np.int64)
    raise InvalidConfig(f"unknown partitioner {partitioner!r}; known: {', '.join(PARTITIONERS)}")


def partition_for_key(key: bytes, partitions: int, partitioner: str = NEW_TOPIC_PARTITIONER) -> int:
    """The partition of one key (the same as :func:`partitions_for_keys` gives it)."""
    if partitioner == MURMUR2:
        return murmur2_partition(key, partitions)
    if partitioner == FNV1A:
        return fnv1a(key) % partitions
    raise InvalidConfig(f"unknown partitioner {partitioner!r}; known: {', '.join(PARTITIONERS)}")
