"""The sparklog sink into typed topics (Avro value schemas): struct values checked against the
schema and written exactly once (batch, streaming, a task that fails mid-write), Avro bytes
decoded, and mismatches refused with the field named and nothing stored."""

from __future__ import annotations

import datetime as dt
import decimal
import json
from collections import Counter
from typing import Any

import pyarrow as pa
import pytest

from spark_helpers import create_topic, read_topic, run_available_now, stream_reader, unique
from sparklog import Admin, Producer
from sparklog.coordination.cluster import ClusterMetadata
from sparklog.datasource import publish, publish_state
from sparklog.datasource.options import DEFAULT_STAGING_TOPIC, parse_write_options
from sparklog.datasource.stager import Stager
from sparklog.schemas import ValueSchema
from sparklog.schemas.registry import SchemaRegistry

pytestmark = pytest.mark.slow

ADDRESS = {
    "type": "record",
    "name": "Address",
    "fields": [{"name": "city", "type": "string"}, {"name": "zip", "type": ["null", "string"], "default": None}],
}
ORDER = {
    "type": "record",
    "name": "Order",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "user", "type": "string"},
        {"name": "ms", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "qty", "type": "int"},
        {"name": "price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}},
        {
            "name": "big",
            "type": ["null", {"type": "bytes", "logicalType": "decimal", "precision": 40, "scale": 3}],
            "default": None,
        },
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {"name": "at", "type": {"type": "int", "logicalType": "time-millis"}},
        {"name": "status", "type": {"type": "enum", "name": "Status", "symbols": ["NEW", "PAID", "SHIPPED"]}},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "attrs", "type": {"type": "map", "values": "long"}},
        {"name": "ship", "type": ["null", ADDRESS], "default": None},
        {"name": "digest", "type": {"type": "fixed", "name": "D4", "size": 4}},
        {"name": "note", "type": ["null", "string"], "default": None},
    ],
}
# Spark's streaming queries refuse the TIME type (UNSUPPORTED_TIME_TYPE), so streams copy orders without it
STREAMED = {**ORDER, "fields": [f for f in ORDER["fields"] if f["name"] != "at"]}
T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def order(i: int, schema: dict[str, Any] = ORDER) -> dict[str, Any]:
    """Order ``i`` as the Producer takes it (and a Consumer returns it), with the fields of ``schema``."""
    names = {f["name"] for f in schema["fields"]}
    full = {
        "id": i,
        "user": f"u{i % 7}",
        "ms": T0 + dt.timedelta(milliseconds=1001 * i),
        "qty": i % 5,
        "price": decimal.Decimal(i) / 4,
        "big": None if i % 3 == 0 else decimal.Decimal(f"{10**33 + i}.{i % 1000:03d}"),
        "day": dt.date(2026, 1, 1) + dt.timedelta(days=i % 40),
        "at": dt.time(i % 24, i % 60, 0, (i % 1000) * 1000),
        "status": ["NEW", "PAID", "SHIPPED"][i % 3],
        "tags": [f"t{j}" for j in range(i % 3)],
        "attrs": [("n", i), ("m", -i)] if i % 2 else [],
        "ship": None if i % 4 == 0 else {"city": f"c{i % 5}", "zip": None if i % 2 else f"z{i}"},
        "digest": i.to_bytes(4, "big"),
        "note": None if i % 5 else f"note {i}",
    }
    return {k: v for k, v in full.items() if k in names}


def _typed_topic(zk: str, partitions: int, schema: dict[str, Any] = ORDER, prefix: str = "typed") -> str:
    name = unique(prefix)
    with Admin(zk) as admin:
        admin.create_topic(name, partitions, 1, value_schema=json.dumps(schema))
    return name


def _fill(zk: str, topic: str, ids: range, partitions: int, schema: dict[str, Any] = ORDER) -> None:
    with Producer(zk, acks="all") as producer:
        for p in range(partitions):
            rows = [i for i in ids if i % partitions == p]
            for start in range(0, len(rows), 40):
                chunk = rows[start : start + 40]
                producer.send_batch(
                    topic,
                    {"key": [f"k{i}".encode() for i in chunk], "value": [order(i, schema) for i in chunk]},
                    partition=p,
                )


