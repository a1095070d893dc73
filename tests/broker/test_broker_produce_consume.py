"""Integration tests of a real broker process with real clients: several producer processes writing
keyed records at once (``send()`` and ``send_batch()``), read back completely by a Consumer; and
long polling (a record produced during a poll's wait comes back well before the timeout)."""

from __future__ import annotations

import itertools
import sys
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from broker_helpers import HELPER_SCRIPT, raw_fetch, read_jsonl, read_topic
from sparklog import Admin, Consumer, Producer
from sparklog.broker.fetch_handler import MAX_WAIT_MS
from sparklog.client.partitioner import partitions_for_keys
from waiting import finishes, wait_for

PARTITIONS = 6
PRODUCERS = 4
RECORDS_PER_PRODUCER = 1500
KEYS = 23


def consume_all(connect: str, topic: str, expected: int, timeout: float = 60.0) -> list[Any]:
    """Everything in the topic, read from the earliest offsets until ``expected`` records came."""
    records: list[Any] = []
    with Consumer(topic, zookeeper=connect, auto_offset_reset="earliest") as consumer:
        deadline = time.monotonic() + timeout
        while len(records) < expected and time.monotonic() < deadline:
            records.extend(consumer.poll(timeout=1.0))
        records.extend(consumer.poll(timeout=0.5))  # anything beyond what was produced would show up here
    return records


@pytest.mark.slow
def test_concurrent_producer_processes_lose_nothing_duplicate_nothing_keep_key_order(
    start_broker: Any, sparklog_connect: str, child_processes: Any, tmp_path: Path
) -> None:
    broker = start_broker(1)
    topic = "events"
    with Admin(sparklog_connect) as admin:
        admin.create_topic(topic, PARTITIONS)

    go = tmp_path / "go"
    outs, logs, procs = [], [], []
    for i in range(PRODUCERS):
        outs.append(tmp_path / f"producer-{i}.jsonl")
        logs.append(tmp_path / f"producer-{i}.log")
        args = [
            sys.executable,
            str(HELPER_SCRIPT),
            "produce",
            f"--zookeeper={sparklog_connect}",
            f"--topic={topic}",
            f"--partitions={PARTITIONS}",
            f"--producer-id={i}",
            f"--records={RECORDS_PER_PRODUCER}",
            f"--keys={KEYS}",
            "--block=40",
            f"--go={go}",
            f"--out={outs[i]}",
        ]
        procs.append(child_processes.spawn(args, logs[i]))
    wait_for(lambda: all("ready" in log.read_text() for log in logs), 60, "every producer to connect")
    go.touch()  # all producers start sending at the same moment
    for i, proc in enumerate(procs):
        assert proc.wait(120) == 0, f"producer {i} failed:\n{logs[i].read_text()}"

    # what the producers were told: (producer, seq) -> (partition, offset)
    acked: dict[tuple[int, int], tuple[int, int]] = {}
    key_of: dict[tuple[int, int], bytes] = {}
    for out in outs:
        for line in read_jsonl(out):
            ident = (line["producer"], line["seq"])
            assert ident not in acked, f"{ident} acknowledged twice"
            acked[ident] = (line["partition"], line["offset"])
            key_of[ident] = line["key"].encode()
    total = PRODUCERS * RECORDS_PER_PRODUCER
    assert len(acked) == total
    assert len(set(acked.values())) == total, "two records were acknowledged at the same (partition, offset)"

    records = consume_all(sparklog_connect, topic, total)

    # per partition: offsets 0, 1, 2, ... (strictly increasing, contiguous: nothing is compacted)
    by_partition: dict[int, list[Any]] = defaultdict(list)
    for r in records:
        assert r.topic == topic
        by_partition[r.partition].append(r)
    assert set(by_partition) <= set(range(PARTITIONS))
    for p, rs in by_partition.items():
        assert [r.offset for r in rs] == list(range(len(rs))), f"partition {p} offsets not contiguous from 0"

    # every (producer, seq) exactly once, at the partition and offset its producer was told
    seen = Counter()
    where: dict[tuple[int, int], tuple[int, int]] = {}
    for r in records:
        producer, seq = map(int, r.value.decode().split(":"))
        seen[(producer, seq)] += 1
        where[(producer, seq)] = (r.partition, r.offset)
        assert r.key == key_of[(producer, seq)], f"record {producer}:{seq} has key {r.key!r}"
    duplicated = {k: n for k, n in seen.items() if n > 1}
    assert not duplicated, f"duplicated records: {sorted(duplicated)[:10]}"
    missing = set(acked) - set(seen)
    assert not missing, f"{len(missing)} acknowledged records were lost, e.g. {sorted(missing)[:10]}"
    assert set(seen) == set(acked)
    assert where == acked

    # the same key always in the same partition: the one the stable key hash gives
    partitions_of_key: dict[bytes, set[int]] = defaultdict(set)
    for r in records:
        partitions_of_key[r.key].add(r.partition)
    assert len(partitions_of_key) == KEYS
    keys = sorted(partitions_of_key)
    hashed = partitions_for_keys(pa.array(keys, pa.binary()), PARTITIONS).tolist()
    expected_partition = dict(zip(keys, hashed, strict=True))
    for key, parts in partitions_of_key.items():
        assert parts == {expected_partition[key]}, f"key {key!r} went to partitions {parts}"

    # per producer per key: the records in the order they were sent
    sequences: dict[tuple[int, bytes], list[int]] = defaultdict(list)
    for p in sorted(by_partition):
        for r in by_partition[p]:
            producer, seq = map(int, r.value.decode().split(":"))
            sequences[(producer, r.key)].append(seq)
    for (producer, key), seqs in sequences.items():
        assert seqs == sorted(seqs), f"producer {producer} key {key!r}: order not preserved"
        assert seqs == [s for s in range(RECORDS_PER_PRODUCER) if key_of[(producer, s)] == key]

    # the broker's own view (raw fetches) agrees with what the consumer read
    stored = read_topic(broker.location, topic, PARTITIONS)
    for p in range(PARTITIONS):
        assert [(r["offset"], r["value"]) for r in stored[p]] == [(r.offset, r.value) for r in by_partition.get(p, [])]


