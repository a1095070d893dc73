"""FNV-1a (64-bit) of key bytes: sparklog's key hash before murmur2, kept for the topics created
with it (topic config ``partitioner=fnv1a``, or no ``partitioner`` entry at all).

Computed for a whole Arrow column at once with numpy (no per-record Python), and for one key, so
both agree. Not librdkafka's ``fnv1a`` partitioner, which is the 32-bit variant.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from sparklog.client.key_column import key_layout

_FNV_OFFSET = np.uint64(0xCBF29CE484222325)
_FNV_PRIME = np.uint64(0x100000001B3)


def fnv1a(key: bytes) -> int:
    """FNV-1a 64 of one key."""
    h = int(_FNV_OFFSET)
    for byte in key:
        h = ((h ^ byte) * int(_FNV_PRIME)) & 0xFFFFFFFFFFFFFFFF
    return h


def fnv1a_keys(keys: pa.Array) -> np.ndarray:
    """FNV-1a 64 of every key of a binary column (nulls hash to 0), vectorized over key positions:
    step i folds byte i of every key that is at least i+1 bytes long."""
    data, starts, lengths, nulls = key_layout(keys)
    n = len(starts)
    h = np.full(n, _FNV_OFFSET, dtype=np.uint64)
    longest = int(lengths.max()) if n else 0
    with np.errstate(over="ignore"):
        for i in range(longest):
            rows = np.nonzero(lengths > i)[0]
            h[rows] = (h[rows] ^ data[starts[rows] + i].astype(np.uint64)) * _FNV_PRIME
    if nulls is not None:
        h[nulls] = 0
    return h
