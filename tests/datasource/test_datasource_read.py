"""Reading sparklog topics with Spark: streaming (availableNow, restarts, admission control, group
offsets, pattern subscriptions, data loss) and batch (offsets and timestamps)."""

from __future__ import annotations

import datetime as dt
import json
from collections import Counter

import pytest

from spark_helpers import (
    T0,
    batch_rows,
    collect_available_now,
    committed,
    create_topic,
    high_watermarks,
    produce,
    run_available_now,
    stream_reader,
    unique,
)
from waiting import wait_for

pytestmark = pytest.mark.slow


def _expected(i: int, topic: str, partitions: int) -> tuple:
    return (f"k{i}".encode(), f"v{i}".encode(), topic, i % partitions)


def _check_rows(rows: list, topic: str, partitions: int, indices: range, headers: bool) -> None:
    assert len(rows) == len(indices)
    by_value = {bytes(r["value"]): r for r in rows}
    assert len(by_value) == len(rows), "a record was read twice"
    for i in indices:
        r = by_value[f"v{i}".encode()]
        assert (bytes(r["key"]), bytes(r["value"]), r["topic"], r["partition"]) == _expected(i, topic, partitions)
        assert r["timestamp"] == dt.datetime.fromtimestamp((T0 + i * 1000) / 1000, dt.UTC).replace(tzinfo=None)
        if headers:
            want = None if i % 3 == 0 else [(("n", str(i).encode()))]
            got = None if r["headers"] is None else [(h["key"], bytes(h["value"])) for h in r["headers"]]
            assert got == want
    # offsets: per partition, every offset once, 0.. contiguous for what this read covers, and in
    # offset order in the order Spark returned them
    for p in range(partitions):
        offs = [r["offset"] for r in rows if r["partition"] == p]
        assert offs == sorted(offs)
        assert offs == list(range(offs[0], offs[0] + len(offs))) if offs else True


def test_stream_available_now_then_restart_reads_only_new_records(spark, spark_cluster, tmp_path):
    zk = spark_cluster.zookeeper
    topic = create_topic(zk, 3)
    produce(zk, topic, 0, 600, 3)
    checkpoint = str(tmp_path / "ckpt")

    df = stream_reader(spark, zk, subscribe=topic, startingOffsets="earliest", includeHeaders="true")
    _, batches = collect_available_now(df, checkpoint)
    _check_rows([r for rows in batches.values() for r in rows], topic, 3, range(600), headers=True)

    produce(zk, topic, 600, 150, 3)
    df = stream_reader(spark, zk, subscribe=topic, startingOffsets="earliest", includeHeaders="true")
    _, batches = collect_available_now(df, checkpoint)
    _check_rows([r for rows in batches.values() for r in rows], topic, 3, range(600, 750), headers=True)


def test_max_records_per_trigger_and_group_offsets(spark, spark_cluster, tmp_path):
    zk = spark_cluster.zookeeper
    topic = create_topic(zk, 3)
    group = unique("g")
    produce(zk, topic, 0, 500, 3, headers=False)

    df = stream_reader(spark, zk, subscribe=topic, startingOffsets="earliest", maxRecordsPerTrigger=120, group=group)
    query = run_available_now(df, str(tmp_path / "ckpt"), query_name="limited")
    sizes = batch_rows(query)
    assert sum(sizes) == 500
    assert all(n <= 120 for n in sizes), sizes
    assert len(sizes) == 5  # 120 * 4 + 20
    assert spark.sql("select count(distinct value) from limited").collect()[0][0] == 500
    # the last batch of the availableNow run is committed too, before the query ends
    ends = high_watermarks(zk, topic)
    assert committed(zk, group) == ends
    last = json.loads(query.lastProgress["sources"][0]["endOffset"])
    assert {(topic, int(p)): o for p, o in last[topic].items()} == ends

    # a new query (new checkpoint) resumes from the group's offsets
    produce(zk, topic, 500, 90, 3, headers=False)
    df = stream_reader(spark, zk, subscribe=topic, startingOffsets="group", group=group)
    run_available_now(df, str(tmp_path / "ckpt2"), query_name="resumed")
    values = sorted(bytes(r[0]) for r in spark.sql("select value from resumed").collect())
    assert values == sorted(f"v{i}".encode() for i in range(500, 590))
    assert committed(zk, group) == high_watermarks(zk, topic)


