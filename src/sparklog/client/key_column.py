"""The bytes of a column of keys as numpy arrays, for hashing every key at once."""

from __future__ import annotations

import numpy as np
import pyarrow as pa


def key_layout(keys: pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
    """``(data, starts, lengths, nulls)`` of a column of keys (binary, string or large binary):
    every key's bytes are ``data[start:start + length]`` (zero-copy views of the Arrow buffers);
    ``nulls`` is a boolean mask of the null keys, or None when there are none."""
    if isinstance(keys, pa.ChunkedArray):
        keys = keys.combine_chunks()
    if keys.type != pa.binary():
        keys = keys.cast(pa.binary())
    n = len(keys)
    offsets = np.frombuffer(keys.buffers()[1], dtype=np.int32, count=n + 1, offset=keys.offset * 4)
    data_buf = keys.buffers()[2]
    data = np.frombuffer(data_buf, dtype=np.uint8) if data_buf is not None else np.empty(0, np.uint8)
    starts = offsets[:-1].astype(np.int64)
    lengths = np.diff(offsets).astype(np.int64)
    nulls = np.asarray(keys.is_null().to_numpy(zero_copy_only=False)) if keys.null_count else None
    return data, starts, lengths, nulls
