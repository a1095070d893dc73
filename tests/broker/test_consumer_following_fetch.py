"""The following fetch (``"follow": true``): one open stream carries every later append to a
consumer, read ahead by at most ``max_bytes``, ended when idle, when its schema no longer fits,
or at once when the consumer seeks or closes. The assertions are about data: every record once,
in order, with its own key and value."""

from __future__ import annotations

import time
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.flight as flight

from broker_helpers import flight_client
from sparklog import Admin, Consumer, Producer
from sparklog.protocol import wire
from sparklog.protocol.fetch_columns import Restorer
from sparklog.protocol.multi_fetch import MAX_WAIT_MS
from waiting import finishes


def _follow_ticket(topic: str, offset: int, max_wait_ms: int) -> flight.Ticket:
    request = {
        "topic": topic,
        "partition": 0,
        "offset": offset,
        "max_bytes": 1 << 20,
        "max_wait_ms": max_wait_ms,
        "compact": True,
        "follow": True,
    }
    return flight.Ticket(wire.encode(request))


def test_one_following_fetch_carries_appends_made_after_it_opened(start_broker: Any, sparklog_connect: str) -> None:
    """A plain fetch answers once; a following fetch keeps its stream open: batches produced one
    after the other (each after the previous one was read, the last after the stream was idle for a
    fifth of its max_wait_ms) arrive on the same call, and the stream ends by itself once nothing
    new came for max_wait_ms."""
    broker = start_broker(1)
    topic = "follow-raw"
    with Admin(sparklog_connect) as admin:
        admin.create_topic(topic, 1)
    client = flight_client(broker.location)
    restore = Restorer().restore
    with Producer(sparklog_connect, linger_ms=0) as producer:
        producer.send_batch(topic, {"value": [b"a0", b"a1"]}, partition=0)
        reader = client.do_get(_follow_ticket(topic, 0, max_wait_ms=5000))
        received: list[pa.RecordBatch] = []
        for idle, more in ((0.0, [b"b0"]), (0.0, [b"c0", b"c1", b"c2"]), (1.0, [b"d0"]), (0.0, None)):
            chunk = reader.read_chunk()
            received.append(restore(chunk.data, chunk.app_metadata))
            if more is not None:
                time.sleep(idle)  # idle, well within max_wait_ms: the stream must still be open
                producer.send_batch(topic, {"value": more}, partition=0)
        try:  # idle: the stream ends (after about max_wait_ms), it does not hang
            reader.read_chunk()
            ended = False
        except StopIteration:
            ended = True
    client.close()
    assert ended
    table = pa.Table.from_batches(received)  # d0 among them: the idle stream did not end early
    assert table.column("offset").to_pylist() == list(range(7))
    assert table.column("value").to_pylist() == [b"a0", b"a1", b"b0", b"c0", b"c1", b"c2", b"d0"]


def test_a_later_record_the_stream_schema_cannot_carry_ends_the_stream_not_the_data(
    start_broker: Any, sparklog_connect: str
) -> None:
    """The first response had no keys and one timestamp, so its stream leaves the key and
    timestamp columns out; records with keys and their own timestamps come later. The broker ends
    that stream and the consumer fetches again: every record keeps its key and timestamp."""
    start_broker(1)
    topic = "follow-schema"
    with Admin(sparklog_connect) as admin:
        admin.create_topic(topic, 1)
    with (
        Producer(sparklog_connect, linger_ms=0) as producer,
        Consumer(topic, zookeeper=sparklog_connect, auto_offset_reset="earliest", max_wait_ms=5000) as consumer,
    ):
        producer.send_batch(topic, {"value": [b"u0", b"u1"]}, partition=0)
        got = _poll_until(consumer, 2)
        keyed = pa.table(
            {
                "key": pa.array([b"k2", b"k3"]),
                "value": pa.array([b"v2", b"v3"]),
                "timestamp": pa.array([1_000, 2_000], pa.timestamp("ms", tz="UTC")),
            }
        )
        producer.send_batch(topic, keyed, partition=0)
        got += _poll_until(consumer, 2)
        producer.send_batch(topic, {"value": [b"u4"]}, partition=0)
        got += _poll_until(consumer, 1)
        assert consumer.poll(timeout=0.3) == []
    assert [r.offset for r in got] == [0, 1, 2, 3, 4]
    assert [(r.key, r.value) for r in got] == [
        (None, b"u0"),
        (None, b"u1"),
        (b"k2", b"v2"),
        (b"k3", b"v3"),
        (None, b"u4"),
    ]
    assert [r.timestamp.timestamp() for r in got[2:4]] == [1.0, 2.0]


