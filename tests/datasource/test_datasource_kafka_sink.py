"""The sink as a drop-in for Spark's Kafka sink (issue 18): the ``topic`` option overrides a
``topic`` column, columns the sink does not write are ignored, keyed rows land on the partition
Kafka's murmur2 gives (topics created before keep FNV-1a; the option ``partitioner`` overrides),
and Kafka's producer settings are accepted with their sparklog meaning or refused with the reason."""

from __future__ import annotations

import json
import logging

import pytest

from spark_helpers import create_topic, read_topic, run_available_now, stream_reader, unique
from sparklog import Producer
from sparklog.client.fnv1a import fnv1a
from sparklog.client.murmur2 import murmur2
from sparklog.coordination.cluster import ClusterMetadata
from sparklog.datasource.options import parse_write_options
from sparklog.errors import InvalidRequest


def _kafka_partition(key: bytes, partitions: int) -> int:
    return (murmur2(key) & 0x7FFFFFFF) % partitions


def _save(df, zk: str, **options: str) -> None:
    writer = df.write.format("sparklog").option("zookeeper", zk).mode("append")
    for key, value in options.items():
        writer = writer.option(key, value)
    writer.save()


# ------------------------------------------------------------------ options, without a cluster
def test_producer_settings_accepted_mapped_or_refused(caplog: pytest.LogCaptureFixture) -> None:
    base = {"topic": "t", "kafka.bootstrap.servers": "127.0.0.1:9092"}
    assert parse_write_options(base).partitioner is None  # each topic's own
    assert parse_write_options({**base, "kafka.acks": "all"}).partitioner is None
    assert parse_write_options({**base, "kafka.acks": "-1", "kafka.enable.idempotence": "true"}).partitioner is None
    assert parse_write_options({**base, "partitioner": "murmur2_random"}).partitioner == "murmur2"
    assert parse_write_options({**base, "partitioner": "fnv1a"}).partitioner == "fnv1a"
    default = "org.apache.kafka.clients.producer.internals.DefaultPartitioner"
    assert parse_write_options({**base, "kafka.partitioner.class": default}).partitioner == "murmur2"
    with caplog.at_level(logging.WARNING, logger="sparklog.datasource"):
        options = parse_write_options(
            {**base, "kafka.compression.type": "lz4", "kafka.linger.ms": "5", "kafka.batch.size": "16384"}
        )
    assert options.partitioner is None
    for setting in ("kafka.compression.type", "kafka.linger.ms", "kafka.batch.size"):
        assert f"'{setting}' has no effect" in caplog.text

    for options, message in [
        ({"kafka.acks": "1"}, "needs acks=all"),
        ({"kafka.acks": "0"}, "needs acks=all"),
        ({"kafka.acks": "most"}, "must be all"),
        ({"kafka.enable.idempotence": "false"}, "idempotent producer"),
        ({"kafka.compression.type": "brotli"}, "must be one of none, gzip"),
        ({"kafka.linger.ms": "-5"}, "non-negative integer"),
        ({"kafka.batch.size": "big"}, "non-negative integer"),
        ({"partitioner": "consistent_random"}, "must be murmur2"),
        ({"kafka.partitioner.class": "org.apache.kafka.clients.producer.RoundRobinPartitioner"}, "ignores keys"),
        ({"kafka.partitioner.class": "com.example.MyPartitioner"}, "Java partitioner"),
        ({"kafka.partitioner.class": default, "partitioner": "fnv1a"}, "contradict"),
        (
            {"kafka.key.serializer": "org.apache.kafka.common.serialization.StringSerializer"},
            "Kafka option 'key.serializer' is not supported as keys are serialized with ByteArraySerializer.",
        ),
        ({"kafka.value.serializer": "x"}, "Kafka option 'value.serializer' is not supported"),
    ]:
        with pytest.raises(InvalidRequest, match=message.replace(".", r"\.")):
            parse_write_options({**base, **options})


