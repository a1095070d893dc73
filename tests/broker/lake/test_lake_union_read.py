"""The union read (issue 19, slice 2) with a real broker process, a real ZooKeeper and a real Delta
table: offsets that local retention deleted are read from the topic's table, then the log, with no
gap and no duplicate, by the ``Consumer`` (multi-partition fetch), the single-partition fetch (what
Spark's Python source uses), ``sparklog consume --from-beginning``, Spark's batch and
``availableNow`` reads through the ``sparklog`` source, and ``sparklog.spark.read_topic`` (the
history through Spark's Parquet reader on one Delta snapshot's files, or Delta's reader).

Every topic rolls a segment per produced batch (``segment.bytes=1024``) and keeps nothing tiered
locally (``local.retention.bytes=0``): after ``n`` batches the first ``n - 1`` are only in the
table and the last one only in the log."""

from __future__ import annotations

import collections
import datetime as dt
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from broker_helpers import ProcessGroup
from lake_helpers import (
    BASE_MS,
    LAKE_TOPIC,
    PER_BATCH,
    TYPED_V1,
    TYPED_V2,
    click,
    consume_all,
    lake_broker,
    lake_cluster,
    produce_batches,
    segment_bases,
    value,
)
from spark_helpers import collect_available_now, stream_reader, unique
from sparklog import Admin, Consumer, Producer
from sparklog.datasource import connections
from sparklog.errors import InvalidRequest, OffsetOutOfRange
from sparklog.spark import read_topic
from waiting import wait_for

# lake.compaction.min.files=2: the tierer compacts after every commit but the first, so these
# reads run over compacted tables (and some of them while a compaction rewrites one)
LOCAL_NONE = {**LAKE_TOPIC, "local.retention.bytes": "0", "retention.ms": "-1", "lake.compaction.min.files": "2"}
BATCHES = {0: 4, 1: 5}  # per partition: all but the last batch end up only in the table


def wait_local_deleted(connect: str, topic: str, expected: dict[int, int]) -> None:
    """Until every partition's local log starts at ``expected[p]`` and its earliest offset is 0."""

    def done() -> bool:
        with Admin(connect) as admin:
            parts = admin.describe_topic(topic)["partitions"]
        return all(
            (d["log_start_offset"], d.get("local_log_start_offset")) == (0, expected[d["partition"]]) for d in parts
        )

    wait_for(done, 60, f"{topic}: tiered segments deleted locally, earliest offset in the lake", interval=0.5)


def lake_topic(connect: str, topic: str) -> None:
    with Admin(connect) as admin:
        admin.create_topic(topic, len(BATCHES), 1, LOCAL_NONE)
    for p, batches in BATCHES.items():
        produce_batches(connect, topic, p, batches)
    wait_local_deleted(connect, topic, {p: (b - 1) * PER_BATCH for p, b in BATCHES.items()})


def expected_records(p: int, start: int = 0) -> list[tuple[int, bytes]]:
    return [(o, value(p, o)) for o in range(start, BATCHES[p] * PER_BATCH)]


