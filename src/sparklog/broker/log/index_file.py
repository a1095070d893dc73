"""An append-only file of sorted (int64, int64) pairs: the storage under the offset and time indexes."""

from __future__ import annotations

import bisect
import contextlib
import os
import struct
from pathlib import Path

import numpy as np

_ENTRY = np.dtype([("key", "<i8"), ("value", "<i8")])
_PACK_ENTRY = struct.Struct("<qq").pack  # one entry's bytes (a numpy array per entry cost ~10 us)


def fsync_path(path: str | os.PathLike[str]) -> None:
    """fsync a file by name through a descriptor opened for the call; a missing file is skipped.

    (fsync makes the file durable whichever descriptor wrote it: a write through a descriptor
    closed since is covered.)"""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class IndexFile:
    """Sorted pairs kept in memory for lookups and appended to a file (16 bytes an entry).

    The entries are read once, on construction; the file is opened only to be written
    (:meth:`open_file`, or lazily by the first ``append``/``truncate``) and :meth:`close` closes it
    while the entries stay usable. A torn last entry (a size not a multiple of 16) is dropped on
    load and cut from the file when it is opened. The file is derived data: the owning segment
    rebuilds it when it is missing or stale.
    """

    def __init__(self, path: str | os.PathLike[str], load: bool = True) -> None:
        self.path = Path(path)
        entries = np.fromfile(self.path, dtype=_ENTRY) if load and self.path.exists() else np.empty(0, _ENTRY)
        self.keys: list[int] = entries["key"].tolist()
        self.values: list[int] = entries["value"].tolist()
        self._fd = -1

    def __len__(self) -> int:
        return len(self.keys)

    @property
    def is_open(self) -> bool:
        return self._fd >= 0

    def open_file(self) -> None:
        """Open the file for appends (created if missing), cut to the entries held."""
        if self._fd >= 0:
            return
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            os.ftruncate(fd, len(self.keys) * _ENTRY.itemsize)
            os.lseek(fd, 0, os.SEEK_END)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd

    def append(self, key: int, value: int) -> None:
        """Add an entry; keys must not decrease."""
        if self.keys and key < self.keys[-1]:
            raise ValueError(f"index keys must not decrease: {key} after {self.keys[-1]}")
        if self._fd < 0:
            self.open_file()
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
        if self._fd < 0:
            self.open_file()
        del self.keys[entries:], self.values[entries:]
        os.ftruncate(self._fd, entries * _ENTRY.itemsize)
        os.lseek(self._fd, 0, os.SEEK_END)

    def flush(self) -> None:
        """fsync the file (through a descriptor opened for the call if it is closed)."""
        if self._fd >= 0:
            os.fsync(self._fd)
        else:
            fsync_path(self.path)

    def close(self) -> None:
        """Close the file; the entries stay readable."""
        fd, self._fd = self._fd, -1
        if fd >= 0:
            with contextlib.suppress(OSError):
                os.close(fd)
