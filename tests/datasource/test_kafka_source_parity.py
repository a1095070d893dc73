"""Issue 18, read side: the options of Spark's Kafka source, with Kafka's meaning, defaults and
messages, on a real cluster and a real SparkSession (one test per row of the issue's table)."""

from __future__ import annotations

import json
import logging
import time
from collections import Counter
from typing import Any

import pytest

from broker_helpers import scrape_metrics
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
from sparklog.client.admin import Admin
from sparklog.coordination.cluster import ClusterMetadata
from sparklog.datasource import kafka_settings
from sparklog.datasource.options import parse_read_options
from sparklog.datasource.progress import OffsetsBehindLatest, offsets_behind_latest
from sparklog.datasource.query_start import start_stream
from sparklog.datasource.reader import SparklogBatchReader, read_range, spark_schema
from sparklog.errors import InvalidRequest
from waiting import finishes, wait_for

pytestmark = pytest.mark.slow

KAFKA_COLUMNS = ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"]


def batch(spark: Any, zk: str, **options: Any) -> Any:
    reader = spark.read.format("sparklog").option("zookeeper", zk)
    for key, value in options.items():
        reader = reader.option(key, str(value))
    return reader.load()


def values(df: Any) -> list[int]:
    return sorted(int(bytes(r["value"])[1:]) for r in df.select("value").collect())


def bootstrap(cluster: Any) -> str:
    return ",".join(f"127.0.0.1:{b.port}" for b in cluster.brokers.values())


def test_kafka_client_settings_are_mapped_refused_or_ignored_with_one_warning(spark, spark_cluster, caplog):
    zk = spark_cluster.zookeeper
    topic = create_topic(zk, 2)
    produce(zk, topic, 0, 30, 2, headers=False)
    # a Kafka job's consumer settings: bootstrap.servers is mapped, the rest ignored
    kafka_job = {
        "kafka.bootstrap.servers": bootstrap(spark_cluster),
        "kafka.fetch.min.bytes": "1",
        "kafka.request.timeout.ms": "40000",
        "kafka.client.id": "dashboard",
    }
    reader = spark.read.format("sparklog").option("subscribe", topic)
    for key, value in kafka_job.items():
        reader = reader.option(key, value)
    assert values(reader.load()) == list(range(30))

    caplog.set_level(logging.WARNING, logger="sparklog.datasource")
    options = {"subscribe": topic, **{k: v for k, v in kafka_job.items()}, "kafka.max.poll.records": "7"}
    for _ in range(3):  # Spark builds a source's options several times per query: one warning
        parsed = parse_read_options(options)
    warnings = [r.getMessage() for r in caplog.records if "ignoring Kafka client settings" in r.getMessage()]
    assert len(warnings) == 1, warnings
    assert "kafka.fetch.min.bytes" in warnings[0] and "kafka.bootstrap.servers" not in warnings[0]
    assert "kafka.client.id, kafka.fetch.min.bytes, kafka.max.poll.records" in warnings[0]
    assert parsed.bootstrap_servers == kafka_job["kafka.bootstrap.servers"]
    # the settings table says what sparklog does with each
    assert kafka_settings.SETTINGS["bootstrap.servers"].status == "mapped"
    assert kafka_settings.SETTINGS["group.id"].status == "mapped"

    # what Kafka's connector refuses is refused, saying why and what to use instead
    with pytest.raises(Exception, match="'auto.offset.reset' is not supported.*startingOffsets"):
        batch(spark, zk, subscribe=topic, **{"kafka.auto.offset.reset": "earliest"})
    with pytest.raises(InvalidRequest, match="'value.deserializer' is not supported.*DataFrame operations"):
        parse_read_options({"subscribe": topic, "kafka.value.deserializer": "x"})
    with pytest.raises(InvalidRequest, match="'enable.auto.commit' is not supported"):
        parse_read_options({"subscribe": topic, "kafka.enable.auto.commit": "true"})


