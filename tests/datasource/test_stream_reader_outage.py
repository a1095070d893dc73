"""The streaming source while some partitions have no leader: the driver-side reader (Spark's
``latestOffset``/``partitions``/``read``, called here directly, as Spark's driver and executors
would) plans micro-batches over the partitions whose leaders answer and keeps the others at their
position, with a warning, as Kafka's consumers read on; once their broker is back the next
micro-batch takes them from where they stood. Real ZooKeeper and two broker processes; no
SparkSession is needed to call the reader."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable

from broker_helpers import registered_brokers
from sparklog import Admin, Producer
from sparklog.datasource import offsets
from sparklog.datasource.options import parse_read_options
from sparklog.datasource.reader import read_schema
from sparklog.datasource.stream_reader import SparklogStreamReader
from waiting import wait_for

TOPIC = "outage"
PARTITIONS = 4


def _values(reader: SparklogStreamReader, start: dict, end: dict) -> list[bytes]:
    out: list[bytes] = []
    for partition in reader.partitions(start, end):
        for batch in reader.read(partition):
            out += batch.column(batch.schema.get_field_index("value")).to_pylist()
    return out


def test_a_micro_batch_reads_the_partitions_that_have_leaders(
    start_broker: Any, sparklog_connect: str, caplog: pytest.LogCaptureFixture
) -> None:
    start_broker(1)
    second = start_broker(2)
    wait_for(lambda: set(registered_brokers(sparklog_connect)) == {1, 2}, 30, "both brokers to register")
    with Admin(sparklog_connect) as admin:
        admin.create_topic(TOPIC, PARTITIONS, 1)
        leaders = {p["partition"]: p["leader"] for p in admin.describe_topic(TOPIC)["partitions"]}
    down = sorted(p for p, leader in leaders.items() if leader == 2)
    assert down and len(down) < PARTITIONS, leaders
    with Producer(zookeeper=sparklog_connect, acks="all") as producer:
        for p in range(PARTITIONS):
            producer.send_batch(TOPIC, {"value": [f"{p}-{i}".encode() for i in range(3)]}, partition=p)

    options = parse_read_options({"zookeeper": sparklog_connect, "subscribe": TOPIC, "startingOffsets": "earliest"})
    reader = SparklogStreamReader(options, read_schema(options))
    start = reader.initialOffset()
    assert second.stop() == 0

    with caplog.at_level(logging.WARNING, logger="sparklog.datasource"):
        end = reader.latestOffset(start, ReadAllAvailable())
    warned = [r.getMessage() for r in caplog.records if "cannot be read now" in r.getMessage()]
    assert warned and all(f"{TOPIC}-{p}" in warned[0] for p in down), caplog.text
    begin, stop = offsets.from_json(start), offsets.from_json(end)
    assert {tp: stop[tp] - begin[tp] for tp in stop} == {(TOPIC, p): 0 if p in down else 3 for p in range(PARTITIONS)}
    first = _values(reader, start, end)
    assert sorted(first) == sorted(f"{p}-{i}".encode() for p in range(PARTITIONS) if p not in down for i in range(3))

    second.start()
    wait_for(lambda: 2 in registered_brokers(sparklog_connect), 30, "broker 2 to come back")

    def caught_up() -> dict | None:
        latest = reader.latestOffset(end, ReadAllAvailable())
        return latest if all(offsets.from_json(latest)[(TOPIC, p)] == 3 for p in range(PARTITIONS)) else None

    after = wait_for(caught_up, 60, "the partitions of broker 2 to be planned again")
    rest = _values(reader, end, after)
    assert sorted(first + rest) == sorted(f"{p}-{i}".encode() for p in range(PARTITIONS) for i in range(3))
