"""Helpers for the Spark data source tests (``tests/datasource/``): topics with known
records, reading a topic back completely, and running ``availableNow`` queries."""

from __future__ import annotations

import contextlib
import itertools
import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pyarrow as pa

from sparklog.client.admin import Admin
from sparklog.client.consumer import Consumer
from sparklog.client.producer import Producer
from sparklog.coordination.cluster import ClusterMetadata
from sparklog.datasource.query_start import start_stream

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z in ms
_names = itertools.count()


def unique(prefix: str) -> str:
    """A topic/group name no other test uses."""
    return f"{prefix}-{next(_names)}-{uuid.uuid4().hex[:6]}"


@contextlib.contextmanager
def chrooted_cluster(zookeeper_connect: str, data_dir: Any, brokers: int, prefix: str) -> Iterator[Any]:
    """A started ``LocalCluster`` of ``brokers`` processes under a fresh chroot of the session's
    ZooKeeper (``.zookeeper`` connects); stopped on exit."""
    from sparklog.local_cluster import LocalCluster

    cluster = LocalCluster(data_dir, brokers=brokers, zookeeper=f"{zookeeper_connect}/{prefix}-{uuid.uuid4().hex[:8]}")
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


def create_topic(zookeeper: str, partitions: int, prefix: str = "t", configs: dict[str, Any] | None = None) -> str:
    name = unique(prefix)
    with Admin(zookeeper) as admin:
        admin.create_topic(name, partitions, 1, configs)
    return name


def make_records(start: int, count: int, headers: bool = True, t0: int = T0) -> pa.Table:
    """Records ``start..start+count-1``: key ``k<i>``, value ``v<i>``, timestamp t0 + i s, and a
    header ``n = <i>`` (every third record has no headers)."""
    idx = range(start, start + count)
    columns: dict[str, Any] = {
        "key": pa.array([f"k{i}".encode() for i in idx], pa.binary()),
        "value": pa.array([f"v{i}".encode() for i in idx], pa.binary()),
        "timestamp": pa.array([t0 + i * 1000 for i in idx], pa.int64()),
    }
    if headers:
        columns["headers"] = pa.array(
            [None if i % 3 == 0 else [{"key": "n", "value": str(i).encode()}] for i in idx],
            pa.list_(pa.struct([pa.field("key", pa.string(), nullable=False), pa.field("value", pa.binary())])),
        )
    return pa.table(columns)


def produce(zookeeper: str, topic: str, start: int, count: int, partitions: int, headers: bool = True) -> None:
    """Send records ``start..start+count-1`` round-robin over the partitions in small batches, so that
    every partition holds several stored batches (record i goes to partition i % partitions)."""
    table = make_records(start, count, headers)
    with Producer(zookeeper, acks="all") as producer:
        for p in range(partitions):
            rows = [i for i in range(count) if (start + i) % partitions == p]
            for chunk in range(0, len(rows), 37):
                producer.send_batch(topic, table.take(pa.array(rows[chunk : chunk + 37])), partition=p)


def read_topic(zookeeper: str, topic: str) -> list[dict[str, Any]]:
    """Every record of a topic (up to its high watermarks now), as dicts, in partition/offset order."""
    with ClusterMetadata(zookeeper) as meta:
        partitions = meta.topic(topic).partitions
    with Consumer(topic, zookeeper=zookeeper, auto_offset_reset="earliest") as consumer:
        ends = {p: consumer._client.list_offsets(topic, p)["high_watermark"] for p in range(partitions)}
        out: list[dict[str, Any]] = []
        while any(consumer.position(p) < ends[p] for p in range(partitions)):
            for batch in consumer.poll_batches(timeout=2.0):
                out.extend(batch.to_pylist())
    return sorted(out, key=lambda r: (r["partition"], r["offset"]))


def values_of(rows: list[Any]) -> Counter[bytes]:
    return Counter(bytes(r["value"]) for r in rows)


def committed(zookeeper: str, group: str) -> dict[tuple[str, int], int]:
    with ClusterMetadata(zookeeper) as meta:
        return meta.committed_offsets(group)


def high_watermarks(zookeeper: str, topic: str) -> dict[tuple[str, int], int]:
    from sparklog.client.cluster_client import ClusterClient

    client = ClusterClient(zookeeper)
    try:
        n = client.topic(topic).partitions
        return {(topic, p): client.list_offsets(topic, p)["high_watermark"] for p in range(n)}
    finally:
        client.close()


def stream_reader(spark: Any, zookeeper: str, **options: Any) -> Any:
    reader = spark.readStream.format("sparklog").option("zookeeper", zookeeper)
    for key, value in options.items():
        reader = reader.option(key, str(value))
    return reader.load()


def available_now_writer(
    df: Any, checkpoint: str, sink: str = "memory", query_name: str | None = None, **options: Any
) -> Any:
    """``df``'s writer with Trigger.AvailableNow into ``sink`` (not started)."""
    writer = df.writeStream.format(sink).option("checkpointLocation", str(checkpoint)).trigger(availableNow=True)
    if query_name:
        writer = writer.queryName(query_name)
    for key, value in options.items():
        writer = writer.option(key, str(value))
    return writer


def run_available_now(df: Any, checkpoint: str, sink: str = "memory", query_name: str | None = None, **options: Any):
    """Run ``df`` with Trigger.AvailableNow into ``sink`` until it ends; returns the query."""
    writer = available_now_writer(df, checkpoint, sink, query_name, **options)
    query = start_stream(writer.start, checkpoint)
    _await(query)
    return query


def _await(query: Any) -> None:
    try:
        query.awaitTermination(240)
    except Exception as exc:  # StreamingQueryException
        raise AssertionError(f"the query failed: {exc}") from exc
    if query.isActive:
        query.stop()
        raise AssertionError("the availableNow query did not finish within 240 s")
    if query.exception() is not None:
        raise AssertionError(f"the query failed: {query.exception()}")


def collect_available_now(df: Any, checkpoint: str) -> tuple[Any, dict[int, list[dict[str, Any]]]]:
    """Run ``df`` with Trigger.AvailableNow, collecting each micro-batch's rows on the driver
    (``foreachBatch``: unlike the memory sink it can restart from a checkpoint); returns the query
    and {batch id: rows as dicts}."""
    batches: dict[int, list[dict[str, Any]]] = {}

    def collect(batch_df: Any, batch_id: int) -> None:
        batches[batch_id] = [r.asDict() for r in batch_df.collect()]

    writer = df.writeStream.foreachBatch(collect).option("checkpointLocation", checkpoint).trigger(availableNow=True)
    query = start_stream(writer.start, checkpoint)
    _await(query)
    return query, batches


def batch_rows(query: Any) -> list[int]:
    """Rows per micro-batch that read anything, from the query's progress reports."""
    return [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