def test_subscribe_pattern_picks_up_new_topics(spark, spark_cluster, tmp_path):
    zk = spark_cluster.zookeeper
    prefix = unique("pat")
    first = create_topic(zk, 2, prefix=prefix)
    produce(zk, first, 0, 40, 2, headers=False)
    checkpoint = str(tmp_path / "ckpt")
    df = stream_reader(spark, zk, subscribePattern=f"{prefix}-.*", startingOffsets="earliest")
    _, batches = collect_available_now(df, checkpoint)
    assert sum(len(rows) for rows in batches.values()) == 40

    second = create_topic(zk, 1, prefix=prefix)
    produce(zk, second, 0, 25, 1, headers=False)
    produce(zk, first, 40, 10, 2, headers=False)
    df = stream_reader(spark, zk, subscribePattern=f"{prefix}-.*", startingOffsets="earliest")
    _, batches = collect_available_now(df, checkpoint)
    got = Counter(r["topic"] for rows in batches.values() for r in rows)
    assert got == {first: 10, second: 25}


def test_batch_read_offsets_json_timestamps_and_min_partitions(spark, spark_cluster):
    zk = spark_cluster.zookeeper
    topic = create_topic(zk, 2)
    produce(zk, topic, 0, 200, 2)  # partition p holds records p, p+2, ...; offset = i // 2

    def reader():  # a DataFrameReader keeps the options set on it: a fresh one per read
        return spark.read.format("sparklog").option("zookeeper", zk).option("subscribe", topic)

    df = reader().option("includeHeaders", "true").load()
    rows = [r.asDict() for r in df.collect()]
    _check_rows(rows, topic, 2, range(200), headers=True)

    starting = json.dumps({topic: {"0": 10, "1": -2}})
    ending = json.dumps({topic: {"0": 20, "1": 5}})
    df = reader().option("startingOffsets", starting).option("endingOffsets", ending).load()
    got = sorted((r["partition"], r["offset"]) for r in df.collect())
    assert got == [(0, o) for o in range(10, 20)] + [(1, o) for o in range(0, 5)]

    # by timestamp: record i has timestamp T0 + i s; [start, end) in time
    start_ts = dt.datetime.fromtimestamp((T0 + 50_000) / 1000, dt.UTC).isoformat()
    df = (
        spark.read.format("sparklog")
        .option("zookeeper", zk)
        .option("topic", topic)
        .option("startingTimestamp", start_ts)
        .option("endingTimestamp", str(T0 + 120_000))
        .load()
    )
    values = sorted(int(bytes(r["value"])[1:]) for r in df.collect())
    assert values == list(range(50, 120))

    split = reader().option("minPartitions", "6").load()
    assert split.rdd.getNumPartitions() >= 6
    assert split.count() == 200
    assert split.select("offset", "partition").distinct().count() == 200

    # maxPartitions: the 8 ranges of maxRecordsPerPartition=30 read by 3 tasks; every record
    # once, each range in offset order
    packed = reader().option("maxRecordsPerPartition", "30").option("maxPartitions", "3")
    packed = packed.option("includeHeaders", "true").load()
    assert packed.rdd.getNumPartitions() == 3
    _check_rows([r.asDict() for r in packed.collect()], topic, 2, range(200), headers=True)


def test_fail_on_data_loss(spark, spark_cluster):
    zk = spark_cluster.zookeeper
    configs = {"segment.bytes": "2048", "retention.bytes": "4096"}
    topic = create_topic(zk, 1, configs=configs)
    produce(zk, topic, 0, 400, 1, headers=False)
    from sparklog.client.cluster_client import ClusterClient

    client = ClusterClient(zk)
    try:
        # retention runs every few seconds
        wait_for(
            lambda: client.list_offsets(topic, 0)["log_start_offset"] > 0, 60, "retention to delete a segment", 0.5
        )
        log_start = client.list_offsets(topic, 0)["log_start_offset"]
    finally:
        client.close()

    starting = json.dumps({topic: {"0": 0}})

    def reader():
        return spark.read.format("sparklog").option("zookeeper", zk).option("subscribe", topic)

    with pytest.raises(Exception, match="deleted") as info:
        reader().option("startingOffsets", starting).load().count()
    assert "failOnDataLoss" in str(info.value)
    df = reader().option("startingOffsets", starting).option("failOnDataLoss", "false").load()
    offsets = sorted(r[0] for r in df.select("offset").collect())
    assert offsets[0] >= log_start and offsets[-1] == 399
    assert offsets == list(range(offsets[0], 400))


CLICK = {
    "type": "record",
    "name": "Click",
    "fields": [
        {"name": "user", "type": "string"},
        {"name": "ms", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "score", "type": "double"},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "zip", "type": ["null", "string"], "default": None},
    ],
}