def test_max_offsets_per_trigger_is_kafkas_name_and_max_records_per_trigger_its_alias(spark, spark_cluster, tmp_path):
    zk = spark_cluster.zookeeper
    topic = create_topic(zk, 2)
    produce(zk, topic, 0, 100, 2, headers=False)
    df = stream_reader(spark, zk, subscribe=topic, startingOffsets="earliest", maxOffsetsPerTrigger=40)
    query = run_available_now(df, str(tmp_path / "ckpt"), query_name=unique("maxoff").replace("-", "_"))
    assert batch_rows(query) == [40, 40, 20]
    # progress: the latest offsets (reportLatestOffset), what Spark shows in place of Kafka's lag metrics
    latest = json.loads(query.recentProgress[0]["sources"][0]["latestOffset"])
    assert {(topic, int(p)): o for p, o in latest[topic].items()} == high_watermarks(zk, topic)
    assert parse_read_options({"subscribe": "a", "maxrecordspertrigger": "40"}).max_records_per_trigger == 40
    with pytest.raises(InvalidRequest, match="'maxOffsetsPerTrigger' and 'maxRecordsPerTrigger' contradict"):
        parse_read_options({"subscribe": "a", "maxoffsetspertrigger": "40", "maxrecordspertrigger": "50"})


def test_min_offsets_per_trigger_waits_for_records_or_max_trigger_delay(spark, spark_cluster, tmp_path):
    zk = spark_cluster.zookeeper
    topic = create_topic(zk, 1)
    with pytest.raises(
        InvalidRequest, match=r"minOffsetPerTrigger\(50\) is higher than the maxOffsetsPerTrigger\(10\)"
    ):
        parse_read_options({"subscribe": topic, "minoffsetspertrigger": "50", "maxoffsetspertrigger": "10"})
    with pytest.raises(InvalidRequest, match="'maxTriggerDelay'"):
        parse_read_options({"subscribe": topic, "maxtriggerdelay": "soon"})

    seen: list[int] = []

    def collect(batch_df: Any, _batch_id: int) -> None:
        n = batch_df.count()
        if n:
            seen.append(n)

    df = stream_reader(
        spark, zk, subscribe=topic, startingOffsets="earliest", minOffsetsPerTrigger=50, maxTriggerDelay="6s"
    )
    writer = (
        df.writeStream.foreachBatch(collect)
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(processingTime="200 milliseconds")
    )
    query = start_stream(writer.start, str(tmp_path / "ckpt"))
    try:
        time.sleep(2)  # the first trigger (nothing waiting) has been admitted
        produce(zk, topic, 0, 10, 1, headers=False)
        produced = time.monotonic()
        time.sleep(2.5)
        assert seen == [], "10 records < minOffsetsPerTrigger were admitted before maxTriggerDelay"
        wait_for(lambda: seen, 60, "maxTriggerDelay to admit the waiting records", 0.1)
        assert seen == [10]
        assert time.monotonic() - produced >= 3.5
        produce(zk, topic, 10, 60, 1, headers=False)  # enough: admitted without waiting for the delay
        wait_for(lambda: sum(seen) >= 70, 30, lambda: f"the 60 more records admitted (batches: {seen})", 0.1)
        assert seen == [10, 60]
    finally:
        query.stop()


def test_max_records_per_partition_splits_large_offset_ranges(spark, spark_cluster):
    zk = spark_cluster.zookeeper
    topic = create_topic(zk, 2)
    produce(zk, topic, 0, 130, 2, headers=False)  # 65 records per partition
    df = batch(spark, zk, subscribe=topic, maxRecordsPerPartition=20)
    assert df.rdd.getNumPartitions() == 8  # ceil(65 / 20) = 4 per partition
    assert values(df) == list(range(130))
    both = batch(spark, zk, subscribe=topic, maxRecordsPerPartition=40, minPartitions=10)
    assert both.rdd.getNumPartitions() >= 10
    assert values(both) == list(range(130))


