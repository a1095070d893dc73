"""Writing DataFrames to sparklog topics: columns and partitioning, and the exactly-once sink under
a task that fails mid-write and a driver killed at each step of the commit."""

from __future__ import annotations

import json
from collections import Counter

import pyarrow as pa
import pytest
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    StringType,
    StructField,
    StructType,
)

from spark_helpers import create_topic, produce, read_topic, run_available_now, stream_reader, unique, values_of
from sparklog import Admin
from sparklog.client.partitioner import partition_for_key
from sparklog.coordination.cluster import ClusterMetadata
from sparklog.datasource.options import DEFAULT_STAGING_TOPIC

pytestmark = pytest.mark.slow


def _sink_state(zookeeper: str, query_id: str) -> dict:
    with ClusterMetadata(zookeeper) as meta:
        data, _ = meta.zk.get(f"{meta.layout.root}/sinks/{query_id}")
    return json.loads(data)


def test_batch_write_columns_partitioning_and_headers(spark, spark_cluster):
    zk = spark_cluster.zookeeper
    topic = create_topic(zk, 3)
    other = create_topic(zk, 2)
    header = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
    schema = StructType(
        [
            StructField("key", StringType()),
            StructField("value", StringType()),
            StructField("partition", IntegerType()),
            StructField("headers", ArrayType(header)),
            StructField("topic", StringType()),
        ]
    )
    rows = []
    for i in range(90):
        key = f"user-{i % 7}" if i % 3 else None
        part = 2 if i % 10 == 0 and i % 15 else None
        headers = [("src", f"h{i}".encode())] if i % 2 else None
        rows.append((key, f"value-{i}", part, headers, other if i % 15 == 0 else topic))
    df = spark.createDataFrame(rows, schema).repartition(2)
    df.write.format("sparklog").option("zookeeper", zk).mode("append").save()  # the topic column decides

    written = read_topic(zk, topic)
    elsewhere = read_topic(zk, other)
    assert len(written) + len(elsewhere) == 90
    assert {r["value"] for r in elsewhere} == {f"value-{i}".encode() for i in range(0, 90, 15)}
    for r in written:
        i = int(r["value"].decode().split("-")[1])
        if i % 10 == 0:
            assert r["partition"] == 2, r
        elif r["key"] is not None:
            assert r["key"] == f"user-{i % 7}".encode()
            assert r["partition"] == partition_for_key(r["key"], 3)
        else:
            assert i % 3 == 0
        assert r["headers"] == ([{"key": "src", "value": f"h{i}".encode()}] if i % 2 else None)
    assert Counter(r["value"] for r in written + elsewhere) == Counter(f"value-{i}".encode() for i in range(90))


def test_bad_write_inputs_fail_naming_the_column(spark, spark_cluster):
    zk = spark_cluster.zookeeper
    df = spark.createDataFrame([("a", 1)], "value string, partition string")
    with pytest.raises(Exception, match="'partition' has type string"):
        df.write.format("sparklog").option("zookeeper", zk).option("topic", "x").mode("append").save()
    with pytest.raises(Exception, match="'value' column"):
        spark.createDataFrame([("a",)], "key string").write.format("sparklog").option("topic", "x").mode(
            "append"
        ).save()
    with pytest.raises(Exception, match="startingOffsets"):
        spark.createDataFrame([("a",)], "value string").write.format("sparklog").option("topic", "x").option(
            "startingOffsets", "earliest"
        ).mode("append").save()
    good = spark.createDataFrame([("a",)], "value string")
    with pytest.raises(Exception, match="topic 'no-such-topic' does not exist"):
        good.write.format("sparklog").option("zookeeper", zk).option("topic", "no-such-topic").mode("append").save()
    typed = unique("typed")
    schema = {"type": "record", "name": "R", "fields": [{"name": "a", "type": "string"}]}
    with Admin(zk) as admin:
        admin.create_topic(typed, 1, 1, value_schema=json.dumps(schema))
    with pytest.raises(Exception, match="typed topic"):
        good.write.format("sparklog").option("zookeeper", zk).option("topic", typed).mode("append").save()