@pytest.mark.slow
def test_consumers_read_across_lake_and_log_exactly_once(
    sparklog_connect: str, child_processes: ProcessGroup, tmp_path: Path
) -> None:
    lake = tmp_path / "lake"
    broker = lake_broker(sparklog_connect, tmp_path, child_processes, lake).start()
    lake_topic(sparklog_connect, "union")
    assert segment_bases(broker.data_dir, "union", 0) == [30]
    total = sum(BATCHES.values()) * PER_BATCH

    def files_per_partition() -> list[int]:
        actions = pa.table(DeltaTable(str(lake / "union")).get_add_actions(flatten=True)).column("partition.partition")
        return sorted(collections.Counter(actions.to_pylist()).values())

    # 3 and 4 one-segment commits, each compacted with what came before: one file per partition
    wait_for(lambda: files_per_partition() == [1, 1], 60, "the tierer's compaction of the table")

    # the Consumer from the earliest offset (in the lake), on to the log
    with Consumer("union", zookeeper=sparklog_connect, auto_offset_reset="earliest", max_bytes=2048) as consumer:
        got = consume_all(consumer, total)
    assert got == {p: expected_records(p) for p in BATCHES}

    # from an offset in the middle of the table
    with Consumer("union", zookeeper=sparklog_connect, partitions=[1]) as consumer:
        consumer.seek(1, 17, topic="union")
        assert consume_all(consumer, BATCHES[1] * PER_BATCH - 17) == {1: expected_records(1, 17)}

    # by time: the offset for a timestamp in the table's history (list_offsets' offset_for_time)
    with Consumer("union", zookeeper=sparklog_connect, partitions=[0]) as consumer:
        consumer.seek_to_time(BASE_MS + 15)
        assert consumer.position(0, topic="union") == 15
        assert consume_all(consumer, BATCHES[0] * PER_BATCH - 15) == {0: expected_records(0, 15)}

    # the single-partition fetch (Spark's Python source), small max_bytes: many round trips
    for p in BATCHES:
        offset, seen = 0, []
        while offset < BATCHES[p] * PER_BATCH:
            for batch in connections.fetch(sparklog_connect, "union", p, offset, 1024):
                offsets = batch.column("offset").to_pylist()
                values = batch.column("value").to_pylist()
                for o, v in zip(offsets, values, strict=True):
                    if o >= offset:
                        seen.append((o, v))
                        offset = o + 1
        assert seen == expected_records(p)

    # sparklog consume --from-beginning
    cli = subprocess.run(
        [
            sys.executable,
            "-m",
            "sparklog.cli.main",
            "--zookeeper",
            sparklog_connect,
            "consume",
            "union",
            "--from-beginning",
            "--format",
            "json",
            "--max-messages",
            str(total),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert cli.returncode == 0, cli.stderr
    lines = [json.loads(line) for line in cli.stdout.splitlines()]
    by_partition: dict[int, list[int]] = {}
    for line in lines:
        by_partition.setdefault(line["partition"], []).append(line["offset"])
    assert by_partition == {p: list(range(b * PER_BATCH)) for p, b in BATCHES.items()}
    broker.stop()


@pytest.mark.slow
def test_offsets_below_the_table_stay_out_of_range_and_a_typed_topic_reads_its_struct(
    sparklog_connect: str, child_processes: ProcessGroup, tmp_path: Path
) -> None:
    lake = tmp_path / "lake"
    broker = lake_broker(sparklog_connect, tmp_path, child_processes, lake).start()
    # lake.enabled on a topic whose first segment retention already deleted: the table starts at 10
    with Admin(sparklog_connect) as admin:
        admin.create_topic("late", 1, 1, {"segment.bytes": "1024", "retention.bytes": "0", "retention.ms": "-1"})
    produce_batches(sparklog_connect, "late", 0, 2)
    wait_for(lambda: segment_bases(broker.data_dir, "late", 0) == [10], 30, "retention", interval=0.5)
    with Admin(sparklog_connect) as admin:
        admin.alter_topic("late", {**LOCAL_NONE, "retention.bytes": "-1"})
    produce_batches(sparklog_connect, "late", 0, 2, first=20)
    wait_local_deleted_from(sparklog_connect, "late", 10, 30)
    with pytest.raises(OffsetOutOfRange):
        list(connections.fetch(sparklog_connect, "late", 0, 5, 1 << 20))
    with Consumer("late", zookeeper=sparklog_connect, auto_offset_reset="earliest") as consumer:
        got = consume_all(consumer, 30)
    assert got == {0: [(o, value(0, o)) for o in range(10, 40)]}

    # a typed topic: the table's struct (in the latest schema version) is what consumers get
    typed_lake_topic(sparklog_connect, "typed")
    with Consumer("typed", zookeeper=sparklog_connect, auto_offset_reset="earliest") as consumer:
        records = []
        wait_for(lambda: records.extend(consumer.poll(1.0)) or len(records) >= 11, 60, "typed records", interval=0)
    assert [r.offset for r in records] == list(range(11))
    assert [r.value for r in records] == TYPED_VALUES
    broker.stop()


@pytest.mark.slow
def test_a_new_leader_serves_the_lake_history_too(
    sparklog_connect: str, child_processes: ProcessGroup, tmp_path: Path
) -> None:
    cluster, lake = lake_cluster(sparklog_connect, tmp_path, child_processes)
    try:
        with Admin(sparklog_connect) as admin:
            admin.create_topic("moving", 1, 2, LOCAL_NONE)
        cluster.wait_full_isr("moving")
        produce_batches(sparklog_connect, "moving", 0, 4)
        for broker in cluster.brokers.values():  # both replicas delete what is tiered
            wait_for(lambda b=broker: segment_bases(b.data_dir, "moving", 0) == [30], 45, "local deletes", interval=0.5)
        old = cluster.state("moving", 0)
        cluster[old.leader].kill()
        cluster.wait_new_leader("moving", 0, old.leader_epoch)
        wait_local_deleted_from(sparklog_connect, "moving", 0, 30)  # the new leader: earliest in the lake
        with Consumer("moving", zookeeper=sparklog_connect, auto_offset_reset="earliest") as consumer:
            assert consume_all(consumer, 40) == {0: [(o, value(0, o)) for o in range(40)]}
    finally:
        cluster.close()


# offsets 0-4 were produced in version 1 and tiered before version 2 existed: its default
TYPED_VALUES = [{**click(i), "country": "unknown"} for i in range(5)] + [click(i, country="NO") for i in range(5, 11)]


def typed_lake_topic(connect: str, topic: str) -> None:
    """Offsets 0-4 in schema version 1, 5-10 in version 2 (a new field); 0-7 only in the table."""
    with Admin(connect) as admin:
        admin.create_topic(topic, 1, 1, LOCAL_NONE, value_schema=json.dumps(TYPED_V1))
        with Producer(connect, acks="all", linger_ms=0) as producer:
            producer.send_batch(topic, {"value": [click(i) for i in range(5)]}, partition=0)
        admin.register_schema(topic, json.dumps(TYPED_V2))
        time.sleep(1.0)  # the broker and the producer follow the new version by watches
    with Producer(connect, acks="all", linger_ms=0) as producer:
        for first in (5, 8):
            batch = [click(i, country="NO") for i in range(first, first + 3)]
            producer.send_batch(topic, {"value": batch}, partition=0)
    wait_local_deleted_from(connect, topic, 0, 8)


def wait_local_deleted_from(connect: str, topic: str, earliest: int, local: int) -> None:
    def done() -> bool:
        with Admin(connect) as admin:
            d = admin.describe_topic(topic)["partitions"][0]
        return (d["log_start_offset"], d.get("local_log_start_offset")) == (earliest, local)

    wait_for(done, 60, f"{topic}: earliest {earliest}, local log start {local}", interval=0.5)


def check_spark_rows(rows: list, topic: str, batches: dict[int, int] = BATCHES) -> None:
    """Every record of every partition (``batches`` of them) exactly once, as produced (Spark's row
    order aside)."""
    by_partition: dict[int, list] = {}
    for row in rows:
        by_partition.setdefault(row["partition"], []).append(row)
    assert sorted(by_partition) == sorted(batches)
    for p, got in by_partition.items():
        got.sort(key=lambda r: r["offset"])
        assert [r["offset"] for r in got] == list(range(batches[p] * PER_BATCH)), f"partition {p}"
        for r in got:
            o = r["offset"]
            assert (r["topic"], bytes(r["key"]), bytes(r["value"])) == (topic, b"k%d" % o, value(p, o))
            assert r["timestamp"] == dt.datetime.fromtimestamp((BASE_MS + o) / 1000, dt.UTC).replace(tzinfo=None)
            assert [(h["key"], bytes(h["value"])) for h in r["headers"]] == [("o", b"%d" % o)]


@pytest.mark.slow
def test_spark_reads_across_lake_and_log_exactly_once(spark: Any, spark_cluster: Any, tmp_path: Path) -> None:
    zk = spark_cluster.zookeeper
    topic = unique("union")
    lake_topic(zk, topic)

    # read_topic: the history through Spark's Parquet reader on the table's files, the rest
    # through the sparklog source
    df = read_topic(spark, topic, zookeeper=zk, includeHeaders="true")
    source = spark.read.format("sparklog").option("zookeeper", zk).option("subscribe", topic)
    normal = source.option("includeHeaders", "true").load()
    assert df.schema == normal.schema
    parquet = [f for f in df.inputFiles() if f.endswith(".parquet")]
    assert parquet and all(f"/lake/{topic}/" in f for f in parquet), df.inputFiles()
    union_root = parquet[0][: parquet[0].index(f"/lake/{topic}/") + len(f"/lake/{topic}")].removeprefix("file:")
    # exactly the files of the table's current version (not those compaction replaced), no filter
    current = {Path(f).name for f in DeltaTable(union_root).file_uris()}
    assert {Path(f).name for f in parquet} == current
    plan = df._jdf.queryExecution().executedPlan().toString()
    assert "Filter (" not in plan and "FileScan parquet" in plan, plan
    check_spark_rows(df.collect(), topic)
    with pytest.raises(InvalidRequest, match="startingOffsets"):
        read_topic(spark, topic, zookeeper=zk, startingOffsets="latest")

    # a typed topic: the table's value struct as the source's (latest version, fields by name)
    typed = unique("typed")
    typed_lake_topic(zk, typed)
    got = read_topic(spark, typed, zookeeper=zk)
    want = spark.read.format("sparklog").option("zookeeper", zk).option("subscribe", typed).load()
    # the same names and types (a union's nullability is the wider of the two parts')
    assert got.schema.simpleString() == want.schema.simpleString()
    assert any(f.endswith(".parquet") for f in got.inputFiles())
    rows = sorted(got.collect(), key=lambda r: r["offset"])
    assert [r["offset"] for r in rows] == list(range(11))
    assert [r["value"].asDict(recursive=True) for r in rows] == TYPED_VALUES
    assert sorted(want.collect(), key=lambda r: r["offset"]) == rows
    # the table itself (offsets 0-7): the value's fields as columns, version 1's rows with the
    # default of the field version 2 added, alike through Spark SQL and the deltalake reader
    parquet = next(f for f in got.inputFiles() if f.endswith(".parquet"))
    root = parquet[: parquet.index(f"/lake/{typed}/") + len(f"/lake/{typed}")].removeprefix("file:")
    countries = ["unknown"] * 5 + ["NO"] * 3
    sql = spark.sql(f"SELECT offset, page, country FROM delta.`{root}` ORDER BY offset").collect()
    assert [(r["offset"], r["page"], r["country"]) for r in sql] == [
        (o, TYPED_VALUES[o]["page"], countries[o]) for o in range(8)
    ]
    table = DeltaTable(root).to_pyarrow_table().sort_by("offset")
    assert table.select(["page", "ms", "tags", "country"]).to_pylist() == TYPED_VALUES[:8]

    # the sparklog source alone, batch (earliest by default) and availableNow from earliest: the
    # broker serves the offsets below its local log start from the table
    check_spark_rows(normal.collect(), topic)
    stream = stream_reader(spark, zk, subscribe=topic, startingOffsets="earliest", includeHeaders="true")
    _, batches = collect_available_now(stream, str(tmp_path / "ckpt"))
    check_spark_rows([r for rows in batches.values() for r in rows], topic)

    # planned when called: a record produced after read_topic is not in its DataFrame (the append
    # closes the segment holding the boundary; once tiered, local retention deletes it, and the
    # broker serves those offsets from the table)
    planned = read_topic(spark, topic, zookeeper=zk, includeHeaders="true")
    produce_batches(zk, topic, 0, 1, first=BATCHES[0] * PER_BATCH)
    check_spark_rows(planned.collect(), topic)
    more = {p: b + (p == 0) for p, b in BATCHES.items()}
    wait_local_deleted(zk, topic, {p: (b - 1) * PER_BATCH for p, b in more.items()})
    check_spark_rows(planned.collect(), topic)

    # a table another writer gave reader features (deletion vectors): Spark's plain Parquet reader
    # would not read it as Delta does, so read_topic reads it through Delta's reader, with a filter
    spark.sql(f"ALTER TABLE delta.`{union_root}` SET TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')")
    assert DeltaTable(union_root).protocol().reader_features
    through_delta = read_topic(spark, topic, zookeeper=zk, includeHeaders="true")
    plan = through_delta._jdf.queryExecution().executedPlan().toString()
    assert "Filter (" in plan, plan
    check_spark_rows(through_delta.collect(), topic, more)

    # a quiet topic (segment.ms=1000: its tierer closes the last segments): every record is in the
    # table, read_topic reads it with no sparklog source at all
    quiet = unique("quiet")
    with Admin(zk) as admin:
        admin.create_topic(quiet, len(BATCHES), 1, {**LOCAL_NONE, "segment.ms": "1000"})
    for p, batches in BATCHES.items():
        produce_batches(zk, quiet, p, batches)
    wait_local_deleted(zk, quiet, {p: b * PER_BATCH for p, b in BATCHES.items()})
    whole = read_topic(spark, quiet, zookeeper=zk, includeHeaders="true")
    assert whole.schema.simpleString() == normal.schema.simpleString()
    plan = whole._jdf.queryExecution().executedPlan().toString()
    assert "FileScan parquet" in plan and "Union" not in plan and "BatchScan" not in plan, plan
    check_spark_rows(whole.collect(), quiet)
