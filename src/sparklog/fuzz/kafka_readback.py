"""Reading a partition back through the Kafka listener, as a Kafka consumer reads it: ListOffsets
(earliest, latest) then Fetch requests from the leader's listener, every record batch read by the
reference reader (:func:`sparklog.fuzz.kafka_batches.parse_fetched`: CRC, magic, records, offset
deltas), not by the broker's codec. What it returns is compared with the ledger by
:func:`sparklog.fuzz.readback.verify`, exactly as the Flight read-back is.
"""

from __future__ import annotations

import time

import numpy as np
import pyarrow as pa

from sparklog.fuzz.cluster import FuzzCluster
from sparklog.fuzz.kafka_batches import parse_fetched
from sparklog.fuzz.kafka_ops import (
    FENCED_LEADER_EPOCH,
    HOST,
    LEADER_NOT_AVAILABLE,
    NOT_LEADER_OR_FOLLOWER,
    UNKNOWN_LEADER_EPOCH,
    fetch_request,
    list_offsets_request,
)
from sparklog.fuzz.kafka_wire import KafkaWire
from sparklog.fuzz.ledger import Fingerprints, fingerprint
from sparklog.fuzz.readback import PartitionData

FETCH_BYTES = 16 << 20
EARLIEST, LATEST = -2, -1
ATTEMPTS = 4
MOVED = {LEADER_NOT_AVAILABLE, NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH}


def read_partition_kafka(cluster: FuzzCluster, topic: str, partition: int, start: int | None = None) -> PartitionData:
    """Every record of the partition from ``start`` (default: its log start) to its high
    watermark, fetched from its leader's Kafka listener (looked up again, a few times, while
    leadership moves after a restart)."""
    data = _failed(f"no broker leads {topic}-{partition}")
    for attempt in range(ATTEMPTS):
        if attempt:
            time.sleep(0.5)
        leader = cluster.leader(topic, partition, refresh=attempt > 0)
        if leader is None:
            continue
        data = _read_from(cluster, leader, topic, partition, start)
        if not data.moved:
            return data
    return data


def _read_from(cluster: FuzzCluster, leader: int, topic: str, partition: int, start: int | None) -> PartitionData:
    try:
        wire = KafkaWire(HOST, cluster.kafka_port(leader), timeout=60.0)
    except OSError as exc:
        return _failed(f"{topic}-{partition}: cannot connect to broker {leader}'s Kafka listener: {exc}")
    with wire:
        bounds = []
        for timestamp in (EARLIEST, LATEST):
            answer = wire.exchange(list_offsets_request(6, [(topic, partition)], timestamp))
            if answer.response is None:
                return _failed(f"{topic}-{partition}: ListOffsets({timestamp}) on the Kafka listener: {answer.problem}")
            found = answer.response.topics[0].partitions[0]
            if found.error_code:
                return _failed(
                    f"{topic}-{partition}: ListOffsets({timestamp}) on broker {leader} "
                    f"answered error {found.error_code}",
                    moved=found.error_code in MOVED,
                )
            bounds.append(found.offset)
        position, end = max(bounds[0], start or 0), bounds[1]
        offsets: list[np.ndarray] = []
        prints: list[Fingerprints] = []
        while position < end:
            request = fetch_request(
                12, [(topic, partition, position)], max_wait_ms=0, min_bytes=1, max_bytes=FETCH_BYTES,
                partition_max_bytes=FETCH_BYTES,
            )  # fmt: skip
            answer = wire.exchange(request)
            where = f"{topic}-{partition}: a Kafka Fetch at offset {position}"
            if answer.response is None:
                return _failed(f"{where}: {answer.problem}", position)
            data = answer.response.responses[0].partitions[0]
            if data.error_code:
                return _failed(f"{where} answered error {data.error_code}", position, moved=data.error_code in MOVED)
            batches, problem = parse_fetched(bytes(data.records or b""))
            if problem:
                return _failed(f"{where} got a malformed record batch: {problem}", position)
            got = False
            for batch in batches:
                numbers = np.asarray(batch.offsets, np.int64)
                keep = np.flatnonzero((numbers >= position) & (numbers < end))
                if not len(keep):
                    continue
                lo, hi = int(keep[0]), int(keep[-1]) + 1
                offsets.append(numbers[lo:hi])
                prints.append(fingerprint(_slice(batch.records.arrow(), lo, hi)))
                got = True
            if not got:
                return _failed(f"{where} returned nothing at or after it below the high watermark {end}", position)
            next_position = int(offsets[-1][-1]) + 1
            if next_position <= position:
                return _failed(f"{where} returned nothing after it", position)
            position = next_position
    found_offsets = np.concatenate(offsets) if offsets else np.zeros(0, np.int64)
    return PartitionData(found_offsets, Fingerprints.concat(prints), log_end=end)


def _slice(batch: pa.RecordBatch, lo: int, hi: int) -> pa.RecordBatch:
    return batch.slice(lo, hi - lo)


def _failed(problem: str, offset: int = -1, moved: bool = False) -> PartitionData:
    return PartitionData(
        np.zeros(0, np.int64), Fingerprints.empty(), problem=problem, problem_offset=offset, moved=moved
    )
