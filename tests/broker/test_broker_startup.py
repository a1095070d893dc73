"""Broker start-up with many partitions and segments (issue 16): a restarted broker serves an
``acks=all`` produce and every record produced before the restart reads back exactly once, in
order; after a ``kill -9`` with many segments, damaged indexes of old segments (which open lazily,
without being read) are rebuilt when first used. (How fast: ``sparklog bench startup``.)"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.flight as flight
import pytest

from broker_helpers import read_partition
from sparklog import Admin
from sparklog.protocol import wire
from sparklog.protocol.record_frames import open_produce, write_frame
from sparklog.records import now_ms, wire_schema
from waiting import wait_for

TOPIC = "many"
VALUE_BYTES = 400
RECORDS_PER_BATCH = 3  # 1.2 KB of values: every batch fills a segment of segment.bytes=1024


def _batch(partition: int, batch: int) -> pa.RecordBatch:
    values = [f"{partition}/{batch}/{i}/".encode().ljust(VALUE_BYTES, b".") for i in range(RECORDS_PER_BATCH)]
    return pa.RecordBatch.from_pydict(
        {
            # stamped now: older records would be due for retention (7 days) while the test reads them
            "timestamp": pa.array([now_ms()] * RECORDS_PER_BATCH, pa.timestamp("ms", tz="UTC")),
            "key": pa.nulls(RECORDS_PER_BATCH, pa.binary()),
            "value": pa.array(values, pa.binary()),
            "headers": pa.nulls(RECORDS_PER_BATCH, wire_schema().field("headers").type),
        },
        schema=wire_schema(),
    )


def _produce(client: flight.FlightClient, partition: int, batches: list[pa.RecordBatch], acks: str) -> list[int]:
    """One do_put stream to the partition's leader; the base offset of each acknowledged batch."""
    command = {"type": wire.PRODUCE, "topic": TOPIC, "partition": partition, "acks": acks}
    writer, reader = open_produce(client, command, wire_schema())
    bases = []
    for batch in batches:
        write_frame(writer, batch)
        ack = reader.read()
        assert ack is not None, f"no ack for {TOPIC}-{partition}"
        bases.append(int(wire.decode(ack)["base_offset"]))
    writer.done_writing()
    writer.close()
    return bases


def _log_ends(client: flight.FlightClient, partitions: int) -> list[int]:
    ends = []
    for p in range(partitions):
        body = {"topic": TOPIC, "partition": p}
        result = list(client.do_action(flight.Action(wire.LIST_OFFSETS, wire.encode(body))))
        ends.append(int(wire.decode(result[0].body)["log_end_offset"]))
    return ends


def _values(rows: list[dict[str, Any]]) -> list[bytes]:
    return [r["value"] for r in rows]


def _expected(partition: int, batches: int) -> list[bytes]:
    return [v for b in range(batches) for v in _batch(partition, b).column(2).to_pylist()]


def _fill(location: str, partitions: int, batches: int) -> None:
    client = flight.FlightClient(location)
    try:
        for p in range(partitions):
            bases = _produce(client, p, [_batch(p, b) for b in range(batches)], acks="1")
            assert bases == [b * RECORDS_PER_BATCH for b in range(batches)]
    finally:
        client.close()