def _values(zk: str, topic: str) -> list[dict[str, Any]]:
    """Every value of a typed topic (plain Consumer), sorted by id."""
    return sorted((r["value"] for r in read_topic(zk, topic)), key=lambda v: v["id"])


def _write(df: Any, zk: str, topic: str, **options: Any) -> None:
    writer = df.write.format("sparklog").option("zookeeper", zk).option("topic", topic).mode("append")
    for key, value in options.items():
        writer = writer.option(key, str(value))
    writer.save()


def _spark_values(df: Any) -> list[dict[str, Any]]:
    return sorted((r.value.asDict(recursive=True) for r in df.select("value").collect()), key=lambda v: v["id"])


def _typed_staged_rows(zk: str, target: str) -> int:
    with ClusterMetadata(zk) as meta:
        staging = [t for t in meta.topics() if t.startswith(f"{DEFAULT_STAGING_TOPIC}.{target}.v")]
    return sum(len(read_topic(zk, t)) for t in staging)


# ----------------------------------------------------------------------------------------- batch
def test_batch_write_of_struct_values_reads_back_exactly(spark, spark_cluster):
    zk = spark_cluster.zookeeper
    source = _typed_topic(zk, 2, prefix="orders-src")
    target = _typed_topic(zk, 3, prefix="orders-dst")
    _fill(zk, source, range(150), 2)
    df = spark.read.format("sparklog").option("zookeeper", zk).option("subscribe", source).load()
    _write(df.select("key", "value").repartition(2), zk, target, batchRecords=30)

    expected = [order(i) for i in range(150)]
    assert _values(zk, target) == expected
    assert {bytes(r["key"]) for r in read_topic(zk, target)} == {f"k{i}".encode() for i in range(150)}
    # the sparklog source reads the copy exactly like the original
    back = spark.read.format("sparklog").option("zookeeper", zk).option("subscribe", target).load()
    assert back.schema["value"] == df.schema["value"]
    assert _spark_values(back) == _spark_values(df)
    # staged in the target's own typed staging topic (the plain one is not needed)
    assert _typed_staged_rows(zk, target) == 150


def test_struct_built_in_spark_is_conformed_to_the_schema(spark, spark_cluster):
    """Fields by name in any order, an int for a long, a missing optional field (null) and a
    timestamp of microseconds for milliseconds are converted; Avro bytes are decoded."""
    zk = spark_cluster.zookeeper
    schema = {
        "type": "record",
        "name": "Click",
        "fields": [
            {"name": "user", "type": "string"},
            {"name": "n", "type": "long"},
            {"name": "ms", "type": {"type": "long", "logicalType": "timestamp-millis"}},
            {"name": "zip", "type": ["null", "string"], "default": None},
            {"name": "lang", "type": "string", "default": "en"},
        ],
    }
    target = _typed_topic(zk, 2, schema)
    df = spark.range(50).selectExpr(
        "cast(id as string) as key",
        "named_struct('n', cast(id as int), 'user', concat('u', id), "
        "'ms', timestamp_millis(1767225600000 + id)) as value",
    )
    _write(df, zk, target)
    got = sorted((r["value"] for r in read_topic(zk, target)), key=lambda v: v["n"])
    assert got == [
        {"user": f"u{i}", "n": i, "ms": T0 + dt.timedelta(milliseconds=i), "zip": None, "lang": "en"} for i in range(50)
    ]

    avro = ValueSchema.parse(schema)
    payloads = avro.encode(
        avro.from_pylist([{"user": f"a{i}", "n": 100 + i, "ms": 0, "zip": "z", "lang": "fr"} for i in range(20)])
    ).to_pylist()
    _write(spark.createDataFrame([(p,) for p in payloads], "value binary"), zk, target)
    got = [r["value"] for r in read_topic(zk, target) if r["value"]["n"] >= 100]
    assert sorted(v["user"] for v in got) == sorted(f"a{i}" for i in range(20))
    assert {(v["zip"], v["lang"]) for v in got} == {("z", "fr")}


