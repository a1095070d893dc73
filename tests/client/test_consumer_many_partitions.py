"""A Consumer of many partitions: one fetch stream per broker, topic and connection carries them all
(``sparklog.client.fetch_session``), so its threads do not grow with the partitions; every record
still arrives once, in order per partition, also while leaders move."""

from __future__ import annotations

import signal
import threading
import time
from typing import Any

import pyarrow as pa
import pytest

from replication_helpers import (
    RF3_MIN_ISR_2,
    AckedWriter,
    Cluster,
    TailingConsumer,
    check_delivery,
    quiet_finish,
    wait_progress,
)
from sparklog import Admin, Consumer, Producer
from sparklog.client.cluster_client import FETCH_CONNECTIONS
from waiting import wait_for


def _fetch_threads() -> int:
    return sum(1 for t in threading.enumerate() if t.name.startswith("sparklog-fetch-"))


def _drain(consumer: Consumer, expected: int, timeout: float = 120.0) -> pa.Table:
    batches: list[pa.RecordBatch] = []
    seen = 0
    deadline = time.monotonic() + timeout
    while seen < expected and time.monotonic() < deadline:
        for batch in consumer.poll_batches(timeout=1.0):
            batches.append(batch)
            seen += batch.num_rows
    batches += consumer.poll_batches(timeout=0.5)  # nothing more may come
    assert seen == expected, f"read {seen} records, expected {expected}"
    return pa.Table.from_batches(batches)


@pytest.mark.slow
def test_a_thousand_partitions_are_consumed_once_in_order_with_few_threads(
    start_broker: Any, sparklog_connect: str
) -> None:
    """1000 partitions of 3 batches each are read back exactly once and in order per partition by
    one consumer using at most FETCH_CONNECTIONS fetch threads; records produced later to a few
    partitions follow on the open streams."""
    start_broker(1)
    topic = "thousand"
    partitions = 1000
    with Admin(sparklog_connect) as admin:
        admin.create_topic(topic, partitions)
    with Producer(sparklog_connect) as producer:
        for b in range(3):
            futures = [
                producer.send_batch_async(topic, {"value": [b"%d:%d" % (p, b)] * 4}, partition=p)
                for p in range(partitions)
            ]
            for future in futures:
                future.result()
    with Consumer(topic, zookeeper=sparklog_connect, auto_offset_reset="earliest") as consumer:
        table = _drain(consumer, partitions * 12)
        threads = _fetch_threads()
        with Producer(sparklog_connect, linger_ms=0) as producer:
            for p in range(0, partitions, 100):
                producer.send_batch(topic, {"value": [b"late-%d" % p]}, partition=p)
        late = _drain(consumer, 10)
    print(f"{threads} fetch threads for {partitions} partitions")
    assert threads <= FETCH_CONNECTIONS
    rows = table.select(["partition", "offset", "value"]).to_pylist()
    per_partition: dict[int, list[tuple[int, bytes]]] = {}
    for row in rows:
        per_partition.setdefault(row["partition"], []).append((row["offset"], row["value"]))
    assert sorted(per_partition) == list(range(partitions))
    for p, got in per_partition.items():
        assert [o for o, _ in got] == list(range(12)), f"partition {p}"
        assert [v for _, v in got] == [b"%d:%d" % (p, b) for b in range(3) for _ in range(4)]
    assert sorted(late.column("value").to_pylist()) == sorted(b"late-%d" % p for p in range(0, partitions, 100))
    assert set(late.column("offset").to_pylist()) == {12}


@pytest.mark.slow
def test_partitions_move_between_streams_when_their_leader_stops(cluster: Cluster) -> None:
    """60 partitions led by 3 brokers, one consumer tailing them while two writers write with
    acks=all. A broker stops (SIGTERM: its leaderships move to the others) and comes back: the
    consumer's partitions move to the streams of their new leaders, and it reads every
    acknowledged record once, in order per partition."""
    topic = "moving"
    partitions = 60
    with Admin(cluster.connect) as admin:
        admin.create_topic(topic, partitions, 3, RF3_MIN_ISR_2)
    cluster.wait_full_isr(topic)
    writers = [AckedWriter(cluster.connect, topic, partitions, f"w{i}") for i in range(2)]
    tail = TailingConsumer(cluster.connect, topic)
    try:
        tail.start()
        for w in writers:
            w.start()
        wait_progress(writers, 100)
        victim = cluster.state(topic, 0).leader
        cluster[victim].proc.send_signal(signal.SIGTERM)
        assert cluster[victim].proc.wait(60) == 0
        wait_progress(writers, 100)  # written at the other leaders, while the consumer follows them
        cluster[victim].start()
        cluster.wait_full_isr(topic)
        wait_progress(writers, 100)
        for w in writers:
            w.finish()
        ends = {}
        for p in range(partitions):
            ends[p] = max([a.offset + 1 for w in writers for a in w.acked if a.partition == p], default=0)
        wait_for(
            lambda: all(tail.consumer.position(p) >= end for p, end in ends.items()),
            120,
            "the consumer to read every acknowledged record",
        )
    finally:
        quiet_finish(tail, *writers)
    assert not tail.errors, tail.errors[:3]
    summary = check_delivery(tail.records, writers)
    print(summary)