@pytest.mark.slow
def test_a_broker_restarted_with_3000_partitions_serves_and_keeps_every_record(
    start_broker: Any, sparklog_connect: str
) -> None:
    partitions, batches = 3000, 3
    broker = start_broker(1)
    with Admin(sparklog_connect) as admin:
        admin.create_topic(TOPIC, partitions, 1, configs={"segment.bytes": 1024})
    _fill(broker.location, partitions, batches)
    assert broker.stop(timeout=300) == 0  # SIGTERM: a clean shutdown (3000 logs fsynced)
    segments = sum(len(list(d.glob("*.arrows"))) for d in broker.data_dir.glob(f"{TOPIC}-*"))
    assert segments >= partitions * batches

    broker.start()
    client = flight.FlightClient(broker.location)
    try:
        # it serves: an acks=all produce to the first, a middle and the last partition
        for p in (0, partitions // 2, partitions - 1):
            after = _batch(p, batches)
            assert _produce(client, p, [after], acks="all") == [batches * RECORDS_PER_BATCH]
        ends = _log_ends(client, partitions)
    finally:
        client.close()
    produced_after = {0, partitions // 2, partitions - 1}
    assert ends == [(batches + (p in produced_after)) * RECORDS_PER_BATCH for p in range(partitions)]
    # every record, exactly once and in order, in these partitions (all of them would take minutes)
    sampled = sorted({0, 1, partitions // 2, partitions - 1, *random.Random(16).sample(range(partitions), 8)})
    for p in sampled:
        rows = read_partition(broker.location, TOPIC, p)
        assert [r["offset"] for r in rows] == list(range(len(rows)))
        assert _values(rows) == _expected(p, batches + (p in produced_after)), f"{TOPIC}-{p}"


def _index_entries(path: Path) -> list[tuple[int, int]]:
    data = np.fromfile(path, dtype=np.dtype([("key", "<i8"), ("value", "<i8")]))
    return [(int(k), int(v)) for k, v in data]


@pytest.mark.slow
def test_after_kill_9_damaged_indexes_of_old_segments_are_rebuilt_when_first_read(
    start_broker: Any, sparklog_connect: str
) -> None:
    partitions, batches = 20, 24
    broker = start_broker(1)
    with Admin(sparklog_connect) as admin:  # three batches a segment, each indexed but the first
        admin.create_topic(TOPIC, partitions, 1, configs={"segment.bytes": 8192, "index.interval.bytes": 1})
    _fill(broker.location, partitions, batches)
    directory = broker.data_dir / f"{TOPIC}-0"
    assert len(list(directory.glob("*.arrows"))) >= 6
    last_base = int(sorted(directory.glob("*.arrows"))[-1].name.split(".")[0])
    wait_for(  # the background fsync of the rolled segments moved the recovery point to the last one
        lambda: int((directory / "recovery-point").read_text()) == last_base,
        60,
        "the recovery point to reach the active segment",
    )
    broker.kill()  # kill -9: no clean shutdown, no state snapshot written at close

    old = sorted(directory.glob("*.arrows"))[:4]
    originals = {p.name: _index_entries(p) for s in old for p in (s.with_suffix(".index"), s.with_suffix(".timeindex"))}
    assert all(originals.values())
    with open(old[0].with_suffix(".index"), "ab") as f:  # garbage after the entries
        f.write(random.Random(1).randbytes(32))
    old[1].with_suffix(".index").unlink()  # missing
    with open(old[2].with_suffix(".timeindex"), "r+b") as f:  # torn
        f.truncate(old[2].with_suffix(".timeindex").stat().st_size - 9)
    with open(old[3].with_suffix(".index"), "r+b") as f:  # positions that point nowhere
        f.seek(8)
        f.write((10**9).to_bytes(8, "little"))

    broker.restart()
    client = flight.FlightClient(broker.location)
    try:
        for p in (0, partitions - 1):
            assert _produce(client, p, [_batch(p, batches)], acks="all") == [batches * RECORDS_PER_BATCH]
    finally:
        client.close()
    for p in range(partitions):
        rows = read_partition(broker.location, TOPIC, p)
        assert [r["offset"] for r in rows] == list(range(len(rows)))
        assert _values(rows) == _expected(p, batches + (p in (0, partitions - 1))), f"{TOPIC}-{p}"
    # read once, the damaged indexes are whole again: the entries written before the crash
    repaired = {p.name: _index_entries(p) for s in old for p in (s.with_suffix(".index"), s.with_suffix(".timeindex"))}
    assert repaired == originals
