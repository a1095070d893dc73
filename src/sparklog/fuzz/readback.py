"""Reading acknowledged data back and comparing it with the ledger.

A partition is read with plain consumer fetches (``replica_id`` -1, no ``compact``) from its
leader; every batch passes Arrow's full validation before its values are touched. An acknowledged
record must be there with its fingerprints (and its timestamp, when the case fixed it), the same
as at its first read. On a compacted topic a record may be gone if a later record of the same key
is there (or it was a tombstone older than ``delete.retention.ms``, which the cleaner drops by
record time, or such a tombstone of its key came later: gone too, it took the key away).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable

import numpy as np

from sparklog.fuzz import flight_ops
from sparklog.fuzz.cluster import FuzzCluster
from sparklog.fuzz.ledger import Entry, Fingerprints, Ledger, fingerprint
from sparklog.fuzz.report import LOST, MISMATCH, UNREADABLE, Anomaly
from sparklog.records import now_ms

FETCH_BYTES = 16 << 20
MAX_ANOMALIES_PER_CHECK = 20
_DAY_MS = 86_400_000


@dataclasses.dataclass
class PartitionData:
    """What a read returned: offsets (ascending) and their fingerprints, or why it failed."""

    offsets: np.ndarray
    prints: Fingerprints
    log_end: int = 0
    problem: str | None = None
    problem_offset: int = -1  # where the failed read started
    moved: bool = False  # it failed because the partition's leadership moved (a reader may look again)


def read_partition(cluster: FuzzCluster, topic: str, partition: int, start: int | None = None) -> PartitionData:
    """Every record of the partition from ``start`` (default: its log start) to its high watermark."""
    offsets_answer, problem = cluster.offsets_or_error(topic, partition, attempts=4)
    if offsets_answer is None:
        return _failed(str(problem))
    position = max(int(offsets_answer["log_start_offset"]), start or 0)
    end = int(offsets_answer["high_watermark"])
    leader = cluster.leader(topic, partition)
    assert leader is not None
    location = cluster.location(leader)
    chunks_offsets: list[np.ndarray] = []
    chunks_prints: list[Fingerprints] = []
    while position < end:
        ticket = json.dumps(
            {"topic": topic, "partition": partition, "offset": position, "max_bytes": FETCH_BYTES, "max_wait_ms": 0}
        ).encode()
        got = flight_ops.get(location, ticket, timeout=60.0, via=cluster.admin)
        if got.invalid:
            return _failed(
                f"{topic}-{partition}: a fetch at offset {position} got a malformed batch: {got.invalid}", position
            )
        if got.error is not None:
            return _failed(f"{topic}-{partition}: a fetch at offset {position} failed: {got.error.message}", position)
        rows = [b for b in got.batches if b.num_rows]
        if not rows:
            return _failed(
                f"{topic}-{partition}: empty fetch at offset {position} below the high watermark {end}", position
            )
        for batch in rows:
            offsets = batch.column("offset").to_numpy(zero_copy_only=False).astype(np.int64)
            keep = (offsets >= position) & (offsets < end)
            if not keep.any():
                continue
            picked = np.flatnonzero(keep)
            lo, hi = int(picked[0]), int(picked[-1]) + 1
            chunks_offsets.append(offsets[lo:hi])
            chunks_prints.append(fingerprint(batch.slice(lo, hi - lo)))
        next_position = int(chunks_offsets[-1][-1]) + 1 if chunks_offsets else position
        if next_position <= position:
            return _failed(
                f"{topic}-{partition}: a fetch at offset {position} returned nothing at or after it", position
            )
        position = next_position
    offsets = np.concatenate(chunks_offsets) if chunks_offsets else np.zeros(0, np.int64)
    return PartitionData(offsets, Fingerprints.concat(chunks_prints), log_end=end)


def _failed(problem: str, offset: int = -1) -> PartitionData:
    return PartitionData(np.zeros(0, np.int64), Fingerprints.empty(), problem=problem, problem_offset=offset)


def _suspects(entries: list[Entry], offset: int) -> str:
    """The acknowledged invalid batches at or after ``offset``: what a malformed response most likely holds."""
    found = [e for e in entries if e.last >= offset and e.invalid][:3]
    if not found:
        return ""
    return "; accepted invalid batches there: " + ", ".join(e.describe() for e in found)


Reader = Callable[[FuzzCluster, str, int, int | None], PartitionData]


def verify(cluster: FuzzCluster, ledger: Ledger, full: bool, read: Reader | None = None) -> list[Anomaly]:
    """Compare the ledger with the brokers: every entry (``full``) or those never read back yet;
    ``read`` reads a partition (default :func:`read_partition`, sparklog's own fetches; the Kafka
    mode also reads through the Kafka listener, :mod:`sparklog.fuzz.kafka_readback`)."""
    read = read or read_partition
    anomalies: list[Anomaly] = []
    for (topic, partition), entries in ledger.entries.items():
        todo = entries if full else [e for e in entries if e.observed is None]
        if not todo:
            continue
        compacted = cluster.topics[topic].compacted if topic in cluster.topics else False
        # a compacted partition is read whole: a missing record needs a later one of its key
        start = None if full or compacted else min(e.base for e in todo)
        data = read(cluster, topic, partition, start)
        if data.problem:
            anomalies.append(Anomaly(UNREADABLE, data.problem + _suspects(entries, data.problem_offset)))
            continue
        view = _Compaction.of(entries, data) if compacted else None
        for entry in todo:
            problem = _compare(entry, data, view)
            if problem:
                anomalies.append(Anomaly(problem[0], f"{entry.describe()}: {problem[1]}"))
            if len(anomalies) >= MAX_ANOMALIES_PER_CHECK:
                return anomalies
    return anomalies


def _compare(entry: Entry, data: PartitionData, compaction: _Compaction | None) -> tuple[str, str] | None:
    lo = int(np.searchsorted(data.offsets, entry.base))
    hi = int(np.searchsorted(data.offsets, entry.last, side="right"))
    present = data.offsets[lo:hi]
    got = data.prints.slice(lo, hi)
    if len(present) < entry.count:
        if entry.expected is None:
            if compaction is None:
                return LOST, f"{entry.count - len(present)} of {entry.count} records are not read back"
        else:
            wanted = np.arange(entry.base, entry.last + 1)
            missing = np.setdiff1d(wanted, present)
            problem = _missing_allowed(entry, missing, compaction)
            if problem:
                return LOST, problem
    if entry.expected is not None and len(present):
        index = present - entry.base
        expected = entry.expected.slice(0, entry.count)
        wrong = np.flatnonzero(expected.record[index] != got.record)
        if len(wrong):
            return MISMATCH, f"record at offset {int(present[wrong[0]])} differs from what was acknowledged"
        if entry.timestamps_known:
            wrong_ts = np.flatnonzero(expected.timestamp[index] != got.timestamp)
            if len(wrong_ts):
                i = int(wrong_ts[0])
                return MISMATCH, (
                    f"timestamp at offset {int(present[i])} is {int(got.timestamp[i])}, "
                    f"acknowledged {int(expected.timestamp[index[i]])}"
                )
    full = got.full()
    if entry.observed is None:
        if len(present) == entry.count:
            entry.observed = full
    elif len(present) == entry.count and not np.array_equal(entry.observed, full):
        i = int(np.flatnonzero(entry.observed != full)[0])
        return MISMATCH, f"record at offset {int(present[i])} changed since it was first read back"
    return None


def _missing_allowed(entry: Entry, missing: np.ndarray, compaction: _Compaction | None) -> str | None:
    """Why the missing records are a loss (None if compaction explains them)."""
    if compaction is None:
        return f"{len(missing)} of {entry.count} records are not read back (first: offset {int(missing[0])})"
    assert entry.expected is not None
    for offset in missing.tolist():
        i = offset - entry.base
        expired = entry.timestamps_known and entry.expected.timestamp[i] < compaction.horizon  # a tombstone itself
        if not expired and not compaction.explains(int(entry.expected.key[i]), offset):
            return f"offset {offset} was compacted away without a later record of its key"
    return None


@dataclasses.dataclass
class _Compaction:
    """What may explain a record missing from a compacted partition, from one read of it (so that
    each missing record is judged in constant time, however many there are): each key's last
    offset read back; each key's last acknowledged record, dated before the tombstone horizon
    (``delete.retention.ms``), that is not read back (a tombstone the cleaner dropped, which took
    every earlier record of its key with it); the last acknowledged record of unknown content not
    read back (it may have been such a tombstone of any key)."""

    horizon: int
    last_read: dict[int, int]
    tombstone_gone: dict[int, int]
    unknown_gone: int

    @classmethod
    def of(cls, entries: list[Entry], data: PartitionData) -> _Compaction:
        horizon = now_ms() - _DAY_MS
        keys, inverse = np.unique(data.prints.key, return_inverse=True)
        last = np.full(len(keys), -1, np.int64)
        np.maximum.at(last, inverse, data.offsets)
        tombstone_gone: dict[int, int] = {}
        unknown_gone = -1
        for entry in entries:
            wanted = np.arange(entry.base, entry.last + 1)
            gone = wanted[~_present(wanted, data.offsets)]
            if not len(gone):
                continue
            if entry.expected is None:
                unknown_gone = max(unknown_gone, int(gone[-1]))
                continue
            if not entry.timestamps_known:
                continue
            i = gone - entry.base
            old = entry.expected.timestamp[i] < horizon
            for key, offset in zip(entry.expected.key[i][old].tolist(), gone[old].tolist(), strict=True):
                if offset > tombstone_gone.get(key, -1):
                    tombstone_gone[key] = offset
        return cls(horizon, dict(zip(keys.tolist(), last.tolist(), strict=True)), tombstone_gone, unknown_gone)

    def explains(self, key: int, offset: int) -> bool:
        """Whether a record of ``key`` at ``offset`` may be gone: a later one of its key is read
        back, or a later record that is not may have been a tombstone of it."""
        return (
            self.last_read.get(key, -1) > offset
            or self.unknown_gone > offset
            or self.tombstone_gone.get(key, -1) > offset
        )


def _present(wanted: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Which of ``wanted`` are among the (ascending) ``offsets``."""
    if not len(offsets):
        return np.zeros(len(wanted), bool)
    at = np.minimum(np.searchsorted(offsets, wanted), len(offsets) - 1)
    return offsets[at] == wanted