def test_typed_topic_values_are_structs_and_fields_are_projected(spark, spark_cluster, tmp_path):
    from sparklog import Admin, Producer

    zk = spark_cluster.zookeeper
    topic = unique("typed")
    with Admin(zk) as admin:
        admin.create_topic(topic, 2, 1, value_schema=json.dumps(CLICK))
    clicks = [
        {"user": f"u{i}", "ms": T0 + i, "score": i / 4, "tags": [f"t{i % 3}"], "zip": None if i % 2 else f"z{i}"}
        for i in range(60)
    ]
    with Producer(zk) as producer:
        producer.send_batch(topic, {"value": clicks[:30]}, partition=0)
        producer.send_batch(topic, {"value": clicks[30:]}, partition=1)

    df = spark.read.format("sparklog").option("zookeeper", zk).option("subscribe", topic).load()
    assert df.schema["value"].dataType.simpleString() == (
        "struct<user:string,ms:timestamp,score:double,tags:array<string>,zip:string>"
    )
    rows = sorted(df.select("value.*").collect(), key=lambda r: r["score"])
    assert [r.asDict() for r in rows] == [
        {**c, "ms": dt.datetime.fromtimestamp(c["ms"] / 1000, dt.UTC).replace(tzinfo=None)} for c in clicks
    ]

    projected = (
        spark.read.format("sparklog").option("zookeeper", zk).option("subscribe", topic).option("fields", "user,zip")
    ).load()
    assert projected.schema["value"].dataType.simpleString() == "struct<user:string,zip:string>"
    got = sorted((r["user"], r["zip"]) for r in projected.select("value.*").collect())
    assert got == sorted((c["user"], c["zip"]) for c in clicks)

    stream = stream_reader(spark, zk, subscribe=topic, startingOffsets="earliest", fields="score")
    _, batches = collect_available_now(stream, str(tmp_path / "ckpt"))
    assert sorted(r["value"]["score"] for rows in batches.values() for r in rows) == [i / 4 for i in range(60)]

    with pytest.raises(Exception, match="'fields'.*unknown field 'nope'"):
        spark.read.format("sparklog").option("zookeeper", zk).option("subscribe", topic).option("fields", "nope").load()
    plain = create_topic(zk, 1)
    with pytest.raises(Exception, match="'fields'.*plain"):
        spark.read.format("sparklog").option("zookeeper", zk).option("subscribe", plain).option("fields", "a").load()


def test_compaction_gaps_are_not_data_loss(spark, spark_cluster, tmp_path):
    from spark_helpers import read_topic
    from sparklog import Producer

    zk = spark_cluster.zookeeper
    topic = create_topic(zk, 1, configs={"cleanup.policy": "compact", "segment.bytes": "2048"})
    with Producer(zk, acks="all") as producer:
        for start in range(0, 400, 20):
            rows = range(start, start + 20)
            producer.send_batch(
                topic, {"key": [f"k{i % 10}".encode() for i in rows], "value": [b"v%d" % i for i in rows]}
            )

    def compacted() -> list | None:
        rows = read_topic(zk, topic)
        return rows if len(rows) != 400 else None

    survivors = wait_for(compacted, 60, "compaction to run", 0.5)  # the cleaner runs every few seconds
    before = [(r["offset"], r["value"]) for r in survivors]
    assert before[0][0] > 0 or before[-1][0] - before[0][0] + 1 > len(before)  # there are gaps

    df = (
        spark.read.format("sparklog")
        .option("zookeeper", zk)
        .option("subscribe", topic)
        .option("startingOffsets", json.dumps({topic: {"0": 0}}))
        .load()
    )
    batch_read = sorted((r["offset"], bytes(r["value"])) for r in df.collect())
    stream = stream_reader(spark, zk, subscribe=topic, startingOffsets="earliest", maxRecordsPerTrigger=50)
    _, batches = collect_available_now(stream, str(tmp_path / "ckpt"))
    stream_read = sorted((r["offset"], bytes(r["value"])) for rows in batches.values() for r in rows)
    after = [(r["offset"], r["value"]) for r in read_topic(zk, topic)]
    # The cleaner may run again while Spark reads; it only ever removes records, so each read holds every
    # record still there afterwards and nothing that was already gone before, each exactly once.
    for got in (batch_read, stream_read):
        assert len(set(got)) == len(got)
        assert set(after) <= set(got) <= set(before)
        assert set(range(390, 400)) <= {offset for offset, _ in got}  # the latest value of every key