# ----------------------------------------------------------------------------------------- refused
def test_mismatched_structs_are_refused_naming_the_field_and_store_nothing(spark, spark_cluster):
    zk = spark_cluster.zookeeper
    target = _typed_topic(zk, 2)
    source = _typed_topic(zk, 1, prefix="orders-src")
    _fill(zk, source, range(20), 1)
    good = spark.read.format("sparklog").option("zookeeper", zk).option("subscribe", source).load().select("value")

    # at save(): a missing required field, a field of the wrong type, an unknown field, a string value
    with pytest.raises(Exception, match="missing required field 'user'"):
        _write(good.selectExpr("value.id as id").selectExpr("named_struct('id', id) as value"), zk, target)
    with pytest.raises(Exception, match="field 'qty' must be int32"):
        _write(good.selectExpr("value.*").drop("qty").selectExpr("struct(*, 'x' as qty) as value"), zk, target)
    with pytest.raises(Exception, match="unknown field 'color'"):
        _write(good.selectExpr("value.*").selectExpr("struct(*, 'red' as color) as value"), zk, target)
    with pytest.raises(Exception, match="typed topic"):
        _write(spark.createDataFrame([("a",)], "value string"), zk, target)

    # row by row, in the task: a null required field, an enum symbol the schema does not have
    fields = good.selectExpr("value.*")
    null_user = fields.selectExpr(
        "struct(id, if(id = 13, null, user) as user, ms, qty, price, big, day, at, "
        "status, tags, attrs, ship, digest, note) as value"
    )
    with pytest.raises(Exception, match="field 'user' is null, but it is required"):
        _write(null_user, zk, target)
    bad_symbol = fields.selectExpr(
        "struct(id, user, ms, qty, price, big, day, at, "
        "if(id = 7, 'LOST', status) as status, tags, attrs, ship, digest, note) as value"
    )
    with pytest.raises(Exception, match="field 'status' has 'LOST', not a valid enum symbol"):
        _write(bad_symbol, zk, target)
    with pytest.raises(Exception, match="does not match version 1"):
        _write(spark.createDataFrame([(b"\xc3\x01not avro",)], "value binary"), zk, target)
    assert read_topic(zk, target) == []


def test_struct_values_into_a_plain_topic_are_refused(spark, spark_cluster, tmp_path):
    zk = spark_cluster.zookeeper
    plain = create_topic(zk, 1)
    df = spark.range(3).selectExpr("named_struct('a', id) as value")
    with pytest.raises(Exception, match=f"topic '{plain}' has plain \\(binary\\) values"):
        _write(df, zk, plain)
    source = _typed_topic(zk, 1, STREAMED, prefix="orders-src")
    stream = stream_reader(spark, zk, subscribe=source, startingOffsets="earliest").select("value")
    _fill(zk, source, range(10), 1, STREAMED)
    # Spark builds a Python stream writer in the query's own thread: the query fails as it starts
    with pytest.raises(AssertionError, match="a struct value needs a typed topic"):
        run_available_now(stream, str(tmp_path / "ckpt"), sink="sparklog", zookeeper=zk, topic=plain)
    assert read_topic(zk, plain) == []


# ----------------------------------------------------------------------------------------- streaming
def _copy(spark: Any, zk: str, source: str, target: str, checkpoint: str, **options: Any) -> Any:
    df = stream_reader(spark, zk, subscribe=source, startingOffsets="earliest", maxRecordsPerTrigger=120)
    return run_available_now(
        df.select("key", "value"), checkpoint, sink="sparklog", zookeeper=zk, topic=target, batchRecords=25, **options
    )


