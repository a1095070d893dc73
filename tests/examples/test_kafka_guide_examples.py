"""Spark's Kafka integration guide, run on sparklog (issue 18): each Python example of "Structured
Streaming + Kafka Integration Guide" (reading with subscribe, subscribePattern and assign, offsets as
JSON and by timestamp, rate limits, batch reads with ending offsets, headers; writing with the
``topic`` option and with a ``topic`` column), with ``format("kafka")`` changed to
``format("sparklog")`` and ``kafka.bootstrap.servers`` set to the brokers, and nothing else changed.
The assertions are the rows the guide says each example produces.

Real ZooKeeper, one real broker process, a real SparkSession.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from spark_helpers import T0, batch_rows, produce, read_topic, run_available_now, unique
from sparklog import Admin, Producer

pytestmark = pytest.mark.slow


@pytest.fixture
def servers(spark_cluster: Any) -> str:
    return ",".join(f"127.0.0.1:{broker.port}" for broker in spark_cluster.brokers.values())


def topics(spark_cluster: Any, *partitions: int, prefix: str = "guide") -> list[str]:
    """New topics with these partition counts, each holding 10 records per partition (record i of
    a topic in partition i % n, timestamp T0 + i s, key k<i>, value v<i>)."""
    names = []
    with Admin(spark_cluster.zookeeper) as admin:
        for n in partitions:
            name = unique(prefix)
            admin.create_topic(name, n, 1)
            names.append(name)
    for name, n in zip(names, partitions, strict=True):
        produce(spark_cluster.zookeeper, name, 0, 10 * n, n)
    return names


def strings(rows: list[Any]) -> set[tuple[str | None, str]]:
    return {(r["key"], r["value"]) for r in rows}


def expected(count: int) -> set[tuple[str | None, str]]:
    return {(f"k{i}", f"v{i}") for i in range(count)}


# ------------------------------------------------------------------------------------------ streaming reads
def test_subscribe_to_one_topic(spark: Any, spark_cluster: Any, servers: str, tmp_path: Path) -> None:
    (topic1,) = topics(spark_cluster, 2)
    df = (
        spark.readStream.format("sparklog")
        .option("kafka.bootstrap.servers", servers)
        .option("subscribe", topic1)
        .option("startingOffsets", "earliest")
        .load()
    )
    name = f"guide_{uuid.uuid4().hex[:8]}"
    run_available_now(
        df.selectExpr("CAST(key AS STRING)", "CAST(value AS STRING)"), str(tmp_path / "c"), query_name=name
    )
    assert strings(spark.sql(f"select * from {name}").collect()) == expected(20)


def test_subscribe_with_headers(spark: Any, spark_cluster: Any, servers: str, tmp_path: Path) -> None:
    (topic1,) = topics(spark_cluster, 1)
    df = (
        spark.readStream.format("sparklog")
        .option("kafka.bootstrap.servers", servers)
        .option("subscribe", topic1)
        .option("includeHeaders", "true")
        .option("startingOffsets", "earliest")
        .load()
    )
    name = f"guide_{uuid.uuid4().hex[:8]}"
    selected = df.selectExpr("CAST(key AS STRING)", "CAST(value AS STRING)", "headers")
    run_available_now(selected, str(tmp_path / "c"), query_name=name)
    rows = spark.sql(f"select * from {name}").collect()
    assert strings(rows) == expected(10)
    headers = {
        r["value"]: [(h["key"], bytes(h["value"])) for h in r["headers"]] if r["headers"] else None for r in rows
    }
    assert headers["v1"] == [("n", b"1")] and headers["v3"] is None  # every third record has none


def test_subscribe_to_several_topics_and_to_a_pattern(
    spark: Any, spark_cluster: Any, servers: str, tmp_path: Path
) -> None:
    prefix = f"pattern{uuid.uuid4().hex[:6]}"
    topic1, topic2 = topics(spark_cluster, 1, 2, prefix=prefix)
    for i, subscription in enumerate([("subscribe", f"{topic1},{topic2}"), ("subscribePattern", f"{prefix}.*")]):
        df = (
            spark.readStream.format("sparklog")
            .option("kafka.bootstrap.servers", servers)
            .option(*subscription)
            .option("startingOffsets", "earliest")
            .load()
        )
        name = f"guide_{uuid.uuid4().hex[:8]}"
        run_available_now(df.selectExpr("topic", "CAST(value AS STRING)"), str(tmp_path / f"c{i}"), query_name=name)
        rows = spark.sql(f"select * from {name}").collect()
        assert sorted((r["topic"], r["value"]) for r in rows) == sorted(
            [(topic1, f"v{i}") for i in range(10)] + [(topic2, f"v{i}") for i in range(20)]
        )


def test_assign_with_json_offsets_and_a_rate_limit(
    spark: Any, spark_cluster: Any, servers: str, tmp_path: Path
) -> None:
    topic1, topic2 = topics(spark_cluster, 3, 1)
    df = (
        spark.readStream.format("sparklog")
        .option("kafka.bootstrap.servers", servers)
        .option("assign", json.dumps({topic1: [0, 1], topic2: [0]}))
        .option("startingOffsets", json.dumps({topic1: {"0": 4, "1": -2}, topic2: {"0": -2}}))
        .option("maxOffsetsPerTrigger", "7")
        .load()
    )
    name = f"guide_{uuid.uuid4().hex[:8]}"
    query = run_available_now(df.selectExpr("topic", "partition", "offset"), str(tmp_path / "c"), query_name=name)
    rows = {(r["topic"], r["partition"], r["offset"]) for r in spark.sql(f"select * from {name}").collect()}
    assert rows == (
        {(topic1, 0, o) for o in range(4, 10)}
        | {(topic1, 1, o) for o in range(10)}
        | {(topic2, 0, o) for o in range(10)}
    )
    assert max(batch_rows(query)) <= 7 and sum(batch_rows(query)) == 26


def test_starting_offsets_by_timestamp(spark: Any, spark_cluster: Any, servers: str, tmp_path: Path) -> None:
    (topic1,) = topics(spark_cluster, 2)
    # record i has timestamp T0 + i s and sits in partition i % 2 at offset i // 2
    df = (
        spark.readStream.format("sparklog")
        .option("kafka.bootstrap.servers", servers)
        .option("subscribe", topic1)
        .option("startingOffsetsByTimestamp", json.dumps({topic1: {"0": T0 + 10_000, "1": T0 + 15_000}}))
        .load()
    )
    name = f"guide_{uuid.uuid4().hex[:8]}"
    run_available_now(df.selectExpr("CAST(value AS STRING)"), str(tmp_path / "c"), query_name=name)
    values = {r["value"] for r in spark.sql(f"select * from {name}").collect()}
    assert values == {f"v{i}" for i in range(20) if (i % 2 == 0 and i >= 10) or (i % 2 == 1 and i >= 15)}


# ------------------------------------------------------------------------------------------ batch reads
def test_batch_reads_with_default_explicit_and_pattern_offsets(spark: Any, spark_cluster: Any, servers: str) -> None:
    prefix = f"batch{uuid.uuid4().hex[:6]}"
    topic1, topic2 = topics(spark_cluster, 2, 1, prefix=prefix)

    # Subscribe to 1 topic; defaults to the earliest and latest offsets
    df = spark.read.format("sparklog").option("kafka.bootstrap.servers", servers).option("subscribe", topic1).load()
    assert strings(df.selectExpr("CAST(key AS STRING)", "CAST(value AS STRING)").collect()) == expected(20)

    # Subscribe to multiple topics, specifying explicit Kafka offsets
    df = (
        spark.read.format("sparklog")
        .option("kafka.bootstrap.servers", servers)
        .option("subscribe", f"{topic1},{topic2}")
        .option("startingOffsets", json.dumps({topic1: {"0": 3, "1": -2}, topic2: {"0": -2}}))
        .option("endingOffsets", json.dumps({topic1: {"0": 8, "1": -1}, topic2: {"0": -1}}))
        .load()
    )
    rows = {(r["topic"], r["partition"], r["offset"]) for r in df.select("topic", "partition", "offset").collect()}
    assert rows == {(topic1, 0, o) for o in range(3, 8)} | {(topic1, 1, o) for o in range(10)} | {
        (topic2, 0, o) for o in range(10)
    }

    # Subscribe to a pattern, at the earliest and latest offsets
    df = (
        spark.read.format("sparklog")
        .option("kafka.bootstrap.servers", servers)
        .option("subscribePattern", f"{prefix}.*")
        .option("startingOffsets", "earliest")
        .option("endingOffsets", "latest")
        .load()
    )
    assert df.count() == 30


def test_the_read_schema_is_the_connectors(spark: Any, spark_cluster: Any, servers: str) -> None:
    (topic1,) = topics(spark_cluster, 1)
    df = spark.read.format("sparklog").option("kafka.bootstrap.servers", servers).option("subscribe", topic1).load()
    assert [(f.name, f.dataType.simpleString()) for f in df.schema.fields] == [
        ("key", "binary"),
        ("value", "binary"),
        ("topic", "string"),
        ("partition", "int"),
        ("offset", "bigint"),
        ("timestamp", "timestamp"),
        ("timestampType", "int"),
    ]
    assert {r["timestampType"] for r in df.collect()} == {0}  # CreateTime


# ------------------------------------------------------------------------------------------ writes
def test_writes_with_the_topic_option_and_with_a_topic_column(
    spark: Any, spark_cluster: Any, servers: str, tmp_path: Path
) -> None:
    (source,) = topics(spark_cluster, 2)
    with Admin(spark_cluster.zookeeper) as admin:
        targets = [unique("guide-out") for _ in range(4)]
        for t in targets:
            admin.create_topic(t, 3, 1)
    zk = spark_cluster.zookeeper
    df = spark.read.format("sparklog").option("kafka.bootstrap.servers", servers).option("subscribe", source).load()

    # batch: the topic in an option
    (
        df.selectExpr("CAST(key AS STRING)", "CAST(value AS STRING)")
        .write.format("sparklog")
        .mode("append")  # Spark refuses its default (ErrorIfExists) for every Python data source
        .option("kafka.bootstrap.servers", servers)
        .option("topic", targets[0])
        .save()
    )
    # batch: the topic in the data
    (
        df.selectExpr(f"'{targets[1]}' AS topic", "CAST(key AS STRING)", "CAST(value AS STRING)")
        .write.format("sparklog")
        .mode("append")  # Spark refuses its default (ErrorIfExists) for every Python data source
        .option("kafka.bootstrap.servers", servers)
        .save()
    )
    # streaming: the topic in an option, then in the data
    stream = (
        spark.readStream.format("sparklog")
        .option("kafka.bootstrap.servers", servers)
        .option("subscribe", source)
        .option("startingOffsets", "earliest")
        .load()
    )
    for i, (selected, options) in enumerate(
        [
            (stream.selectExpr("CAST(key AS STRING)", "CAST(value AS STRING)"), {"topic": targets[2]}),
            (stream.selectExpr(f"'{targets[3]}' AS topic", "CAST(key AS STRING)", "CAST(value AS STRING)"), {}),
        ]
    ):
        writer = (
            selected.writeStream.format("sparklog")
            .option("kafka.bootstrap.servers", servers)
            .option("checkpointLocation", str(tmp_path / f"w{i}"))
            .trigger(availableNow=True)
        )
        for key, value in options.items():
            writer = writer.option(key, value)
        query = writer.start()
        query.awaitTermination(240)
        assert query.exception() is None

    for target in targets:
        rows = read_topic(zk, target)
        assert {(bytes(r["key"]).decode(), bytes(r["value"]).decode()) for r in rows} == expected(20), target


def test_a_key_written_by_spark_lands_where_kafkas_partitioner_puts_it(
    spark: Any, spark_cluster: Any, servers: str
) -> None:
    """The sink's default placement is murmur2 like Kafka's, so a Kafka producer and the sink agree."""
    with Admin(spark_cluster.zookeeper) as admin:
        target = unique("guide-keys")
        admin.create_topic(target, 5, 1)
    keys = [f"user-{i}" for i in range(50)]
    (
        spark.createDataFrame([(k, f"v-{k}") for k in keys], "key string, value string")
        .write.format("sparklog")
        .mode("append")  # Spark refuses its default (ErrorIfExists) for every Python data source
        .option("kafka.bootstrap.servers", servers)
        .option("topic", target)
        .save()
    )
    placed = {bytes(r["key"]).decode(): r["partition"] for r in read_topic(spark_cluster.zookeeper, target)}
    assert placed == {k: kafka_partition(k.encode(), 5) for k in keys}
    with Producer(spark_cluster.zookeeper) as producer:  # our producer agrees with the sink
        futures = {k: producer.send(target, b"again", key=k.encode()) for k in keys[:10]}
        assert {k: f.result(30).partition for k, f in futures.items()} == {k: placed[k] for k in keys[:10]}


def kafka_partition(key: bytes, partitions: int) -> int:
    """Kafka's ``BuiltInPartitioner.partitionForKey``: ``toPositive(murmur2(key)) % partitions``."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions


