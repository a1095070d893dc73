"""Which partition a record goes to: a stable hash of the key bytes, or spread when there is no key.

The hash is FNV-1a (64-bit) over the key bytes, computed for a whole column at once with numpy
(no per-record Python), and the same for a single key, so ``send()`` and ``send_batch()`` agree.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

_FNV_OFFSET = np.uint64(0xCBF29CE484222325)
_FNV_PRIME = np.uint64(0x100000001B3)


def key_hash(key: bytes) -> int:
    """FNV-1a 64 of one key."""
    h = int(_FNV_OFFSET)
    for byte in key:
        h = ((h ^ byte) * int(_FNV_PRIME)) & 0xFFFFFFFFFFFFFFFF
    return h


def partition_for_key(key: bytes, partitions: int) -> int:
    return key_hash(key) % partitions


def hash_keys(keys: pa.Array) -> np.ndarray:
    """FNV-1a 64 of every key of a binary column (nulls hash to 0), vectorized over key positions:
    step i folds byte i of every key that is at least i+1 bytes long."""
    keys = keys.cast(pa.binary()) if keys.type != pa.binary() else keys
    n = len(keys)
    offsets = np.frombuffer(keys.buffers()[1], dtype=np.int32, count=n + 1, offset=keys.offset * 4)
    data_buf = keys.buffers()[2]
    data = np.frombuffer(data_buf, dtype=np.uint8) if data_buf is not None else np.empty(0, np.uint8)
    starts, lengths = offsets[:-1].astype(np.int64), np.diff(offsets).astype(np.int64)
    h = np.full(n, _FNV_OFFSET, dtype=np.uint64)
    longest = int(lengths.max()) if n else 0
    with np.errstate(over="ignore"):
        for i in range(longest):
            rows = np.nonzero(lengths > i)[0]
            h[rows] = (h[rows] ^ data[starts[rows] + i].astype(np.uint64)) * _FNV_PRIME
    if keys.null_count:
        h[np.asarray(keys.is_null().to_numpy(zero_copy_only=False))] = 0
    return h


def partitions_for_keys(keys: pa.Array, partitions: int) -> np.ndarray:
    """The partition of every key of a column."""
    return (hash_keys(keys) % np.uint64(partitions)).astype(np.int64)
