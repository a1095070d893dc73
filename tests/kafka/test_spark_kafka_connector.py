"""Spark's own Kafka connector (``format("kafka")``, the spark-sql-kafka jars) reading and writing
sparklog topics through the Kafka listener, beside ``format("sparklog")`` on the same topics."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import Producer as KafkaProducer

from spark_helpers import create_topic
from sparklog import Consumer

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def _rows(df: Any) -> list[tuple]:
    return sorted(
        (bytes(r["key"]) if r["key"] is not None else None, bytes(r["value"]), r["partition"], r["offset"])
        for r in df.select("key", "value", "partition", "offset").collect()
    )


def _fill(cluster: Any, topic: str, count: int) -> None:
    producer = KafkaProducer({"bootstrap.servers": cluster.kafka_bootstrap_servers, "linger.ms": 5})
    for i in range(count):
        producer.produce(topic, key=f"k{i}".encode(), value=f"v{i}".encode(), headers=[("n", str(i).encode())])
        if i % 1000 == 0:
            producer.poll(0)
    assert producer.flush(30) == 0


def test_spark_kafka_source_reads_what_format_sparklog_reads(spark: Any, spark_cluster: Any, tmp_path: Any) -> None:
    topic = create_topic(spark_cluster.zookeeper, 3, "kconn")
    _fill(spark_cluster, topic, 5000)
    kafka = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", spark_cluster.kafka_bootstrap_servers)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("includeHeaders", "true")
        .load()
    )
    native = (
        spark.read.format("sparklog").option("zookeeper", spark_cluster.zookeeper).option("subscribe", topic).load()
    )
    assert kafka.count() == 5000
    assert _rows(kafka) == _rows(native)
    for row in kafka.select("value", "headers").collect():  # each record's header as it was produced
        assert [(h["key"], bytes(h["value"])) for h in row["headers"]] == [("n", bytes(row["value"])[1:])]

    # the same as a stream that reads what is there and stops (Trigger.AvailableNow)
    out = str(tmp_path / "out")
    query = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", spark_cluster.kafka_bootstrap_servers)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .load()
        .writeStream.format("parquet")
        .option("path", out)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(300)
    assert query.exception() is None
    assert _rows(spark.read.parquet(out)) == _rows(native)


def test_spark_kafka_sink_writes_what_sparklog_consumers_read(spark: Any, spark_cluster: Any) -> None:
    topic = create_topic(spark_cluster.zookeeper, 2, "ksink")
    df = spark.createDataFrame([(f"k{i}", f"v{i}") for i in range(2000)], ["key", "value"])
    (
        df.write.format("kafka")
        .option("kafka.bootstrap.servers", spark_cluster.kafka_bootstrap_servers)
        .option("topic", topic)
        .save()
    )
    with Consumer(topic, zookeeper=spark_cluster.zookeeper, auto_offset_reset="earliest") as consumer:
        got: list[bytes] = []
        for _ in range(60):
            for batch in consumer.poll_batches(1.0):
                got.extend(batch.column("value").to_pylist())
            if len(got) >= 2000:
                break
    assert sorted(got) == sorted(f"v{i}".encode() for i in range(2000))