def test_assign_reads_only_the_partitions_named(spark, spark_cluster, tmp_path):
    zk = spark_cluster.zookeeper
    topic = create_topic(zk, 3)
    produce(zk, topic, 0, 90, 3, headers=False)  # record i is in partition i % 3
    assign = json.dumps({topic: [0, 2]})
    df = batch(spark, zk, assign=assign)
    assert Counter(r["partition"] for r in df.collect()) == {0: 30, 2: 30}
    stream = stream_reader(spark, zk, assign=assign, startingOffsets=json.dumps({topic: {"0": 25, "2": -2}}))
    _, batches = collect_available_now(stream, str(tmp_path / "ckpt"))
    got = sorted(int(bytes(r["value"])[1:]) for rows in batches.values() for r in rows)
    assert got == [i for i in range(90) if i % 3 == 2 or (i % 3 == 0 and i // 3 >= 25)]
    with pytest.raises(Exception, match=rf"'assign': {topic}-5 does not exist"):
        batch(spark, zk, assign=json.dumps({topic: [5]})).collect()
    with pytest.raises(Exception, match="No topicpartitions to assign"):
        batch(spark, zk, assign=topic)
    typed = unique("typed")  # a typed topic's values are structs whichever way it is chosen
    schema = {"type": "record", "name": "R", "fields": [{"name": "a", "type": "string"}]}
    with Admin(zk) as admin:
        admin.create_topic(typed, 2, 1, value_schema=json.dumps(schema))
    assert (
        batch(spark, zk, assign=json.dumps({typed: [1]})).schema["value"].dataType.simpleString() == "struct<a:string>"
    )


def test_offsets_by_timestamp_per_partition(spark, spark_cluster):
    zk = spark_cluster.zookeeper
    topic = create_topic(zk, 2)
    produce(zk, topic, 0, 100, 2, headers=False)  # record i: partition i % 2, timestamp T0 + i s
    starting = json.dumps({topic: {"0": T0 + 10_000, "1": T0 + 51_000}})
    ending = json.dumps({topic: {"0": T0 + 20_000, "1": T0 + 10**9}})  # after every record: latest
    df = batch(spark, zk, subscribe=topic, startingOffsetsByTimestamp=starting, endingOffsetsByTimestamp=ending)
    assert values(df) == [i for i in range(100) if (i % 2 == 0 and 10 <= i < 20) or (i % 2 == 1 and i >= 51)]

    # no offset at or after the time: Kafka fails by default, or starts at the latest offset
    late = json.dumps({topic: {"0": T0 + 10**9, "1": T0}})
    with pytest.raises(Exception, match=rf"no offset matched from request of topic-partition {topic}-0"):
        batch(spark, zk, subscribe=topic, startingOffsetsByTimestamp=late).collect()
    df = batch(spark, zk, subscribe=topic, startingOffsetsByTimestamp=late, startingOffsetsByTimestampStrategy="latest")
    assert values(df) == [i for i in range(100) if i % 2 == 1]
    with pytest.raises(Exception, match="'startingOffsetsByTimestamp'.*leaves out"):
        batch(spark, zk, subscribe=topic, startingOffsetsByTimestamp=json.dumps({topic: {"0": T0}})).collect()


def test_starting_timestamp_without_a_matching_offset_fails_unless_strategy_latest(spark, spark_cluster, tmp_path):
    zk = spark_cluster.zookeeper
    topic = create_topic(zk, 1)
    produce(zk, topic, 0, 20, 1, headers=False)
    future = str(T0 + 10**9)
    with pytest.raises(Exception, match="no offset matched.*startingOffsetsByTimestampStrategy=latest"):
        collect_available_now(stream_reader(spark, zk, subscribe=topic, startingTimestamp=future), str(tmp_path / "a"))
    df = stream_reader(
        spark, zk, subscribe=topic, startingTimestamp=future, startingOffsetsByTimestampStrategy="latest"
    )
    checkpoint = str(tmp_path / "b")
    _, batches = collect_available_now(df, checkpoint)
    assert sum(len(rows) for rows in batches.values()) == 0
    produce(zk, topic, 20, 5, 1, headers=False)  # started at the latest offset: these are read
    df = stream_reader(
        spark, zk, subscribe=topic, startingTimestamp=future, startingOffsetsByTimestampStrategy="latest"
    )
    _, batches = collect_available_now(df, checkpoint)
    assert sorted(int(bytes(r["value"])[1:]) for rows in batches.values() for r in rows) == list(range(20, 25))


def test_json_starting_offsets_must_name_every_partition(spark, spark_cluster, tmp_path):
    zk = spark_cluster.zookeeper
    topic = create_topic(zk, 3)
    produce(zk, topic, 0, 30, 3, headers=False)
    partial = json.dumps({topic: {"0": 2, "2": -2}})
    with pytest.raises(Exception, match=rf"'startingOffsets'.*must name every partition.*leaves out {topic}-1"):
        batch(spark, zk, subscribe=topic, startingOffsets=partial).collect()
    with pytest.raises(Exception, match=rf"leaves out {topic}-1"):
        collect_available_now(stream_reader(spark, zk, subscribe=topic, startingOffsets=partial), str(tmp_path / "c"))
    full = json.dumps({topic: {"0": 2, "1": -2, "2": 9}})
    assert len(batch(spark, zk, subscribe=topic, startingOffsets=full).collect()) == 8 + 10 + 1


def test_timestamp_type_column_in_kafkas_column_order(spark, spark_cluster):
    zk = spark_cluster.zookeeper
    create_time = create_topic(zk, 1)
    append_time = create_topic(zk, 1, configs={"message.timestamp.type": "LogAppendTime"})
    produce(zk, create_time, 0, 5, 1)
    produce(zk, append_time, 0, 5, 1)
    df = batch(spark, zk, subscribe=f"{create_time},{append_time}")
    assert df.columns == KAFKA_COLUMNS
    assert df.schema["timestampType"].dataType.simpleString() == "int"
    got = Counter((r["topic"], r["timestampType"]) for r in df.collect())
    assert got == {(create_time, 0): 5, (append_time, 1): 5}
    headers = batch(spark, zk, subscribe=create_time, includeHeaders="true")
    assert headers.columns == [*KAFKA_COLUMNS, "headers"]
    assert spark_schema(False).fieldNames() == KAFKA_COLUMNS


def test_kafka_group_id_is_the_commit_group_and_group_id_prefix_is_accepted(spark, spark_cluster, tmp_path):
    zk = spark_cluster.zookeeper
    topic = create_topic(zk, 2)
    produce(zk, topic, 0, 40, 2, headers=False)
    group = unique("kgroup")
    df = stream_reader(spark, zk, subscribe=topic, startingOffsets="earliest", **{"kafka.group.id": group})
    collect_available_now(df, str(tmp_path / "ckpt"))
    assert committed(zk, group) == high_watermarks(zk, topic)
    # the query's group is in the controller's group lag, caught up
    (broker,) = spark_cluster.brokers.values()
    samples = scrape_metrics(broker.metrics_url() or "")
    lag = {
        (name, dict(labels)["partition"]): v
        for (name, labels), v in samples.items()
        if name in ("kafka_consumergroup_lag", "kafka_consumergroup_current_offset")
        and dict(labels).get("consumergroup") == group
    }
    assert lag == {
        **{("kafka_consumergroup_lag", str(p)): 0 for p in range(2)},
        **{("kafka_consumergroup_current_offset", str(p)): end for (_, p), end in high_watermarks(zk, topic).items()},
    }, lag

    prefix = unique("prefix")
    df = stream_reader(spark, zk, subscribe=topic, startingOffsets="earliest", groupIdPrefix=prefix)
    _, batches = collect_available_now(df, str(tmp_path / "ckpt2"))
    assert sum(len(rows) for rows in batches.values()) == 40
    with ClusterMetadata(zk) as meta:  # no consumer group membership: nothing under the prefix
        assert not [g for g in meta.groups() if g.startswith(prefix)]
    # a Kafka batch job may carry kafka.group.id: batch reads commit nothing
    assert values(batch(spark, zk, subscribe=topic, **{"kafka.group.id": group})) == list(range(40))
    with pytest.raises(InvalidRequest, match="'group' and 'kafka.group.id' contradict"):
        parse_read_options({"subscribe": topic, "group": "a", "kafka.group.id": "b"})


def test_poll_timeout_and_fetch_offset_retries_are_options(spark, start_broker, sparklog_connect):
    broker = start_broker(1)
    zk = sparklog_connect
    topic = unique("poll")
    with Admin(zk) as admin:
        admin.create_topic(topic, 1, 1)
    produce(zk, topic, 0, 50, 1, headers=False)
    options = {
        "zookeeper": zk,
        "subscribe": topic,
        "kafkaconsumer.polltimeoutms": "1500",
        "fetchoffset.numretries": "1",
        "fetchoffset.retryintervalms": "50",
    }
    df = batch(spark, zk, subscribe=topic, **{"kafkaConsumer.pollTimeoutMs": 1500, "fetchOffset.numRetries": 1})
    assert values(df) == list(range(50))
    parsed = parse_read_options(options)
    assert (parsed.poll_timeout_ms, parsed.fetch_offset_retries, parsed.fetch_offset_retry_interval_ms) == (1500, 1, 50)
    defaults = parse_read_options({"subscribe": topic})
    assert (defaults.poll_timeout_ms, defaults.fetch_offset_retries, defaults.fetch_offset_retry_interval_ms) == (
        120_000,
        3,
        10,
    )
    with pytest.raises(InvalidRequest, match="'fetchOffset.numRetries'"):
        parse_read_options({**options, "fetchoffset.numretries": "-1"})

    # an executor's read gives up after pollTimeoutMs when the leader is gone: the error names the
    # option's 1500 ms; under a guard far below the 120 s default, which a read ignoring it would hit
    reader = SparklogBatchReader(parsed, spark_schema(False))
    [part] = reader.partitions()
    broker.stop()
    with pytest.raises(Exception, match=r"after polling for 1500 ms \(kafkaConsumer.pollTimeoutMs\)"):
        finishes(lambda: list(read_range(part)), 60, "a read whose leader is gone")


def test_batch_refuses_latest_starting_offsets_as_kafka_does(spark, spark_cluster):
    zk = spark_cluster.zookeeper
    topic = create_topic(zk, 1)
    produce(zk, topic, 0, 10, 1, headers=False)
    with pytest.raises(Exception, match="starting offset can't be latest for batch queries"):
        batch(spark, zk, subscribe=topic, startingOffsets="latest").collect()
    with pytest.raises(Exception, match=rf"startingOffsets for {topic}-0 can't be latest"):
        batch(spark, zk, subscribe=topic, startingOffsets=json.dumps({topic: {"0": -1}})).collect()
    assert values(batch(spark, zk, subscribe=topic, startingOffsets="earliest")) == list(range(10))


def test_offsets_behind_latest_from_progress(spark, spark_cluster, tmp_path):
    """Kafka's lag metrics, computed from the progress the sparklog source reports (latestOffset)."""
    zk = spark_cluster.zookeeper
    topic = create_topic(zk, 2)
    produce(zk, topic, 0, 100, 2, headers=False)  # 50 per partition
    listener = OffsetsBehindLatest()
    spark.streams.addListener(listener)
    try:
        df = stream_reader(spark, zk, subscribe=topic, startingOffsets="earliest", maxOffsetsPerTrigger=60)
        query, _ = collect_available_now(df, str(tmp_path / "ckpt"))
        wait_for(  # listener events arrive asynchronously
            lambda: listener.metrics(query.id) and listener.metrics(query.id)[0]["maxOffsetsBehindLatest"] == 0,
            30,
            lambda: f"a progress event with nothing behind the latest offsets: {listener.metrics(query.id)}",
            0.2,
        )
    finally:
        spark.streams.removeListener(listener)
    first = next(p for p in query.recentProgress if p["numInputRows"])
    assert offsets_behind_latest(first["sources"][0]) == {
        "minOffsetsBehindLatest": 20.0,  # 60 admitted: 30 of each partition's 50
        "maxOffsetsBehindLatest": 20.0,
        "avgOffsetsBehindLatest": 20.0,
    }
    assert listener.metrics(query.id) == [
        {"minOffsetsBehindLatest": 0.0, "maxOffsetsBehindLatest": 0.0, "avgOffsetsBehindLatest": 0.0}
    ]
