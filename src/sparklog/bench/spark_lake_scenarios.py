"""``sparklog bench spark-read --lake``: a whole topic's history read through Spark's own Delta
reader (:func:`sparklog.spark.read_topic`) against the same records read through the ``sparklog``
Python source alone, in the same run and the same SparkSession (issue 19's target: at least 4x).

A local cluster (embedded ZooKeeper, one broker process with ``--lake-dir``, ``LocalCluster``'s
default ``<data dir>/lake``) gets two topics of ``partitions`` partitions and
``segment.bytes=segment_bytes``, filled (not timed) with the same ``records`` records of
``value_bytes`` (:func:`sparklog.bench.spark_scenarios.fill_topic`): ``bench-spark-lake`` with
``lake.enabled=true`` and ``bench-spark-log`` without. Then the lake topic gets ``segment.ms`` =
``SEGMENT_MS`` (1 s; set after the fill, so both topics' logs are cut into segments alike), and
until its leader's lake offsets reach the high watermarks (:mod:`sparklog.bench.lake_progress`)
it is tiered: its tierer closes each partition's last segment once that is a second old, so the
whole topic is history in its Delta table (the issue's "10M rows of history"; how a topic quiet
for its ``segment.ms`` stands); then until the tierer's compaction is done (no partition has a
run of small files due, nor will be once its files are older than the topic's
``lake.compaction.lag.ms``, here 1 s: the layout a topic's history has once the partition has
been quiet for the lag, 10 min by default). Its segments stay
on the broker's disk (local retention as total retention); ``read_topic`` reads the log only from
the lake offsets on either way.

Both reads are the same batch query, ``read_topic(spark, topic, zookeeper=...)`` into Spark's
``noop`` sink (``.write.format("noop").mode("overwrite").save()``); then the same DataFrame (its
offsets and files fixed when ``read_topic`` was called) runs again with an ``Observation``
counting its rows, checked against the records produced. The counting run is timed too, as
``*_counted`` (planning + the observed job): the measure before session 23, when the count was in
the timed job, which costs every read the same per-row work (~0.1-0.25 s for 10M rows; Spark's
``CollectMetrics`` is not code-generated):

* ``lake``: on the lake-enabled topic, every row through Spark's Parquet reader on the table's
  files (``spark.read.format("delta")`` where that is not exact); with nothing past the table's
  ends, no ``sparklog`` source (a live tail would be read through it, one ``unionByName``);
* ``log``: on the plain topic, where ``read_topic`` is the ``sparklog`` source alone (a batch read
  from the earliest offsets to the latest, ``maxPartitions`` = the session's parallelism), the
  log-only Python source read;
* ``source``: the plain topic again through ``spark.read.format("sparklog")`` with no option
  but the topic's (one task per partition, as Spark's Kafka source reads), reported as
  ``source_seconds`` and ``lake_speedup_vs_source``.

Each read is timed from the ``read_topic`` call (planning: offsets, the Delta snapshot) to the end
of the write, as a user sees it. ``repeat`` interleaved rounds (lake, log, source in even rounds, the
reverse in odd ones) after one unmeasured round of both (warming the JVM, the Python workers and the
page cache); the medians are reported, and each read is checked to count every record.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from typing import Any

from sparklog.bench import lake_progress
from sparklog.bench.spark_scenarios import bench_spark, fill_topic
from sparklog.client.admin import Admin
from sparklog.client.cluster_client import ClusterClient
from sparklog.config import TopicConfig
from sparklog.local_cluster import LocalCluster

LAKE = "bench-spark-lake"
LOG = "bench-spark-log"
SOURCE = "source"  # the plain sparklog batch read of LOG (not read_topic)
SEGMENT_BYTES = 8 << 20
SEGMENT_MS = 1000  # the lake topic's after the fill: its tierer closes the last segments a second old
COMPACTION_MIN_FILES = TopicConfig().lake_compaction_min_files  # the topics' (the default)
# the lake topic's lake.compaction.lag.ms: its history as compacted as one quiet for longer than the
# default lag (10 min) is, without waiting that long
COMPACTION_LAG_MS = 1000


def timed_read(spark: Any, zookeeper: str, topic: str, rows: int, source: bool = False) -> tuple[float, float]:
    """Seconds of ``read_topic(spark, topic)`` (``source``: of the plain ``sparklog`` batch read,
    one task per partition) into the noop sink, and of the same planning plus the same DataFrame
    run again with an ``Observation`` counting its rows; checks that it counted ``rows``."""
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    from sparklog.spark import read_topic

    start = time.perf_counter()
    if source:
        df = spark.read.format("sparklog").option("zookeeper", zookeeper).option("subscribe", topic).load()
    else:
        df = read_topic(spark, topic, zookeeper=zookeeper)
    planned = time.perf_counter()
    df.write.format("noop").mode("overwrite").save()
    took = time.perf_counter() - start
    observed = Observation(f"rows-{topic}-{source}")
    again = time.perf_counter()
    df.observe(observed, F.count(F.lit(1)).alias("rows")).write.format("noop").mode("overwrite").save()
    counted = planned - start + time.perf_counter() - again
    read = observed.get["rows"]
    if read != rows:
        raise AssertionError(f"read_topic read {read} rows of {topic}, it holds {rows}")
    return took, counted


def spark_read_lake(
    records: int = 10_000_000,
    value_bytes: int = 100,
    partitions: int = 6,
    batch_records: int = 10_000,
    repeat: int = 3,
    cores: int = 2,
    segment_bytes: int = SEGMENT_BYTES,
    **_: Any,
) -> dict[str, Any]:
    """``read_topic`` of a tiered lake-enabled topic against the Python source's read of the same
    records in a plain topic (see the module doc)."""
    from sparklog.datasource import connections

    spark, own = bench_spark(cores, delta=True)
    times: dict[str, list[float]] = {LAKE: [], LOG: [], SOURCE: []}
    counted: dict[str, list[float]] = {LAKE: [], LOG: [], SOURCE: []}
    with tempfile.TemporaryDirectory(prefix="sparklog-bench-") as tmp:
        cluster = LocalCluster(os.path.join(tmp, "cluster"), brokers=1).start()
        zk = cluster.zookeeper
        client = ClusterClient(zk)
        try:
            segments = {"segment.bytes": str(segment_bytes)}
            with Admin(zk) as admin:
                lake = {"lake.enabled": "true", "lake.compaction.lag.ms": str(COMPACTION_LAG_MS)}
                admin.create_topic(LAKE, partitions, 1, {**segments, **lake})
                admin.create_topic(LOG, partitions, 1, segments)
            total = fill_topic(zk, LAKE, records, value_bytes, partitions, batch_records)
            fill_topic(zk, LOG, records, value_bytes, partitions, batch_records)
            with Admin(zk) as admin:  # quiet from now on: the tierer closes the last segments
                admin.alter_topic(LAKE, {"segment.ms": str(SEGMENT_MS)})
            ends = lake_progress.high_watermarks(client, LAKE, partitions)
            tiered = lake_progress.wait_tiered(client, LAKE, ends).end
            table = f"{cluster.lake_dir}/{LAKE}"
            files = lake_progress.wait_compacted(table, COMPACTION_MIN_FILES, COMPACTION_LAG_MS)
            for i in range(repeat + 1):  # the first round warms up
                for read in (LAKE, LOG, SOURCE) if i % 2 == 0 else (SOURCE, LOG, LAKE):
                    topic = LAKE if read == LAKE else LOG
                    took, took_counted = timed_read(spark, zk, topic, total, source=read == SOURCE)
                    if i:
                        times[read].append(took)
                        counted[read].append(took_counted)
        finally:
            client.close()
            connections.close_all()
            cluster.stop()
            if own:
                spark.stop()
    lake, log, source = (statistics.median(times[read]) for read in (LAKE, LOG, SOURCE))
    lake_counted, log_counted = (statistics.median(counted[read]) for read in (LAKE, LOG))
    return {
        "scenario": "spark-read",
        "source": "lake",
        "records": total,
        "value_bytes": value_bytes,
        "partitions": partitions,
        "segment_bytes": segment_bytes,
        "cores": cores,
        "lake_rows": tiered,  # read from the Delta table; the rest is the live tail
        "tail_rows": total - tiered,
        "lake_files": files,  # the table's data files when read (after the tierer's compaction)
        "lake_seconds": round(lake, 3),
        "log_seconds": round(log, 3),
        "lake_seconds_all": [round(t, 3) for t in times[LAKE]],
        "log_seconds_all": [round(t, 3) for t in times[LOG]],
        "lake_rows_per_s": round(total / lake),
        "log_rows_per_s": round(total / log),
        "lake_speedup": round(log / lake, 2),
        # with the Observation counting the rows in the timed job (the measure before session 23)
        "lake_seconds_counted": round(lake_counted, 3),
        "log_seconds_counted": round(log_counted, 3),
        "lake_speedup_counted": round(log_counted / lake_counted, 2),
        # the plain batch read of the same records (one task per partition, as Kafka's source)
        "source_seconds": round(source, 3),
        "source_seconds_all": [round(t, 3) for t in times[SOURCE]],
        "lake_speedup_vs_source": round(source / lake, 2),
    }