def _source(zk: str, records: int) -> str:
    topic = create_topic(zk, 2, prefix="src")
    produce(zk, topic, 0, records, 2, headers=False)
    return topic


def _copy_query(spark, zk, source, target, checkpoint, **options):
    df = stream_reader(spark, zk, subscribe=source, startingOffsets="earliest", maxRecordsPerTrigger=200)
    df = df.selectExpr("key", "value")
    return run_available_now(df, checkpoint, sink="sparklog", zookeeper=zk, topic=target, batchRecords=25, **options)


def test_exactly_once_when_a_task_fails_mid_write(spark, spark_cluster, tmp_path):
    zk = spark_cluster.zookeeper
    source = _source(zk, 500)
    target = create_topic(zk, 3, prefix="dst")
    marker = tmp_path / "task-failed"
    query = _copy_query(
        spark, zk, source, target, str(tmp_path / "ckpt"), **{"sparklog.test.failTaskOnce": str(marker)}
    )
    assert marker.exists(), "the injected task failure did not happen"
    assert values_of(read_topic(zk, target)) == Counter(f"v{i}".encode() for i in range(500))
    state = _sink_state(zk, str(query.id))
    assert state["state"] == "published" and state["batch"] == 2  # 200 + 200 + 100 rows
    assert sum(int(n) for n in state["next_seq"][target].values()) == 500
    # the failed attempt's staged rows exist but were never published
    staged = sum(r["value"] is not None for r in read_topic(zk, DEFAULT_STAGING_TOPIC))
    assert staged > 500


@pytest.mark.parametrize("point", ["start", "intent", "mid", "published"])
def test_exactly_once_when_the_driver_dies_during_commit(spark, spark_cluster, tmp_path, point):
    """The commit process dies (os._exit) once at ``point`` of the first micro-batch's publish; the
    query fails; restarted from its checkpoint, it re-runs that batch and goes on. Every source
    record is in the target exactly once."""
    zk = spark_cluster.zookeeper
    source = _source(zk, 400)
    target = create_topic(zk, 3, prefix="dst")
    marker = tmp_path / "crashed"
    checkpoint = str(tmp_path / "ckpt")
    options = {"sparklog.test.crashCommit": f"{marker}:{point}"}
    with pytest.raises(AssertionError, match="the query failed"):
        _copy_query(spark, zk, source, target, checkpoint, **options)
    assert marker.exists()
    partial = read_topic(zk, target)
    if point in ("start", "intent"):
        assert partial == []
    elif point == "published":
        assert len(partial) == 200
    else:
        assert 0 < len(partial) < 200

    query = _copy_query(spark, zk, source, target, checkpoint, **options)
    assert values_of(read_topic(zk, target)) == Counter(f"v{i}".encode() for i in range(400))
    state = _sink_state(zk, str(query.id))
    assert state == {**state, "state": "published", "batch": 1}


def test_staged_rows_keep_keys_timestamps_and_order_within_a_partition(spark, spark_cluster, tmp_path):
    zk = spark_cluster.zookeeper
    source = create_topic(zk, 1, prefix="src")
    produce(zk, source, 0, 300, 1)
    target = create_topic(zk, 1, prefix="dst")
    df = stream_reader(spark, zk, subscribe=source, startingOffsets="earliest", includeHeaders="true")
    df = df.select("key", "value", "timestamp", "headers")
    run_available_now(df, str(tmp_path / "ckpt"), sink="sparklog", zookeeper=zk, topic=target, batchRecords=40)
    src, dst = read_topic(zk, source), read_topic(zk, target)
    strip = [{k: r[k] for k in ("key", "value", "timestamp", "headers")} for r in src]
    assert [{k: r[k] for k in ("key", "value", "timestamp", "headers")} for r in dst] == strip
    assert pa.array([r["offset"] for r in dst]).to_pylist() == list(range(300))
