"""Kafka's key hash: ``Utils.murmur2`` (MurmurHash2, 32-bit, seed ``0x9747b28c``), as Kafka's
``BuiltInPartitioner`` uses it to place a keyed record: ``toPositive(murmur2(key)) % partitions``
(``toPositive`` is ``& 0x7fffffff``), so a key lands on the partition a Kafka producer (Java's
default partitioner, librdkafka's ``murmur2_random``) would put it on.

The same byte handling as Kafka's Java: the key is read in 4-byte little-endian blocks, every byte
taken unsigned (``data[i] & 0xff``), then the 1-3 bytes left over, highest first, falling through.
For a whole Arrow column the loop runs over block positions (step i mixes block i of every key that
has one) and over the three tail bytes, with numpy on all keys at once: no per-record Python.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from sparklog.client.key_column import key_layout

SEED = 0x9747B28C
_M = 0x5BD1E995
_MASK = 0xFFFFFFFF
_M32 = np.uint32(_M)


def murmur2(key: bytes) -> int:
    """Kafka's ``Utils.murmur2`` of one key, as the signed 32-bit int Java returns."""
    length = len(key)
    h = (SEED ^ length) & _MASK
    end = length & ~3
    for i in range(0, end, 4):
        k = int.from_bytes(key[i : i + 4], "little")
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    tail = key[end:]
    if tail:
        h ^= int.from_bytes(tail, "little")
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def murmur2_partition(key: bytes, partitions: int) -> int:
    """The partition of one key: ``toPositive(murmur2(key)) % partitions``."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions


def murmur2_keys(keys: pa.Array) -> np.ndarray:
    """``Utils.murmur2`` of every key of a binary column, as uint32 (the bits of Java's int; null
    keys hash to 0)."""
    data, starts, lengths, nulls = key_layout(keys)
    n = len(starts)
    h = np.uint32(SEED) ^ lengths.astype(np.uint32)
    blocks = lengths >> 2
    every = int(blocks.min()) if n else 0
    for i in range(int(blocks.max()) if n else 0):
        rows = slice(None) if i < every else np.nonzero(blocks > i)[0]
        at = starts[rows] + 4 * i
        k = (
            data[at].astype(np.uint32)
            | (data[at + 1].astype(np.uint32) << 8)
            | (data[at + 2].astype(np.uint32) << 16)
            | (data[at + 3].astype(np.uint32) << 24)
        )
        k *= _M32
        k ^= k >> 24
        k *= _M32
        h[rows] = (h[rows] * _M32) ^ k
    left = lengths & 3
    if left.any():
        tail = starts + (lengths - left)
        for byte, shift in ((2, 16), (1, 8), (0, 0)):
            rows = np.nonzero(left > byte)[0]
            h[rows] ^= data[tail[rows] + byte].astype(np.uint32) << np.uint32(shift)
        rows = np.nonzero(left)[0]
        h[rows] *= _M32
    h ^= h >> 13
    h *= _M32
    h ^= h >> 15
    if nulls is not None:
        h[nulls] = 0
    return h


def murmur2_partitions(keys: pa.Array, partitions: int) -> np.ndarray:
    """The partition of every key of a column (int64): ``toPositive(murmur2(key)) % partitions``."""
    return ((murmur2_keys(keys) & np.uint32(0x7FFFFFFF)) % np.uint32(partitions)).astype(np.int64)