# ------------------------------------------------------------------ with Spark and a cluster
@pytest.mark.slow
def test_topic_option_overrides_the_topic_column(spark, spark_cluster):
    """Kafka: the 'topic' option "overrides any topic column that may exist in the data" (of any
    type); without the option the column names each row's topic, and a null one fails."""
    zk = spark_cluster.zookeeper
    target, other, third = create_topic(zk, 2), create_topic(zk, 2), create_topic(zk, 1)
    df = spark.createDataFrame([(f"v{i}", other if i % 2 else third) for i in range(20)], "value string, topic string")
    _save(df, zk, topic=target)
    assert sorted(r["value"] for r in read_topic(zk, target)) == sorted(f"v{i}".encode() for i in range(20))
    assert read_topic(zk, other) == [] and read_topic(zk, third) == []

    typed_column = spark.createDataFrame([("w", 7)], "value string, topic int")  # ignored, not checked
    _save(typed_column, zk, topic=target)
    assert len(read_topic(zk, target)) == 21

    _save(df, zk)  # no option: the column decides
    assert sorted(r["value"] for r in read_topic(zk, other)) == sorted(f"v{i}".encode() for i in range(1, 20, 2))
    assert len(read_topic(zk, third)) == 10
    with pytest.raises(Exception, match="null topic present in the data"):
        _save(spark.createDataFrame([("x", None)], "value string, topic string"), zk)


@pytest.mark.slow
def test_columns_the_sink_does_not_write_are_ignored(spark, spark_cluster):
    """Kafka's sink reads key, value, topic, partition, headers (and timestamp) and ignores every
    other column: a DataFrame read from a topic (offset, timestampType ...) or with columns of
    its own writes as is."""
    zk = spark_cluster.zookeeper
    target = create_topic(zk, 3)
    df = spark.createDataFrame(
        [(f"k{i}", f"v{i}", i, f"note {i}", "x", 1 if i < 3 else None) for i in range(9)],
        "key string, value string, extra int, note string, offset string, partition int",
    )
    _save(df, zk, topic=target)
    written = read_topic(zk, target)
    assert sorted(r["value"] for r in written) == sorted(f"v{i}".encode() for i in range(9))
    for r in written:
        i = int(r["value"][1:])
        assert r["partition"] == (1 if i < 3 else _kafka_partition(f"k{i}".encode(), 3)), r
    with pytest.raises(Exception, match="'key' has type int"):  # columns it does write are still checked
        _save(spark.createDataFrame([(1, "v")], "key int, value string"), zk, topic=target)


def _forget_partitioner(zk: str, topic: str) -> None:
    """Make ``topic`` look like one created before the partitioner config existed."""
    with ClusterMetadata(zk) as meta:
        path = meta.layout.topic(topic)
        data, stat = meta.zk.get(path)
        raw = json.loads(data)
        del raw["configs"]["partitioner"]
        meta.zk.set(path, json.dumps(raw).encode(), version=stat.version)


@pytest.mark.slow
def test_sink_places_keys_like_kafka_and_like_the_producer(spark, spark_cluster, tmp_path):
    """A new topic: every key on the partition Kafka's formula gives (batch and streaming sink), the
    same one our Producer puts it on; a topic created before murmur2 keeps FNV-1a; the option
    'partitioner' overrides the topic's."""
    zk = spark_cluster.zookeeper
    keys = [f"customer-{i}" for i in range(60)]
    rows = [(k, f"v-{k}") for k in keys]
    kafka = {k.encode(): _kafka_partition(k.encode(), 5) for k in keys}
    legacy = {k.encode(): fnv1a(k.encode()) % 5 for k in keys}
    assert kafka != legacy

    new, old, forced = create_topic(zk, 5), create_topic(zk, 5), create_topic(zk, 5)
    _forget_partitioner(zk, old)
    df = spark.createDataFrame(rows, "key string, value string").repartition(3)
    _save(df, zk, topic=new)
    _save(df, zk, topic=old)
    _save(df, zk, topic=forced, partitioner="fnv1a")
    assert {r["key"]: r["partition"] for r in read_topic(zk, new)} == kafka
    assert {r["key"]: r["partition"] for r in read_topic(zk, old)} == legacy
    assert {r["key"]: r["partition"] for r in read_topic(zk, forced)} == legacy

    mirrored = create_topic(zk, 5)
    with Producer(zk, acks="all") as producer:
        for k in keys:
            producer.send(mirrored, b"p", key=k.encode())
    assert {r["key"]: r["partition"] for r in read_topic(zk, mirrored)} == kafka

    source = create_topic(zk, 2, prefix="src")
    with Producer(zk, acks="all") as producer:
        producer.send_batch(source, {"key": [k.encode() for k in keys], "value": [b"s"] * len(keys)})
    streamed = create_topic(zk, 5)
    stream = stream_reader(spark, zk, subscribe=source, startingOffsets="earliest").selectExpr("key", "value")
    run_available_now(stream, str(tmp_path / unique("ckpt")), sink="sparklog", zookeeper=zk, topic=streamed)
    assert {r["key"]: r["partition"] for r in read_topic(zk, streamed)} == kafka