def _produce_later(connect: str, topic: str, value: bytes, delay: float, result: dict[str, Any]) -> threading.Thread:
    def run() -> None:
        try:
            with Producer(zookeeper=connect, linger_ms=0) as producer:
                time.sleep(delay)
                result["sent_at"] = time.monotonic()
                result["meta"] = producer.send(topic, value, key=b"k").result(10)
        except BaseException as exc:  # surfaced by the test
            result["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_long_poll_returns_a_record_produced_during_the_wait(start_broker: Any, sparklog_connect: str) -> None:
    start_broker(1)
    topic = "longpoll"
    with Admin(sparklog_connect) as admin:
        admin.create_topic(topic, 1)
    with Consumer(topic, zookeeper=sparklog_connect, auto_offset_reset="latest") as consumer:
        assert consumer.poll(timeout=0.2) == []
        result: dict[str, Any] = {}
        thread = _produce_later(sparklog_connect, topic, b"late record", 0.3, result)
        # the poll may wait ten minutes: only the record arriving ends it before the guard
        records = finishes(lambda: consumer.poll(timeout=600), 60, "a poll given a record produced during its wait")
        thread.join(10)
        assert "error" not in result, result.get("error")
        assert [(r.partition, r.offset, r.key, r.value) for r in records] == [(0, 0, b"k", b"late record")]
        assert result["meta"].offset == 0
        assert consumer.position(0) == 1


def test_long_poll_on_the_broker_wakes_up_on_append(start_broker: Any, sparklog_connect: str) -> None:
    """The broker side of long polling: a fetch at the log end with the longest max_wait_ms is
    answered as soon as a record is appended; a consumer whose own max_wait_ms is that long gets it
    the same way. (A fetch answered only at its max wait would carry the record too, so each call
    here gives up at half the max wait: only an append that wakes the fetch gets the record back.)"""
    broker = start_broker(1)
    topic = "longpoll-raw"
    with Admin(sparklog_connect) as admin:
        admin.create_topic(topic, 1)

    # nothing comes: the fetch ends empty after (at least) its wait
    start = time.monotonic()
    assert raw_fetch(broker.location, topic, 0, 0, max_wait_ms=500).num_rows == 0
    assert time.monotonic() - start >= 0.45

    result: dict[str, Any] = {}
    thread = _produce_later(sparklog_connect, topic, b"first", 0.3, result)
    table = finishes(
        lambda: raw_fetch(broker.location, topic, 0, 0, max_wait_ms=MAX_WAIT_MS),
        MAX_WAIT_MS / 2000,  # half the max wait: the append must end the wait, not the clock
        "a fetch at the log end when a record is appended",
    )
    thread.join(10)
    assert "error" not in result, result.get("error")
    assert table.column("value").to_pylist() == [b"first"]
    assert table.column("offset").to_pylist() == [0]

    with Consumer(topic, zookeeper=sparklog_connect, auto_offset_reset="latest", max_wait_ms=MAX_WAIT_MS) as consumer:
        result = {}
        thread = _produce_later(sparklog_connect, topic, b"second", 0.3, result)
        # the poll gives up at half the open fetch's max wait: the record arrives only if the
        # append wakes the fetch
        records = consumer.poll(timeout=MAX_WAIT_MS / 2000)
        thread.join(10)
        assert "error" not in result, result.get("error")
        assert [(r.offset, r.value) for r in records] == [(1, b"second")]


def test_every_send_future_names_where_its_own_record_landed(start_broker: Any, sparklog_connect: str) -> None:
    """One flush mixing keyed, explicitly placed and unkeyed records (the producer splits the group
    by partition: key-hashed rows by index, sticky runs by slicing): each future's partition and
    offset hold exactly its record, and a send_batch spanning runs of several partitions too."""
    broker = start_broker(1)
    topic = "placement"
    with Admin(sparklog_connect) as admin:
        admin.create_topic(topic, 4)
    sent: dict[bytes, Any] = {}
    with Producer(zookeeper=sparklog_connect, linger_ms=60_000, batch_records=7) as producer:
        futures = []
        for i in range(200):
            value = b"v%d" % i
            if i % 3 == 0:
                futures.append((value, producer.send(topic, value, key=b"k%d" % (i % 11))))
            elif i % 3 == 1:
                futures.append((value, producer.send(topic, value, partition=i % 4)))
            else:
                futures.append((value, producer.send(topic, value)))  # sticky, 7 records a run
        producer.flush()
        # 56 unkeyed records: groups of 7 (a full group leaves at once), each a sticky run, two
        # runs per partition
        futures += [(b"s%d" % i, producer.send(topic, b"s%d" % i)) for i in range(56)]
        producer.flush()
        for value, future in futures:
            meta = future.result(30)
            sent[value] = (meta.partition, meta.offset)
        values = [b"b%d" % i for i in range(100)]  # 100 unkeyed rows: sticky runs of 7 over 4 partitions
        metas = producer.send_batch(topic, {"value": values})
    assert sorted(m.partition for m in metas) == [0, 1, 2, 3]
    assert sum(m.last_offset - m.base_offset + 1 for m in metas) == len(values)
    stored = {(p, r["offset"]): r["value"] for p, rows in read_topic(broker.location, topic, 4).items() for r in rows}
    assert {stored.get(where) for where in sent.values()} == set(sent), "a future names another record's place"
    assert {v: where for where, v in stored.items() if v in sent} == sent
    keyed = [v for v, _f in futures[:200:3]]
    expected = partitions_for_keys(pa.array([b"k%d" % (i % 11) for i in range(0, 200, 3)]), 4).tolist()
    assert [sent[v][0] for v in keyed] == expected
    assert sorted(v for v in stored.values() if v.startswith(b"b")) == sorted(values)
    # runs of 7 rows in order, each run on the partition after the previous run's
    run_partition = {}
    for (p, _offset), v in sorted(stored.items()):
        if v.startswith(b"b"):
            run_partition.setdefault(int(v[1:]) // 7, set()).add(p)
    assert all(len(ps) == 1 for ps in run_partition.values())
    firsts = [next(iter(run_partition[r])) for r in range(len(run_partition))]
    assert all((b - a) % 4 == 1 for a, b in itertools.pairwise(firsts))
    for m in metas:  # each partition's runs landed back to back, in order
        got = [stored[(m.partition, o)] for o in range(m.base_offset, m.last_offset + 1)]
        assert got == sorted(got, key=lambda v: int(v[1:]))


def test_send_groups_stay_within_batch_records_while_others_are_in_flight(
    start_broker: Any, sparklog_connect: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Unkeyed records sent faster than the broker acknowledges never pile up into one big group: a
    group leaves as soon as it holds ``batch_records`` records, whatever is in flight (each group's
    values are converted in one allocation, kept small so the allocator reuses warm memory). Every
    record is stored once, in send order per partition, where its future says."""
    broker = start_broker(1)
    topic = "groups"
    partitions = 3
    with Admin(sparklog_connect) as admin:
        admin.create_topic(topic, partitions)
    sizes: list[int] = []
    dispatch = Producer._dispatch_accumulated

    def counted(self: Producer, acc: Any) -> None:
        sizes.append(len(acc.values))
        dispatch(self, acc)

    monkeypatch.setattr(Producer, "_dispatch_accumulated", counted)
    sent = 30_000
    with Producer(zookeeper=sparklog_connect, batch_records=500, linger_ms=50) as producer:
        futures = [producer.send(topic, b"%d" % i) for i in range(sent)]
        producer.flush()
        placed = {(m.partition, m.offset): i for i, m in enumerate(f.result(30) for f in futures)}
    assert sum(sizes) == sent
    assert max(sizes) <= 500, f"a group of {max(sizes)} records left"
    stored = read_topic(broker.location, topic, partitions)
    assert sum(len(rows) for rows in stored.values()) == sent
    for p, rows in stored.items():
        numbers = [int(r["value"]) for r in rows]
        assert numbers == sorted(numbers), f"partition {p} is out of send order"
        assert all(placed[(p, r["offset"])] == int(r["value"]) for r in rows)


def test_async_send_batch_keeps_call_order_per_partition_and_flush_waits_for_it(
    start_broker: Any, sparklog_connect: str
) -> None:
    """Tables sent with send_batch_async, many on their way at once, land in each partition in call
    order, contiguously; flush() returns only once every one is acknowledged."""
    broker = start_broker(1)
    topic = "async-batches"
    with Admin(sparklog_connect) as admin:
        admin.create_topic(topic, 3)
    calls = 30
    with Producer(zookeeper=sparklog_connect, batch_records=50) as producer:
        futures = []
        for call in range(calls):
            values = [b"c%d-%d" % (call, i) for i in range(120)]  # 3 batches of up to 50 rows
            where = call % 2 if call % 3 else np.int64(call % 2)  # numpy integers are partitions too
            futures.append(producer.send_batch_async(topic, {"value": values}, partition=where))
        futures.append(producer.send_batch_async(topic, {"value": [b"spread-%d" % i for i in range(300)]}))
        producer.flush()
        assert all(f.done() for f in futures)
        metas = [f.result() for f in futures]
    stored = read_topic(broker.location, topic, 3)
    for call, (meta,) in enumerate(metas[:calls]):
        assert meta.partition == call % 2 and meta.last_offset - meta.base_offset + 1 == 120
        rows = stored[meta.partition][meta.base_offset : meta.last_offset + 1]
        assert [r["value"] for r in rows] == [b"c%d-%d" % (call, i) for i in range(120)]
    for p in (0, 1):  # each partition: its calls one after the other, in call order
        assert [m[0].base_offset for m in metas[:calls] if m[0].partition == p] == sorted(
            m[0].base_offset for m in metas[:calls] if m[0].partition == p
        )
    assert sorted(m.partition for m in metas[calls]) == [0, 1, 2]
    assert sum(len(rows) for rows in stored.values()) == calls * 120 + 300


def test_a_group_whose_first_records_have_no_key_headers_or_partition_keeps_every_field(
    start_broker: Any, sparklog_connect: str
) -> None:
    """The producer keeps keys, headers and explicit partitions only from the first record that has
    one: the records before it must still get none, and those after it their own."""
    broker = start_broker(1)
    topic = "late-fields"
    with Admin(sparklog_connect) as admin:
        admin.create_topic(topic, 4)
    with Producer(zookeeper=sparklog_connect, linger_ms=60_000) as producer:
        futures = [producer.send(topic, b"plain-%d" % i, partition=0) for i in range(3)]
        futures.append(producer.send(topic, b"keyed", key=b"k", partition=0))
        futures.append(producer.send(topic, b"with-headers", headers={"h": b"1"}, partition=0))
        futures.append(producer.send(topic, b"elsewhere", partition=2, timestamp=1_700_000_000_000))
        futures.append(producer.send(topic, b"hashed", key=b"k2"))
        producer.flush()
        metas = [f.result(30) for f in futures]
    stored = {(p, r["offset"]): r for p, rows in read_topic(broker.location, topic, 4).items() for r in rows}
    got = [stored[(m.partition, m.offset)] for m in metas]
    values = [b"plain-0", b"plain-1", b"plain-2", b"keyed", b"with-headers", b"elsewhere", b"hashed"]
    assert [r["value"] for r in got] == values
    assert [r["key"] for r in got] == [None, None, None, b"k", None, None, b"k2"]
    assert [r["headers"] for r in got] == [None] * 4 + [[{"key": "h", "value": b"1"}]] + [None] * 2
    assert [m.partition for m in metas[:6]] == [0, 0, 0, 0, 0, 2]
    assert metas[6].partition == partitions_for_keys(pa.array([b"k2"]), 4).tolist()[0]
    assert got[5]["timestamp"].timestamp() == 1_700_000_000


def test_a_seek_does_not_wait_for_the_long_poll_in_flight(start_broker: Any, sparklog_connect: str) -> None:
    """After reading to the end, a fetch waits at the broker for new records (here up to 8 s); a
    seek must not leave the next poll waiting for it (it used to: the stale fetch blocked the
    partition until its wait ran out)."""
    start_broker(1)
    with Admin(sparklog_connect) as admin:
        admin.create_topic("rewind", 1)
    with Producer(sparklog_connect) as producer:
        producer.send_batch("rewind", {"value": [b"x%d" % i for i in range(10)]}, partition=0)
    with Consumer("rewind", zookeeper=sparklog_connect, auto_offset_reset="earliest", max_wait_ms=8_000) as consumer:
        seen = 0
        while seen < 10:
            seen += sum(b.num_rows for b in consumer.poll_batches(timeout=5.0))
        assert consumer.poll_batches(timeout=0.5) == []  # the long poll at the end is in flight now
        consumer.seek_to_beginning()
        again = consumer.poll_batches(timeout=4.0)  # the stale fetch still waits for 7 s
        assert [v for b in again for v in b.column("value").to_pylist()] == [b"x%d" % i for i in range(10)]