def _poll_until(consumer: Consumer, count: int, timeout: float = 20.0) -> list[Any]:
    records: list[Any] = []
    deadline = time.monotonic() + timeout
    while len(records) < count and time.monotonic() < deadline:
        records.extend(consumer.poll(timeout=1.0))
    assert len(records) == count, f"polled {len(records)} records, expected {count}"
    return records


def test_read_ahead_is_bounded_by_max_bytes_and_nothing_is_lost(start_broker: Any, sparklog_connect: str) -> None:
    """A consumer that does not poll holds at most about max_bytes per partition read ahead (the
    broker is held back by flow control); polling then returns every record once, in order."""
    start_broker(1)
    topic = "follow-bounded"
    with Admin(sparklog_connect) as admin:
        admin.create_topic(topic, 2)
    value = b"x" * 1000
    rows = 3000  # 3 MB per partition, far more than max_bytes
    with Producer(sparklog_connect) as producer:
        for p in range(2):
            for start in range(0, rows, 500):
                producer.send_batch(
                    topic, {"value": [value[:-8] + i.to_bytes(8, "big") for i in range(start, start + 500)]}, p
                )
    max_bytes = 64 << 10
    with Consumer(topic, zookeeper=sparklog_connect, auto_offset_reset="earliest", max_bytes=max_bytes) as consumer:
        first = consumer.poll_batches(timeout=10.0)
        assert first
        time.sleep(1.5)  # the fetch threads read ahead as far as they may
        queued = _queued_bytes(consumer)
        # each partition: under max_bytes, plus the one message that crossed it
        assert queued <= 2 * (max_bytes + 600 * 1024), f"{queued} bytes read ahead"
        batches = first + _drain(consumer, 2 * rows - sum(b.num_rows for b in first))
    table = pa.Table.from_batches(batches)
    for p in range(2):
        part = table.filter(pc.equal(table.column("partition"), p))
        assert part.column("offset").to_pylist() == list(range(rows))
        assert [int.from_bytes(v[-8:], "big") for v in part.column("value").to_pylist()] == list(range(rows))


def _queued_bytes(consumer: Consumer) -> int:
    items = []
    while True:  # take the queue's content and put it back in order
        try:
            items.append(consumer._results.get_nowait())
        except Exception:
            break
    for item in items:
        consumer._results.put(item)
    return sum(batch.get_total_buffer_size() for _fetch, batch in items if batch is not None)


def _drain(consumer: Consumer, expected: int, timeout: float = 60.0) -> list[pa.RecordBatch]:
    batches: list[pa.RecordBatch] = []
    seen = 0
    deadline = time.monotonic() + timeout
    while seen < expected and time.monotonic() < deadline:
        for batch in consumer.poll_batches(timeout=1.0):
            batches.append(batch)
            seen += batch.num_rows
    assert seen == expected, f"read {seen} records, expected {expected}"
    batches.extend(consumer.poll_batches(timeout=0.3))  # nothing more may come
    return batches


def test_seek_and_close_end_an_open_fetch_at_once(start_broker: Any, sparklog_connect: str) -> None:
    """With the longest max_wait_ms (30 s) the open fetch waits at the log end; a seek back reads
    from the new position without waiting for it (a poll giving up at half that wait gets the
    records), and close() does not wait for it either (it returns before half that wait)."""
    start_broker(1)
    topic = "follow-seek"
    with Admin(sparklog_connect) as admin:
        admin.create_topic(topic, 1)
    with Producer(sparklog_connect) as producer:
        producer.send_batch(topic, {"value": [b"r0", b"r1", b"r2"]}, partition=0)
    consumer = Consumer(topic, zookeeper=sparklog_connect, auto_offset_reset="earliest", max_wait_ms=MAX_WAIT_MS)
    try:
        assert [r.value for r in _poll_until(consumer, 3)] == [b"r0", b"r1", b"r2"]
        assert consumer.poll(timeout=0.3) == []  # the fetch now waits at the log end
        consumer.seek(0, 1)
        again = consumer.poll(timeout=MAX_WAIT_MS / 2000)  # [] if the seek waited for the open fetch
        assert [(r.offset, r.value) for r in again] == [(1, b"r1"), (2, b"r2")]
        assert consumer.poll(timeout=0.3) == []
    except BaseException:
        consumer.close()
        raise
    finishes(consumer.close, MAX_WAIT_MS / 2000, "close() with a fetch open (it must not wait for its max_wait_ms)")