@pytest.mark.slow
def test_producer_settings_on_a_real_write(spark, spark_cluster):
    """Kafka's producer settings pass through save(): harmless ones write, ones that would break
    exactly-once fail before anything is written."""
    zk = spark_cluster.zookeeper
    target = create_topic(zk, 2)
    df = spark.createDataFrame([("a", "1"), ("b", "2")], "key string, value string")
    _save(
        df,
        zk,
        topic=target,
        **{"kafka.acks": "all", "kafka.compression.type": "zstd", "kafka.linger.ms": "10", "kafka.batch.size": "65536"},
    )
    assert len(read_topic(zk, target)) == 2
    with pytest.raises(Exception, match="needs acks=all"):
        _save(df, zk, topic=target, **{"kafka.acks": "1"})
    with pytest.raises(Exception, match="not supported as keys are serialized"):
        _save(df, zk, topic=target, **{"kafka.key.serializer": "x"})
    assert len(read_topic(zk, target)) == 2


@pytest.mark.slow
def test_kafka_integration_guide_sink_examples(spark, spark_cluster, tmp_path):
    """The Python sink examples of Spark's Kafka integration guide ("Writing Data to Kafka"), with
    only format("kafka") changed to format("sparklog") and the bootstrap address filled in (and a
    checkpoint and an AvailableNow trigger, so that each stream ends). Batch writes need
    mode("append"): Spark refuses its default ErrorIfExists for every Python data source (Kafka's
    sink takes it), before sparklog is asked."""
    servers = ",".join(f"127.0.0.1:{b.port}" for b in spark_cluster.brokers.values())
    zk = spark_cluster.zookeeper
    source, topic1 = create_topic(zk, 2, prefix="src"), create_topic(zk, 3)
    with Producer(zk, acks="all") as producer:
        producer.send_batch(source, {"key": [b"k%d" % i for i in range(30)], "value": [b"v%d" % i for i in range(30)]})
    df = (
        spark.readStream.format("sparklog")
        .option("kafka.bootstrap.servers", servers)
        .option("subscribe", source)
        .option("startingOffsets", "earliest")
        .load()
    )

    # Write key-value data from a DataFrame to a specific Kafka topic specified in an option
    ds = (
        df.selectExpr("CAST(key AS STRING)", "CAST(value AS STRING)")
        .writeStream.format("sparklog")
        .option("kafka.bootstrap.servers", servers)
        .option("topic", topic1)
        .option("checkpointLocation", str(tmp_path / "ckpt1"))
        .trigger(availableNow=True)
        .start()
    )
    ds.awaitTermination(180)
    written = read_topic(zk, topic1)
    assert sorted(r["value"] for r in written) == sorted(b"v%d" % i for i in range(30))
    assert all(r["partition"] == _kafka_partition(r["key"], 3) for r in written)

    # Write key-value data from a DataFrame to Kafka using a topic specified in the data
    topic2 = create_topic(zk, 2)
    ds = (
        df.selectExpr(f"'{topic2}' AS topic", "CAST(key AS STRING)", "CAST(value AS STRING)")
        .writeStream.format("sparklog")
        .option("kafka.bootstrap.servers", servers)
        .option("checkpointLocation", str(tmp_path / "ckpt2"))
        .trigger(availableNow=True)
        .start()
    )
    ds.awaitTermination(180)
    assert len(read_topic(zk, topic2)) == 30

    # Batch: write key-value data from a DataFrame to a specific Kafka topic specified in an option
    batch = spark.read.format("sparklog").option("kafka.bootstrap.servers", servers).option("subscribe", source).load()
    topic3 = create_topic(zk, 3)
    guide = batch.selectExpr("CAST(key AS STRING)", "CAST(value AS STRING)").write.format("sparklog")
    with pytest.raises(Exception, match="UNSUPPORTED_DATA_SOURCE_SAVE_MODE"):
        guide.option("kafka.bootstrap.servers", servers).option("topic", topic3).save()
    guide.mode("append").option("kafka.bootstrap.servers", servers).option("topic", topic3).save()
    assert {r["key"]: r["partition"] for r in read_topic(zk, topic3)} == {
        b"k%d" % i: _kafka_partition(b"k%d" % i, 3) for i in range(30)
    }

    # Batch: write key-value data from a DataFrame to Kafka using a topic specified in the data
    topic4 = create_topic(zk, 1)
    batch.selectExpr(f"'{topic4}' AS topic", "CAST(key AS STRING)", "CAST(value AS STRING)").write.format(
        "sparklog"
    ).mode("append").option("kafka.bootstrap.servers", servers).save()
    assert len(read_topic(zk, topic4)) == 30
