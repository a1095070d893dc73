"""A broker process killed with SIGKILL (kill -9) while producers write with ``acks=1``, then restarted
on the same data dir and port: every acknowledged record is there exactly once, in order, and producing
works again; a clean restart and a second crash keep the data too."""

from __future__ import annotations

import threading
import time
from collections import Counter
from typing import Any

import pytest

from broker_helpers import BrokerProcess, read_topic
from sparklog import Admin, Consumer, Producer
from sparklog.errors import SparklogError
from waiting import wait_for

TOPIC = "crash"
PARTITIONS = 3


class AckedWriter(threading.Thread):
    """Writes numbered records until stopped or a send fails, alternating ``send()`` blocks and
    ``send_batch()`` blocks; remembers exactly what was acknowledged and where."""

    def __init__(self, producer: Producer, block: int = 25) -> None:
        super().__init__(daemon=True)
        self.producer = producer
        self.block = block
        self.acked: list[tuple[bytes, int, int]] = []  # (value, partition, offset) in acknowledgement order
        self.attempted: set[bytes] = set()
        self.error: BaseException | None = None
        self.stop = threading.Event()

    def run(self) -> None:
        seq = 0
        try:
            while not self.stop.is_set():
                values = [f"v{seq + i:07d}".encode() for i in range(self.block)]
                keys = [f"k{(seq + i) % 7}".encode() for i in range(self.block)]
                self.attempted.update(values)
                if (seq // self.block) % 2 == 0:
                    futures = [self.producer.send(TOPIC, v, key=k) for k, v in zip(keys, values, strict=True)]
                    for v, f in zip(values, futures, strict=True):
                        meta = f.result(60)
                        self.acked.append((v, meta.partition, meta.offset))
                else:
                    p = (seq // self.block) % PARTITIONS
                    (meta,) = self.producer.send_batch(TOPIC, {"key": keys, "value": values}, partition=p)
                    assert meta.last_offset - meta.base_offset + 1 == len(values)
                    self.acked += [(v, p, meta.base_offset + i) for i, v in enumerate(values)]
                seq += self.block
        except BaseException as exc:  # the broker went away: stop writing
            self.error = exc


@pytest.mark.slow
def test_acknowledged_records_survive_kill_9_and_restart(start_broker: Any, sparklog_connect: str) -> None:
    broker = start_broker(1)
    with Admin(sparklog_connect) as admin:
        admin.create_topic(TOPIC, PARTITIONS)
    producer = Producer(zookeeper=sparklog_connect, acks="1", linger_ms=1, retries=3)
    try:
        writer = AckedWriter(producer)
        writer.start()
        wait_for(lambda: len(writer.acked) >= 3000 or writer.error, 60, "3000 acknowledged records")
        assert writer.error is None, repr(writer.error)
        broker.kill()  # mid-stream: the writer is sending right now
        killed_at = len(writer.acked)
        writer.join(60)
        assert not writer.is_alive(), "the producer hung after its broker was killed"
        assert isinstance(writer.error, SparklogError), repr(writer.error)
        acked = list(writer.acked)
        assert len(acked) >= killed_at

        broker.restart()

        stored = read_topic(broker.location, TOPIC, PARTITIONS)
        at = {(p, r["offset"]): r["value"] for p, rows in stored.items() for r in rows}
        counts = Counter(r["value"] for rows in stored.values() for r in rows)
        # every acknowledged record: exactly once, at the offset it was acknowledged with
        for value, p, offset in acked:
            found = at.get((p, offset))
            assert found == value, f"{value!r} acknowledged at {p}@{offset}, found {found!r}"
            assert counts[value] == 1, f"{value!r} stored {counts[value]} times"
        # in order: per partition the acknowledged offsets grow in acknowledgement order
        for p in range(PARTITIONS):
            offsets = [o for _v, q, o in acked if q == p]
            assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)
            assert [r["offset"] for r in stored[p]] == list(range(len(stored[p])))
        # the rest is at most the in-flight, unacknowledged tail: sent once, never invented or duplicated
        extra = set(counts) - {v for v, _p, _o in acked}
        assert extra <= writer.attempted, sorted(extra - writer.attempted)[:5]
        assert all(counts[v] == 1 for v in extra)
        assert len(extra) <= 2 * writer.block

        # producing works again, with the same producer and with a new one
        before = {p: len(rows) for p, rows in stored.items()}
        after_restart = [producer.send(TOPIC, f"after-{i}".encode(), key=b"after").result(30) for i in range(5)]
        batch = producer.send_batch(TOPIC, {"value": [b"batch-after-1", b"batch-after-2"]}, partition=0)
        with Producer(zookeeper=sparklog_connect) as fresh:
            fresh_meta = fresh.send(TOPIC, b"fresh", partition=1).result(30)
    finally:
        producer.close()

    (p_after,) = {m.partition for m in after_restart}
    assert [m.offset for m in after_restart] == list(range(before[p_after], before[p_after] + 5))
    assert batch[0].base_offset == before[0] + (5 if p_after == 0 else 0)
    final = read_topic(broker.location, TOPIC, PARTITIONS)
    assert final[p_after][before[p_after]].get("value") == b"after-0"
    assert [r["value"] for r in final[0][-2:]] == [b"batch-after-1", b"batch-after-2"]
    assert final[1][fresh_meta.offset]["value"] == b"fresh"
    for p in range(PARTITIONS):
        assert final[p][: before[p]] == stored[p]  # the old records are untouched

    # and a consumer reads it all from the beginning
    with Consumer(TOPIC, zookeeper=sparklog_connect, auto_offset_reset="earliest") as consumer:
        total = sum(len(rows) for rows in final.values())
        records: list[Any] = []
        deadline = time.monotonic() + 30
        while len(records) < total and time.monotonic() < deadline:
            records += consumer.poll(timeout=1.0)
    assert sorted((r.partition, r.offset, r.value) for r in records) == sorted(
        (p, r["offset"], r["value"]) for p, rows in final.items() for r in rows
    )


@pytest.mark.slow
def test_a_clean_restart_keeps_everything_and_a_second_crash_too(start_broker: Any, sparklog_connect: str) -> None:
    """SIGTERM then restart, then kill -9 right after a write then restart: same data each time."""
    broker: BrokerProcess = start_broker(1)
    with Admin(sparklog_connect) as admin:
        admin.create_topic(TOPIC, PARTITIONS)
    with Producer(zookeeper=sparklog_connect) as producer:
        for p in range(PARTITIONS):
            producer.send_batch(TOPIC, {"key": [b"k"] * 100, "value": [f"{p}-{i}".encode() for i in range(100)]}, p)
    before = read_topic(broker.location, TOPIC, PARTITIONS)
    assert broker.stop() == 0
    broker.restart()
    assert read_topic(broker.location, TOPIC, PARTITIONS) == before
    with Producer(zookeeper=sparklog_connect) as producer:
        meta = producer.send(TOPIC, b"last words", partition=2).result(30)
    broker.kill()
    broker.restart()
    after = read_topic(broker.location, TOPIC, PARTITIONS)
    assert after[2][-1]["value"] == b"last words" and after[2][-1]["offset"] == meta.offset == 100
    assert {p: rows[:100] for p, rows in after.items()} == before
