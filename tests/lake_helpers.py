"""Helpers of the lake tiering and union read tests (``test_lake_*.py``): records with known
values per offset, waiting for the tierer, reading the Delta table with the independent
``deltalake`` reader, brokers and clusters with a lake dir."""

from __future__ import annotations

import time
from pathlib import Path

import pyarrow as pa
from deltalake import DeltaTable

from broker_helpers import BrokerProcess, ProcessGroup
from replication_helpers import Cluster
from sparklog import Consumer, Producer
from sparklog.broker.log.segment import SEGMENT_SUFFIX
from sparklog.coordination.cluster import ClusterMetadata
from sparklog.coordination.lake_offsets import LakeOffsets
from sparklog.lake.layout import app_id
from waiting import wait_for

PER_BATCH = 10
LAKE_TOPIC = {"lake.enabled": "true", "segment.bytes": "1024"}
TIERING_TIMEOUT_S = 60.0
# record timestamps: recent, or retention.ms (7 days by default) deletes the segments before they
# are tiered (as it should: retention bounds the local log whether tiered or not)
BASE_MS = int(time.time() * 1000) - 60_000


def value(p: int, offset: int) -> bytes:
    return b"p%d-%06d-" % (p, offset) + b"x" * 150


def produce_batches(connect: str, topic: str, p: int, batches: int, first: int = 0) -> None:
    """``batches`` batches of PER_BATCH records to partition ``p`` whose offsets start at ``first``
    (one producer, in order: the value of offset o is ``value(p, o)``)."""
    with Producer(zookeeper=connect, acks="all", linger_ms=0) as producer:
        for b in range(batches):
            base = first + b * PER_BATCH
            offsets = range(base, base + PER_BATCH)
            producer.send_batch(
                topic,
                {
                    "key": [b"k%d" % o for o in offsets],
                    "value": [value(p, o) for o in offsets],
                    "timestamp": [BASE_MS + o for o in offsets],
                    "headers": [[{"key": "o", "value": b"%d" % o}] for o in offsets],
                },
                partition=p,
            )


def table_version(lake: Path, topic: str, p: int) -> int | None:
    try:
        return DeltaTable(str(lake / topic)).transaction_version(app_id(topic, p))
    except Exception:  # no table yet
        return None


def wait_tiered(lake: Path, topic: str, p: int, offset: int) -> None:
    wait_for(
        lambda: table_version(lake, topic, p) == offset,
        TIERING_TIMEOUT_S,
        f"{topic}-{p} tiered up to {offset} (table at {table_version(lake, topic, p)})",
        interval=0.2,
    )


def assert_rows_exactly(lake: Path, topic: str, p: int, end: int) -> None:
    """The table holds partition ``p``'s offsets [0, end) exactly once, with the produced records."""
    rows = DeltaTable(str(lake / topic)).to_pyarrow_table(filters=[("partition", "=", p)])
    rows = rows.sort_by("offset")
    offsets = rows["offset"].to_pylist()
    assert offsets == list(range(end)), f"{topic}-{p}: {len(offsets)} rows, offsets {offsets[:5]}...{offsets[-5:]}"
    assert rows["partition"].to_pylist() == [p] * end
    assert rows["value"].to_pylist() == [value(p, o) for o in range(end)]
    assert rows["key"].to_pylist() == [b"k%d" % o for o in range(end)]
    millis = rows["timestamp"].cast(pa.timestamp("ms", tz="UTC")).cast(pa.int64())
    assert millis.to_pylist() == [BASE_MS + o for o in range(end)]
    assert rows["headers"].to_pylist() == [[{"key": "o", "value": b"%d" % o}] for o in range(end)]


def zk_lake_offset(connect: str, topic: str, p: int) -> int | None:
    with ClusterMetadata(connect) as meta:
        return LakeOffsets(meta.zk, meta.layout).get(topic, p)


def lake_broker(
    connect: str, base: Path, group: ProcessGroup, lake: Path, broker_id: int = 1, metrics: bool = False
) -> BrokerProcess:
    """A broker tiering into ``lake``; with ``metrics`` serving them on a free port."""
    served = ("--metrics-port", "0") if metrics else ()
    return BrokerProcess(
        broker_id, base / f"broker-{broker_id}", connect, group, extra_args=("--lake-dir", str(lake), *served)
    )


def lake_cluster(connect: str, base: Path, group: ProcessGroup, brokers: int = 2) -> tuple[Cluster, Path]:
    """A started cluster of ``brokers`` processes tiering into ``base/lake``, and that lake dir."""
    lake = base / "lake"
    cluster = Cluster(connect, base, group, brokers=brokers, broker_args=lambda _i, _port: ("--lake-dir", str(lake)))
    return cluster.start(), lake


def segment_bases(data_dir: Path, topic: str, p: int) -> list[int]:
    directory = data_dir / f"{topic}-{p}"
    return sorted(int(f.name[: -len(SEGMENT_SUFFIX)]) for f in directory.glob(f"*{SEGMENT_SUFFIX}"))


TYPED_V1 = {
    "type": "record",
    "name": "Click",
    "fields": [
        {"name": "page", "type": "string"},
        {"name": "ms", "type": "long"},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
    ],
}
# a field with a non-null default: rows tiered before it was registered must read "unknown"
COUNTRY = {"name": "country", "type": ["string", "null"], "default": "unknown"}
TYPED_V2 = {**TYPED_V1, "fields": [*TYPED_V1["fields"], COUNTRY]}


def click(i: int, **more: object) -> dict:
    return {"page": f"/p{i}-" + "x" * 300, "ms": i, "tags": [f"t{i % 3}"], **more}


def consume_all(consumer: Consumer, total: int) -> dict[int, list[tuple[int, bytes]]]:
    got: dict[int, list[tuple[int, bytes]]] = {}
    count = 0

    def more() -> bool:
        nonlocal count
        for record in consumer.poll(timeout=1.0):
            got.setdefault(record.partition, []).append((record.offset, record.value))
            count += 1
        return count >= total

    wait_for(more, 60, f"{total} records consumed", interval=0)
    assert not consumer.poll(timeout=1.0)  # and nothing more
    return got
