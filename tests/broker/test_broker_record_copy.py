"""The broker's ``copy_records`` action (the sink's publish step without a round trip through a
client): slices of a source partition appended to partitions the same broker leads, under an
idempotent producer id, against a real broker process. A repeated copy stores nothing twice; bad
requests get typed errors and leave every stored record as it was."""

from __future__ import annotations

from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pyarrow as pa
import pytest

from broker_helpers import BrokerProcess, raw_action, read_partition, read_topic, running_broker, typed_error
from sparklog import Admin, Producer
from sparklog.broker.record_copy import read_range
from sparklog.coordination.cluster import ClusterMetadata
from sparklog.errors import InvalidRecord, InvalidRequest, NotLeader, OffsetOutOfRange, UnknownTopic
from sparklog.protocol import wire
from sparklog.records import HEADER_TYPE

SOURCE, TARGET = "staged", "target"


@pytest.fixture(scope="module")
def copy_broker(zookeeper: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, str]]:
    with running_broker(zookeeper.connect_string, tmp_path_factory.mktemp("copy")) as (broker, connect):
        with Admin(connect) as admin:
            admin.create_topic(SOURCE, 1)
            admin.create_topic(TARGET, 2)
        rows = range(50)
        with Producer(zookeeper=connect) as producer:
            for start in (0, 20, 35):  # three stored batches: slices cross their boundaries
                part = rows[start : {0: 20, 20: 35, 35: 50}[start]]
                producer.send_batch(
                    SOURCE,
                    {
                        "key": [f"k{i}".encode() if i % 3 else None for i in part],
                        "value": [f"v{i}".encode() for i in part],
                        "timestamp": pa.array([1_700_000_000_000 + i for i in part], pa.int64()),
                        "headers": pa.array(
                            [[{"key": "n", "value": b"%d" % i}] if i % 2 else None for i in part], HEADER_TYPE
                        ),
                    },
                    partition=0,
                )
        yield broker, connect


def _slice(first: int, last: int, partition: int, producer_id: int, sequence: int) -> dict[str, Any]:
    return {
        "first": first,
        "last": last,
        "topic": TARGET,
        "partition": partition,
        "producer_id": producer_id,
        "sequence": sequence,
    }


def _copy(location: str, *slices: dict[str, Any], source: str = SOURCE) -> list[dict[str, Any]]:
    body = {"topic": source, "partition": 0, "acks": "all", "slices": list(slices)}
    return raw_action(location, wire.COPY_RECORDS, body)["results"]


