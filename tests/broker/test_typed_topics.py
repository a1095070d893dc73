"""Typed topics through real brokers: Avro schemas in ZooKeeper, values stored as Arrow columns,
schema evolution across segments, projection at the broker, and bad input refused."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.ipc as ipc
import pytest

from sparklog import Admin, Consumer, Producer
from sparklog.errors import InvalidRecord, SparklogError, UnknownTopic
from sparklog.local_cluster import LocalCluster
from sparklog.records import schema_version
from sparklog.schemas import ValueSchema, encode_avro

CLICK = {
    "type": "record",
    "name": "Click",
    "fields": [
        {"name": "user", "type": "string"},
        {"name": "page", "type": "string"},
        {"name": "ms", "type": "long"},
        {"name": "score", "type": "double"},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "zip", "type": ["null", "string"], "default": None},
    ],
}
CLICK_V2 = {**CLICK, "fields": [*CLICK["fields"], {"name": "country", "type": ["null", "string"], "default": None}]}


def click(i: int) -> dict:
    return {"user": f"u{i % 7}", "page": f"/p{i}", "ms": i, "score": i / 4, "tags": [f"t{i % 3}"], "zip": None}


@pytest.fixture
def cluster(tmp_path: Path, sparklog_connect: str) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path, brokers=2, zookeeper=sparklog_connect) as running:
        yield running


def consume_all(connect: str, topic: str, expected: int, **options: object) -> list[pa.RecordBatch]:
    out: list[pa.RecordBatch] = []
    deadline = time.monotonic() + 30
    with Consumer(topic, zookeeper=connect, auto_offset_reset="earliest", **options) as consumer:
        while sum(b.num_rows for b in out) < expected and time.monotonic() < deadline:
            out.extend(consumer.poll_batches(timeout=1.0))
    return out


def values_by_offset(batches: list[pa.RecordBatch], values: list[list] | None = None) -> dict[tuple[int, int], object]:
    """(partition, offset) -> value of every record (``values``: per batch, instead of its column)."""
    out = {}
    for i, b in enumerate(batches):
        column = values[i] if values is not None else b.column("value").to_pylist()
        keys = zip(b.column("partition").to_pylist(), b.column("offset").to_pylist(), strict=True)
        out.update(zip(keys, column, strict=True))
    return out


def test_typed_topic_round_trip_dicts_avro_and_arrow(cluster: LocalCluster) -> None:
    with Admin(cluster.zookeeper) as admin:
        admin.create_topic("clicks", 3, 2, value_schema=json.dumps(CLICK))
        schema = admin.schemas("clicks")[-1]
    assert schema.version == 1
    sent: dict[tuple[int, int], dict] = {}
    with Producer(cluster.zookeeper, acks="all") as producer:
        futures = [(i, producer.send("clicks", click(i), key=f"u{i % 7}".encode())) for i in range(100)]
        for i, future in futures:
            meta = future.result(30)
            sent[(meta.partition, meta.offset)] = click(i)
        avro = encode_avro(schema.from_pylist([click(i) for i in range(100, 150)]), schema)
        metas = producer.send_batch("clicks", {"value": avro}, partition=1)  # Avro single-object encoding
        arrow = schema.from_pylist([click(i) for i in range(150, 200)])
        metas += producer.send_batch("clicks", pa.table({"value": arrow}), partition=2)
    for meta, first in zip(metas, (100, 150), strict=True):
        for k in range(meta.last_offset - meta.base_offset + 1):
            sent[(meta.partition, meta.base_offset + k)] = click(first + k)
    got = values_by_offset(consume_all(cluster.zookeeper, "clicks", 200))
    assert got == sent  # every record once, at its acknowledged offset, value unchanged

    projected = consume_all(cluster.zookeeper, "clicks", 200, fields=["user", "ms"])
    assert all(b.schema.field("value").type.names == ["user", "ms"] for b in projected)
    assert values_by_offset(projected) == {k: {"user": v["user"], "ms": v["ms"]} for k, v in sent.items()}

    as_avro = consume_all(cluster.zookeeper, "clicks", 200, value_format="avro")
    decoded = [schema.decode(b.column("value")).to_pylist() for b in as_avro]
    assert values_by_offset(as_avro, decoded) == sent


def test_schema_evolution_serves_old_and_new_records_together(cluster: LocalCluster) -> None:
    with Admin(cluster.zookeeper) as admin:
        admin.create_topic("evolving", 1, 1, value_schema=json.dumps(CLICK))
    with Producer(cluster.zookeeper) as producer:
        producer.send_batch("evolving", {"value": [click(i) for i in range(5)]})
    with Admin(cluster.zookeeper) as admin:
        assert admin.register_schema("evolving", json.dumps(CLICK_V2)).version == 2
    time.sleep(0.5)  # brokers and clients follow the new version by watches
    with Producer(cluster.zookeeper) as producer:
        producer.send_batch("evolving", {"value": [{**click(i), "country": "NO"} for i in range(5, 8)]})
    batches = consume_all(cluster.zookeeper, "evolving", 8)
    values = [v for b in batches for v in b.column("value").to_pylist()]
    assert values == [{**click(i), "country": None} for i in range(5)] + [
        {**click(i), "country": "NO"} for i in range(5, 8)
    ]
    # a segment never mixes schemas: the stored files tell their schema version
    leader_dir = next(p for p in cluster.data_dir.glob("broker-*/evolving-0") if any(p.glob("*.arrows")))
    versions = [schema_version(ipc.open_stream(str(f)).schema) for f in sorted(leader_dir.glob("*.arrows"))]
    assert versions == [1, 2]


def test_bad_schemas_and_bad_records_are_refused_and_store_nothing(cluster: LocalCluster) -> None:
    with Admin(cluster.zookeeper) as admin:
        with pytest.raises(SparklogError, match="union"):
            admin.create_topic("bad", 1, 1, value_schema=json.dumps({**CLICK, "fields": [
                {"name": "x", "type": ["int", "string"]}]}))  # fmt: skip
        with pytest.raises(UnknownTopic):
            admin.cluster.topic("bad")  # nothing created
        with pytest.raises(SparklogError):
            admin.create_topic("bad", 1, 1, value_schema="{not json")
        admin.create_topic("strict", 1, 1, value_schema=json.dumps(CLICK))
        with pytest.raises(SparklogError, match="ms"):
            admin.register_schema("strict", json.dumps({**CLICK, "fields": CLICK["fields"][:2]
                + [{"name": "ms", "type": "string"}] + CLICK["fields"][3:]}))  # fmt: skip
    with Producer(cluster.zookeeper) as producer:
        producer.send("strict", click(1)).result(30)
        with pytest.raises(InvalidRecord, match="page"):
            producer.send("strict", {"user": "u", "ms": 1, "score": 0.5, "tags": []}).result(30)
        with pytest.raises(InvalidRecord, match="ms"):
            producer.send_batch("strict", {"value": [click(2), {**click(3), "ms": "three"}]})
    batches = consume_all(cluster.zookeeper, "strict", 1)
    time.sleep(0.5)
    with Admin(cluster.zookeeper) as admin:
        assert admin.describe_topic("strict")["partitions"][0]["log_end_offset"] == 1
    assert [v for b in batches for v in b.column("value").to_pylist()] == [click(1)]


def test_value_schema_objects_match_what_the_registry_stores(cluster: LocalCluster) -> None:
    with Admin(cluster.zookeeper) as admin:
        admin.create_topic("registry", 1, 1, value_schema=CLICK)
        stored = admin.schemas("registry")
    assert len(stored) == 1 and stored[0].same_as(ValueSchema.parse(CLICK))