def murmur2(key: bytes) -> int:
    """``org.apache.kafka.common.utils.Utils.murmur2``, transcribed record by record (Java's 32-bit
    ints, unsigned shifts, the tail's fall-through switch); the signed result."""
    m, r = 0x5BD1E995, 24
    length = len(key)
    h = (0x9747B28C ^ length) & 0xFFFFFFFF
    for i in range(length // 4):
        k = int.from_bytes(key[4 * i : 4 * i + 4], "little")
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> r
        k = (k * m) & 0xFFFFFFFF
        h = (h * m) & 0xFFFFFFFF
        h ^= k
    tail, base = length % 4, length - length % 4
    if tail == 3:
        h ^= key[base + 2] << 16
    if tail >= 2:
        h ^= key[base + 1] << 8
    if tail >= 1:
        h ^= key[base]
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return h - (1 << 32) if h >= 1 << 31 else h


@pytest.mark.parametrize(
    ("key", "value"),
    [  # Kafka's UtilsTest.testMurmur2
        (b"21", -973932308),
        (b"foobar", -790332482),
        (b"a-little-bit-long-string", -985981536),
        (b"a-little-bit-longer-string", -1486304829),
        (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
        (b"abc", 479470107),
    ],
)
def test_the_reference_murmur2_matches_kafkas_published_values(key: bytes, value: int) -> None:
    assert murmur2(key) == value