def _records(rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return [(r["key"], r["value"], r["timestamp"], r["headers"]) for r in rows]


def test_copied_slices_land_once_with_every_column(copy_broker):
    broker, _ = copy_broker
    source = read_partition(broker.location, SOURCE, 0)
    slices = [_slice(5, 24, 0, 71, 0), _slice(25, 44, 1, 72, 0), _slice(45, 49, 0, 71, 20)]
    results = _copy(broker.location, *slices)
    assert results == [
        {"base_offset": 0, "last_offset": 19, "count": 20},
        {"base_offset": 0, "last_offset": 19, "count": 20},
        {"base_offset": 20, "last_offset": 24, "count": 5},
    ]
    target = read_topic(broker.location, TARGET, 2)
    assert _records(target[0]) == _records(source[5:25] + source[45:50])
    assert _records(target[1]) == _records(source[25:45])

    # the same copy again (a publish retried after its answer was lost): recognised, not appended
    assert _copy(broker.location, *slices) == results
    assert read_topic(broker.location, TARGET, 2) == target
    # the next slice of producer 71 goes on from where it stopped
    assert _copy(broker.location, _slice(0, 0, 0, 71, 25)) == [{"base_offset": 25, "last_offset": 25, "count": 1}]
    assert _records(read_partition(broker.location, TARGET, 0)[25:]) == _records(source[:1])


@pytest.mark.parametrize(
    ("body", "error", "message"),
    [
        ({"topic": SOURCE, "partition": 0, "slices": []}, InvalidRequest, "list of 1 to"),
        ({"topic": SOURCE, "slices": [_slice(0, 1, 0, 90, 0)]}, InvalidRequest, "source 'topic' and 'partition'"),
        ({"topic": SOURCE, "partition": 0, "slices": [{"first": 0, "last": 1}]}, InvalidRequest, "needs 'topic'"),
        ({"topic": SOURCE, "partition": 0, "slices": [_slice(3, 1, 0, 90, 0)]}, InvalidRequest, "first <= last"),
        ({"topic": SOURCE, "partition": 0, "slices": [_slice("0", 1, 0, 90, 0)]}, InvalidRequest, "wrong type"),
        ({"topic": SOURCE, "partition": 0, "acks": "0", "slices": [_slice(0, 1, 0, 90, 0)]}, InvalidRequest, "acks"),
        ({"topic": SOURCE, "partition": 0, "slices": [_slice(40, 60, 0, 90, 0)]}, OffsetOutOfRange, "high watermark"),
        ({"topic": "nope", "partition": 0, "slices": [_slice(0, 1, 0, 90, 0)]}, UnknownTopic, "nope"),
        (
            {"topic": SOURCE, "partition": 0, "slices": [{**_slice(0, 1, 0, 90, 0), "topic": "gone"}]},
            UnknownTopic,
            "gone",
        ),
        ({"topic": SOURCE, "partition": 0, "slices": [_slice(0, 1, 5, 90, 0)]}, UnknownTopic, "no partition 5"),
        ({"topic": SOURCE, "partition": 0, "slices": [_slice(0, 1, 1, 72, 40)]}, InvalidRecord, "expected 20"),
    ],
)
def test_bad_copy_requests_get_typed_errors_and_store_nothing(copy_broker, body, error, message):
    broker, _ = copy_broker
    before = {t: read_topic(broker.location, t, n) for t, n in ((SOURCE, 1), (TARGET, 2))}
    got = typed_error(lambda: raw_action(broker.location, wire.COPY_RECORDS, body))
    assert isinstance(got, error) and message in str(got), got
    assert {t: read_topic(broker.location, t, n) for t, n in ((SOURCE, 1), (TARGET, 2))} == before
    assert broker.alive


def test_a_broker_copies_only_between_partitions_it_leads(zookeeper, tmp_path_factory):
    base = tmp_path_factory.mktemp("copy-two")
    with running_broker(zookeeper.connect_string, base, broker_id=1) as (one, connect):
        two = BrokerProcess(2, base / "broker-2", connect, one.processes)
        two.start()
        try:
            with Admin(connect) as admin:
                admin.create_topic("pair", 2)  # one partition on each broker
            with ClusterMetadata(connect) as meta:
                leaders = {p: meta.partition_state("pair", p).leader for p in range(2)}
            assert sorted(leaders.values()) == [1, 2]
            here = {1: one, 2: two}[leaders[0]]
            with Producer(zookeeper=connect) as producer:
                producer.send_batch("pair", {"value": [b"x", b"y"]}, partition=0)
            body = {
                "topic": "pair",
                "partition": 0,
                "slices": [{"first": 0, "last": 1, "topic": "pair", "partition": 1}],
            }
            got = typed_error(lambda: raw_action(here.location, wire.COPY_RECORDS, body))
            assert isinstance(got, NotLeader) and "pair-1" in str(got), got
            assert read_partition({1: one, 2: two}[leaders[1]].location, "pair", 1) == []
        finally:
            two.stop_or_kill()


def test_a_range_ending_in_compacted_offsets_is_refused_not_read_forever() -> None:
    """A compacted source returns, for an offset the cleaner removed, the batch before it (the one
    whose records end below it): reading the range must stop there with OffsetOutOfRange. It used
    to ask for that offset again forever, a broker thread spinning at full CPU after its client
    gave up (the fuzzer's copy_records from fz-compact, seed 7, case 1520)."""
    batch = pa.record_batch({"offset": pa.array(range(10, 15), pa.int64()), "value": pa.array([b"v"] * 5)})

    class Compacted:  # offsets 10..14 stored, 15 and on compacted away
        reads = 0

        def read_stored(self, offset: int, max_bytes: int, upto: int | None = None) -> list[tuple[Any, Any]]:
            Compacted.reads += 1
            assert Compacted.reads < 100, "the range is read forever"
            return [(batch, None)]

    source = SimpleNamespace(log=Compacted(), high_watermark=100, topic=SOURCE, partition=0)
    with pytest.raises(OffsetOutOfRange, match="compacted or deleted"):
        read_range(source, 12, 15, 1 << 20)
    assert read_range(source, 11, 13, 1 << 20).column("value").to_pylist() == [b"v"] * 3
