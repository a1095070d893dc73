"""The multi-partition consumer fetch (``"type": "fetch_many"``, :mod:`sparklog.protocol.multi_fetch`) against a
real broker: one stream for many partitions of a topic, records only for partitions that have
some, errors of one partition in band without ending the others, ``max_bytes`` per partition."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.flight as flight
import pytest

from broker_helpers import flight_client
from sparklog import Admin, Producer
from sparklog.protocol import wire
from sparklog.protocol.fetch_columns import Restorer
from sparklog.protocol.multi_fetch import MultiFetchRequest


def _open(
    client: flight.FlightClient,
    topic: str,
    positions: dict[int, int],
    max_wait_ms: int = 2000,
    max_bytes: int = 1 << 20,
    **extra: Any,
) -> flight.FlightStreamReader:
    request = MultiFetchRequest(topic, positions, max_bytes, extra.pop("max_response_bytes", 8 << 20), max_wait_ms)
    return client.do_get(flight.Ticket(wire.encode({**request.to_json(), **extra})))


def _next(reader: flight.FlightStreamReader, restore: Any) -> tuple[dict[str, Any], pa.RecordBatch]:
    chunk = reader.read_chunk()
    meta = wire.decode(chunk.app_metadata) if chunk.app_metadata is not None else {}
    return meta, restore(chunk.data, chunk.app_metadata)


def test_one_stream_carries_only_the_partitions_that_get_records(start_broker: Any, sparklog_connect: str) -> None:
    """Five partitions in one fetch; records come for partition 3, later 1, later 3 again: each
    arrives on the same open stream naming its partition, and the idle ones send nothing."""
    broker = start_broker(1)
    topic = "many-idle"
    with Admin(sparklog_connect) as admin:
        admin.create_topic(topic, 5)
    client = flight_client(broker.location)
    restore = Restorer().restore
    received: list[tuple[int, list[int], list[bytes]]] = []
    with Producer(sparklog_connect, linger_ms=0) as producer:
        producer.send_batch(topic, {"value": [b"a0", b"a1"]}, partition=3)
        reader = _open(client, topic, {p: 0 for p in range(5)}, max_wait_ms=1500)
        for more in ((1, [b"b0"]), (3, [b"c0", b"c1", b"c2"]), None):
            meta, batch = _next(reader, restore)
            received.append((meta["p"], batch.column("offset").to_pylist(), batch.column("value").to_pylist()))
            if more is not None:
                producer.send_batch(topic, {"value": more[1]}, partition=more[0])
        started = time.monotonic()
        with pytest.raises(StopIteration):  # idle: the stream ends by itself after max_wait_ms
            reader.read_chunk()
        print(f"the idle stream ended after {time.monotonic() - started:.2f} s")
    client.close()
    assert received == [
        (3, [0, 1], [b"a0", b"a1"]),
        (1, [0], [b"b0"]),
        (3, [2, 3, 4], [b"c0", b"c1", b"c2"]),
    ]


def test_errors_of_one_partition_come_in_band_and_the_others_go_on(start_broker: Any, sparklog_connect: str) -> None:
    """Partition 1 is asked past its log end and partition 7 does not exist: each gets an error
    message naming it; partitions 0 and 2 still get their records, on the same stream."""
    broker = start_broker(1)
    topic = "many-errors"
    with Admin(sparklog_connect) as admin:
        admin.create_topic(topic, 3)
    with Producer(sparklog_connect, linger_ms=0) as producer:
        for p in (0, 2):
            producer.send_batch(topic, {"value": [b"p%d" % p]}, partition=p)
    client = flight_client(broker.location)
    restore = Restorer().restore
    reader = _open(client, topic, {0: 0, 1: 50, 2: 0, 7: 0}, max_wait_ms=300)
    errors: dict[int, str] = {}
    values: dict[int, list[bytes]] = {}
    for chunk in reader:
        meta = wire.decode(chunk.app_metadata)
        if "error" in meta:
            errors[meta["p"]] = meta["error"]
            assert chunk.data.num_rows == 0
        else:
            values.setdefault(meta["p"], []).extend(restore(chunk.data, chunk.app_metadata).column("value").to_pylist())
    client.close()
    assert errors == {1: "OFFSET_OUT_OF_RANGE", 7: "UNKNOWN_TOPIC"}
    assert values == {0: [b"p0"], 2: [b"p2"]}


def test_max_bytes_bounds_each_partition_so_every_partition_takes_its_turn(
    start_broker: Any, sparklog_connect: str
) -> None:
    """Each of 4 partitions holds 5 stored batches of ~10 KB; with max_bytes under one batch, a
    response holds one batch per partition, so the first four messages name four partitions, and
    every record still comes once, in order."""
    broker = start_broker(1)
    topic = "many-bytes"
    with Admin(sparklog_connect) as admin:
        admin.create_topic(topic, 4)
    value = b"v" * 1000
    with Producer(sparklog_connect, linger_ms=0) as producer:
        for p in range(4):
            for b in range(5):
                producer.send_batch(topic, {"value": [value + b"%d-%d" % (b, i) for i in range(10)]}, partition=p)
    client = flight_client(broker.location)
    restore = Restorer().restore
    reader = _open(client, topic, {p: 0 for p in range(4)}, max_wait_ms=300, max_bytes=1000)
    order: list[int] = []
    offsets: dict[int, list[int]] = {p: [] for p in range(4)}
    for chunk in reader:
        meta = wire.decode(chunk.app_metadata)
        batch = restore(chunk.data, chunk.app_metadata)
        assert batch.num_rows == 10, "one stored batch per partition and response"
        order.append(meta["p"])
        offsets[meta["p"]].extend(batch.column("offset").to_pylist())
    client.close()
    assert sorted(order[:4]) == [0, 1, 2, 3]
    assert offsets == {p: list(range(50)) for p in range(4)}


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def test_a_fetch_its_consumer_cancelled_ends_instead_of_spinning_until_max_wait(
    start_broker: Any, sparklog_connect: str
) -> None:
    """Six open fetches (max_wait_ms 10 s) read their partition's records, then their consumer
    cancels them: the broker's streams notice at their next quiet slice and end. (They used to
    look again at once after every give-up, a busy loop holding the GIL until max_wait_ms: a
    consumer that closed slowed the next ones' reads, `bench consume` 15M -> 9M records/s.)"""
    broker = start_broker(1)
    topic = "many-cancelled"
    with Admin(sparklog_connect) as admin:
        admin.create_topic(topic, 6)
    with Producer(sparklog_connect, linger_ms=0) as producer:
        for p in range(6):
            producer.send_batch(topic, {"value": [b"r%d" % p]}, partition=p)
    clients = [flight_client(broker.location) for _ in range(6)]
    restore = Restorer().restore
    for p, client in enumerate(clients):
        reader = _open(client, topic, {p: 0}, max_wait_ms=10_000)
        meta, batch = _next(reader, restore)
        assert (meta["p"], batch.column("value").to_pylist()) == (p, [b"r%d" % p])
        reader.cancel()
    time.sleep(0.5)  # the streams' first quiet slice (0.25 s) is over: they know
    before, started = _cpu_seconds(broker.proc.pid), time.monotonic()
    time.sleep(3.0)
    cpu = (_cpu_seconds(broker.proc.pid) - before) / (time.monotonic() - started)
    for client in clients:
        client.close()
    print(f"the broker after its fetches were cancelled: {cpu:.1%} of a core")
    assert cpu < 0.3, f"the broker used {cpu:.0%} of a core after every fetch was cancelled"


@pytest.mark.slow
def test_a_thousand_partitions_in_one_fetch(start_broker: Any, sparklog_connect: str) -> None:
    """One request lists 1000 partitions; records produced to 10 of them arrive, and nothing else."""
    broker = start_broker(1)
    topic = "many-thousand"
    with Admin(sparklog_connect) as admin:
        admin.create_topic(topic, 1000)
    chosen = list(range(7, 1000, 100))
    client = flight_client(broker.location)
    restore = Restorer().restore
    with Producer(sparklog_connect, linger_ms=0) as producer:
        for p in chosen:
            producer.send_batch(topic, {"value": [b"%d" % p] * 3}, partition=p)
    reader = _open(client, topic, {p: 0 for p in range(1000)}, max_wait_ms=500)
    got: dict[int, list[bytes]] = {}
    for chunk in reader:
        meta = wire.decode(chunk.app_metadata)
        assert "error" not in meta, meta
        got.setdefault(meta["p"], []).extend(restore(chunk.data, chunk.app_metadata).column("value").to_pylist())
    client.close()
    assert got == {p: [b"%d" % p] * 3 for p in chosen}
