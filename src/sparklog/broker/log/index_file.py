"""An append-only file of sorted (int64, int64) pairs: the storage under the offset and time indexes."""

from __future__ import annotations

import bisect
import os
import struct
from pathlib import Path

import numpy as np

_ENTRY = np.dtype([("key", "<i8"), ("value", "<i8")])
_PACK_ENTRY = struct.Struct("<qq").pack  # one entry's bytes (a numpy array per entry cost ~10 us)


class IndexFile:
    """Sorted pairs kept in memory for lookups and appended to a file (16 bytes an entry).

    A torn last entry (a size not a multiple of 16) is dropped on load. The file is derived data:
    the owning segment rebuilds it when it is missing or stale.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        entries = np.fromfile(self.path, dtype=_ENTRY) if self.path.exists() else np.empty(0, _ENTRY)
        self.keys: list[int] = entries["key"].tolist()
        self.values: list[int] = entries["value"].tolist()
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        os.ftruncate(self._fd, len(self.keys) * _ENTRY.itemsize)
        os.lseek(self._fd, 0, os.SEEK_END)

    def __len__(self) -> int:
        return len(self.keys)

    def append(self, key: int, value: int) -> None:
        """Add an entry; keys must not decrease."""
        if self.keys and key < self.keys[-1]:
            raise ValueError(f"index keys must not decrease: {key} after {self.keys[-1]}")
        os.write(self._fd, _PACK_ENTRY(key, value))
        self.keys.append(key)
        self.values.append(value)

    def floor(self, key: int) -> int:
        """Position in the entry list of the last entry with a key <= ``key``, or -1."""
        return bisect.bisect_right(self.keys, key) - 1

    def first_at_least(self, key: int) -> int:
        """Position of the first entry with a key >= ``key`` (``len(self)`` if none)."""
        return bisect.bisect_left(self.keys, key)

    def truncate(self, entries: int) -> None:
        """Keep only the first ``entries`` entries."""
        del self.keys[entries:], self.values[entries:]
        os.ftruncate(self._fd, entries * _ENTRY.itemsize)
        os.lseek(self._fd, 0, os.SEEK_END)

    def flush(self) -> None:
        os.fsync(self._fd)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
