"""Everything the brokers acknowledged, with fingerprints of the records, to compare read-backs with.

An :class:`Entry` is one acknowledged offset range (a produced batch, or a copied slice). Its
records are kept as 64-bit fingerprints (numpy arrays, 8 bytes a record per array): the key's (log
compaction keeps the latest record of a key), the record's (key, value, headers) and the
timestamp, when the case fixed one. A batch the fuzzer cannot know the stored form of (one the
broker had to refuse, or a copy of records it never saw) has no expected fingerprints: it must
still be read back, valid, and the same at every later read (``observed``: the first read-back's
fingerprints including timestamps).
"""

from __future__ import annotations

import bisect
import dataclasses
import hashlib

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


def _fp(data: bytes) -> int:
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")


_NO_KEY = _fp(b"\x00")


@dataclasses.dataclass
class Fingerprints:
    """Per record: key, record (key + value + headers) and timestamp (ms)."""

    key: np.ndarray
    record: np.ndarray
    timestamp: np.ndarray

    def __len__(self) -> int:
        return len(self.record)

    def full(self) -> np.ndarray:
        """Record and timestamp together: what must not change between two reads."""
        return self.record ^ (self.timestamp.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15))

    def slice(self, start: int, stop: int) -> Fingerprints:
        return Fingerprints(self.key[start:stop], self.record[start:stop], self.timestamp[start:stop])

    @classmethod
    def concat(cls, parts: list[Fingerprints]) -> Fingerprints:
        if not parts:
            return cls.empty()
        return cls(
            np.concatenate([p.key for p in parts]),
            np.concatenate([p.record for p in parts]),
            np.concatenate([p.timestamp for p in parts]),
        )

    @classmethod
    def empty(cls) -> Fingerprints:
        return cls(np.zeros(0, np.uint64), np.zeros(0, np.uint64), np.zeros(0, np.int64))


def fingerprint(batch: pa.RecordBatch) -> Fingerprints:
    """Fingerprints of a batch in the stored layout (``timestamp``, ``key``, ``value``, ``headers``
    by name; ``offset`` ignored). The batch must have passed Arrow's full validation."""
    names = batch.schema.names
    rows = batch.num_rows
    keys = batch.column("key").to_pylist() if "key" in names else [None] * rows
    values = batch.column("value").to_pylist() if "value" in names else [None] * rows
    headers = batch.column("headers").to_pylist() if "headers" in names else [None] * rows
    key_fp = np.empty(rows, np.uint64)
    record_fp = np.empty(rows, np.uint64)
    for i, (k, v, h) in enumerate(zip(keys, values, headers, strict=True)):
        kf = _NO_KEY if k is None else _fp(b"\x01" + bytes(k))
        key_fp[i] = kf
        blob = kf.to_bytes(8, "little") + (b"\x00" if v is None else b"\x01" + bytes(v)) + repr(h).encode()
        record_fp[i] = _fp(blob)
    if "timestamp" in names and pa.types.is_timestamp(batch.schema.field("timestamp").type):
        column = batch.column("timestamp")
        ts = pc.fill_null(column.cast(pa.int64()), 0).to_numpy(zero_copy_only=False).astype(np.int64)
    else:
        ts = np.zeros(rows, np.int64)
    return Fingerprints(key_fp, record_fp, ts)


@dataclasses.dataclass
class Entry:
    """One acknowledged range ``base..last`` of a partition."""

    topic: str
    partition: int
    base: int
    last: int
    expected: Fingerprints | None  # None: the stored form is not known to the fuzzer
    timestamps_known: bool
    case_index: int
    source: str  # "produce" or "copy"
    observed: np.ndarray | None = None  # full fingerprints at the first read-back
    invalid: bool = False  # a batch the broker had to refuse (it accepted it)

    @property
    def count(self) -> int:
        return self.last - self.base + 1

    def describe(self) -> str:
        return (
            f"{self.topic}-{self.partition} offsets {self.base}..{self.last} ({self.source} of case #{self.case_index})"
        )


class Ledger:
    """Entries per partition, sorted by base offset."""

    def __init__(self) -> None:
        self.entries: dict[tuple[str, int], list[Entry]] = {}
        self._bases: dict[tuple[str, int], list[int]] = {}

    def clear(self) -> None:
        self.entries.clear()
        self._bases.clear()

    @property
    def batches(self) -> int:
        return sum(len(e) for e in self.entries.values())

    @property
    def records(self) -> int:
        return sum(e.count for entries in self.entries.values() for e in entries)

    def add(self, entry: Entry, idempotent: bool = False) -> str | None:
        """Record an acknowledgement; a problem if it overlaps an earlier one with other records.
        The same range again is a resent batch the broker recognised (kept once): with the same
        records, or from an idempotent producer (whose sequence, not content, names a batch)."""
        key = (entry.topic, entry.partition)
        entries = self.entries.setdefault(key, [])
        bases = self._bases.setdefault(key, [])
        i = bisect.bisect_left(bases, entry.base)
        for neighbour in entries[max(0, i - 1) : i + 1]:
            if neighbour.last < entry.base or entry.last < neighbour.base:
                continue
            if (neighbour.base, neighbour.last) == (entry.base, entry.last) and (idempotent or _same(neighbour, entry)):
                return None
            return f"{entry.describe()} overlaps the earlier acknowledgement {neighbour.describe()}"
        entries.insert(i, entry)
        bases.insert(i, entry.base)
        return None

    def invalid(self, limit: int) -> list[Entry]:
        """The latest acknowledged batches that the broker should have refused."""
        found = [
            e for entries in self.entries.values() for e in entries if e.expected is None and e.source == "produce"
        ]
        return sorted(found, key=lambda e: e.case_index)[-limit:]

    def lookup(self, topic: str, partition: int, first: int, last: int) -> Fingerprints | None:
        """The expected fingerprints of ``first..last`` if every record there is known."""
        entries = self.entries.get((topic, partition), [])
        bases = self._bases.get((topic, partition), [])
        parts: list[Fingerprints] = []
        offset = first
        i = max(0, bisect.bisect_right(bases, first) - 1)
        while offset <= last and i < len(entries):
            entry = entries[i]
            if entry.base > offset or entry.expected is None or not entry.timestamps_known:
                return None
            if entry.last >= offset:
                stop = min(entry.last, last)
                parts.append(entry.expected.slice(offset - entry.base, stop - entry.base + 1))
                offset = stop + 1
            i += 1
        return Fingerprints.concat(parts) if offset > last else None


def _same(a: Entry, b: Entry) -> bool:
    if a.expected is None or b.expected is None:
        return True
    return bool(np.array_equal(a.expected.record, b.expected.record))