def test_streaming_write_is_exactly_once(spark, spark_cluster, tmp_path):
    zk = spark_cluster.zookeeper
    source = _typed_topic(zk, 2, STREAMED, prefix="orders-src")
    target = _typed_topic(zk, 2, STREAMED, prefix="orders-dst")
    _fill(zk, source, range(300), 2, STREAMED)
    query = _copy(spark, zk, source, target, str(tmp_path / "ckpt"))
    assert len([p for p in query.recentProgress if p["numInputRows"]]) == 3  # 120 + 120 + 60
    assert _values(zk, target) == [order(i, STREAMED) for i in range(300)]
    # a restart from the checkpoint copies only what arrived since
    _fill(zk, source, range(300, 340), 2, STREAMED)
    _copy(spark, zk, source, target, str(tmp_path / "ckpt"))
    assert Counter(v["id"] for v in _values(zk, target)) == Counter(range(340))


def test_exactly_once_into_a_typed_topic_when_a_task_fails_mid_write(spark, spark_cluster, tmp_path):
    zk = spark_cluster.zookeeper
    source = _typed_topic(zk, 2, STREAMED, prefix="orders-src")
    target = _typed_topic(zk, 3, STREAMED, prefix="orders-dst")
    _fill(zk, source, range(300), 2, STREAMED)
    marker = tmp_path / "task-failed"
    _copy(spark, zk, source, target, str(tmp_path / "ckpt"), **{"sparklog.test.failTaskOnce": str(marker)})
    assert marker.exists(), "the injected task failure did not happen"
    assert _values(zk, target) == [order(i, STREAMED) for i in range(300)]
    assert _typed_staged_rows(zk, target) > 300  # the failed attempt's slices were staged, never published


# ----------------------------------------------------------------------------------------- publish
def test_typed_slices_publish_as_their_version_after_the_schema_evolves(spark_cluster):
    """Without Spark: rows staged under version 1 are published after the target gained version 2
    (an optional field): the leader evolves them; publishing the batch again stores nothing twice."""
    zk = spark_cluster.zookeeper
    target = _typed_topic(zk, 1, prefix="evolve")
    options = parse_write_options({"zookeeper": zk, "topic": target, "batchRecords": "10"})
    v1 = ValueSchema.parse(ORDER)
    try:
        stager = Stager(options, task_partition=0, attempt=0)
        values = v1.from_pylist([order(i) for i in range(35)])
        stager.add(pa.record_batch({"value": values}))
        message = stager.finish("query-typed", 0)
        assert len(message.slices) == 4 and set(message.versions.values()) == {1}
        staged_in = message.slices[0][5]
        assert staged_in.startswith(f"{DEFAULT_STAGING_TOPIC}.{target}.v1.")

        v2 = {**ORDER, "fields": [*ORDER["fields"], {"name": "coupon", "type": ["null", "string"], "default": None}]}
        with ClusterMetadata(zk) as meta:
            SchemaRegistry.from_cluster(meta).register(target, json.dumps(v2))
        publish.publish_batch(options, "sink-typed", 0, [message], forget=False)
        assert _values(zk, target) == [{**order(i), "coupon": None} for i in range(35)]
        state, _ = publish_state.read_state(publish.connections.cluster_client(zk), "sink-typed")
        assert state["next_seq"] == {target: {f"0/0@{staged_in}": 35}}

        # a driver that died after publishing, before recording it: the intent is published again
        staging, targets = publish_state.intent_from_messages([message])
        intent = publish_state.targets_json(staging, targets, publish_state.versions_from_messages([message]))
        assert intent["targets"][0][2][0][3] == staged_in and intent["versions"] == {staged_in: 1}
        with ClusterMetadata(zk) as meta:
            path = f"{meta.layout.root}/sinks/sink-typed"
            meta.zk.set(
                path, json.dumps({"batch": 0, "state": "publishing", "next_seq": {}, "intent": intent}).encode()
            )
        publish.publish_batch(options, "sink-typed", 0, [], forget=False)
        assert len(read_topic(zk, target)) == 35
    finally:
        publish.connections.close_all()
