"""``sparklog bench spark-read|spark-write``: Structured Streaming through the ``sparklog`` data
source, against a local cluster (embedded ZooKeeper + one broker process) on this machine.

* ``spark_read``: ``records`` records of ``value_bytes`` are produced (not timed) into a topic of
  ``partitions`` partitions; a ``Trigger.AvailableNow`` query reads them all into Spark's ``noop``
  sink. Timed from ``start()`` to the end of the query (query start and stop included, as a user
  sees it), best of ``repeat`` runs after a small warm-up query.
  With ``source="memory"`` the same query reads :mod:`sparklog.bench.memory_source` instead (no
  cluster): batches of the same schema and shape from memory, what Spark itself can take from any
  Python data source on this machine.
* ``spark_write``: a streaming query writes ``records`` rows with ``writeStream.format("sparklog")``
  into a topic: every row goes through the exactly-once sink (staged, then published). The query
  reads (``availableNow``) another sparklog topic (``source="topic"``, a copy: Spark's read and
  write conversions both count) or Parquet files written beforehand (``source="files"``: Spark's
  vectorised Parquet reader, so the figure is mostly the sink's). Timed from ``start()`` to the
  end; the target topic is checked to hold exactly ``records`` rows.

Spark runs ``local[cores]`` (default 2) in this process; its Python workers use this interpreter.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from typing import Any

import pyarrow as pa

from sparklog.bench.append import make_values
from sparklog.client.admin import Admin
from sparklog.client.producer import Producer
from sparklog.datasource.query_start import start_stream
from sparklog.local_cluster import LocalCluster
from sparklog.spark_session import local_spark

SOURCE = "bench-spark"
TARGET = "bench-spark-out"


def bench_spark(cores: int, delta: bool = False) -> tuple[Any, bool]:
    """The active SparkSession, or a new ``local[cores]`` one (with ``delta``: with Delta Lake, as
    :func:`sparklog.spark_session.local_spark` configures it); and whether it was made here (the
    caller then stops it)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    import sparklog.datasource

    settings = {
        "spark.ui.enabled": "false",
        "spark.sql.shuffle.partitions": str(cores),
        "spark.sql.session.timeZone": "UTC",
        "spark.pyspark.python": sys.executable,
        "spark.driver.memory": "4g",
    }
    existing = SparkSession.getActiveSession()
    if existing is not None:
        session = existing
    elif delta:  # local_spark's keyword settings spell dots as underscores
        conf = {key.replace(".", "_"): value for key, value in settings.items()}
        session = local_spark("sparklog-bench", f"local[{cores}]", quick_start=False, **conf)  # C2: throughput
    else:
        builder = SparkSession.builder.master(f"local[{cores}]").appName("sparklog-bench")
        for key, value in settings.items():
            builder = builder.config(key, value)
        session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    sparklog.datasource.register(session)
    return session, existing is None


def fill_topic(zookeeper: str, topic: str, records: int, value_bytes: int, partitions: int, batch_records: int) -> int:
    """About ``records`` records of ``value_bytes`` (whole batches of ``batch_records``, the
    partitions in turn) produced into ``topic``; returns how many."""
    batch = pa.record_batch({"value": make_values(batch_records, value_bytes)})
    batches = max(1, records // batch_records)
    with Producer(zookeeper, acks="1", batch_records=batch_records) as producer:
        for i in range(batches):
            producer.send_batch(topic, batch, partition=i % partitions)
    return batches * batch_records


def _parquet(spark: Any, path: str, records: int, value_bytes: int, files: int) -> int:
    """``records`` rows of one column ``value`` (distinct binary values of ``value_bytes``) written
    as Parquet files (not timed)."""
    from pyspark.sql import functions as F

    value = F.expr(f"cast(lpad(cast(id as string), {value_bytes}, 'x') as binary)").alias("value")
    spark.range(records, numPartitions=files).select(value).write.parquet(path)
    return records


def _run(writer: Any, rows: int | None = None) -> tuple[float, Any]:
    """Start ``writer``'s query (:func:`~sparklog.datasource.query_start.start_stream`) and return the
    seconds from its start until it ends, and the query; with ``rows``, checks it read that many."""
    began = 0.0

    def start() -> Any:
        nonlocal began
        query = writer.start()
        began = time.perf_counter()
        return query

    query = start_stream(start)
    query.awaitTermination()
    took = time.perf_counter() - began
    if query.exception() is not None:
        raise RuntimeError(f"benchmark query failed: {query.exception()}")
    read = sum(p["numInputRows"] for p in query.recentProgress)
    if rows is not None and read != rows:
        raise AssertionError(f"the query read {read} rows, the source holds {rows}")
    return took, query


def _topic_stream(spark: Any, zookeeper: str, topic: str) -> Any:
    """A streaming reader of a sparklog topic from its earliest offsets."""
    return (
        spark.readStream.format("sparklog")
        .option("zookeeper", zookeeper)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
    )


def _read_writer(
    spark: Any, zookeeper: str, topic: str, checkpoint: str, fields: str | None = None, memory: dict | None = None
) -> Any:
    """An availableNow query (not started) from a sparklog topic (or, with ``memory`` options, from
    :mod:`sparklog.bench.memory_source`) into the noop sink."""
    if memory is not None:
        from sparklog.bench.memory_source import NAME, MemorySource

        spark.dataSource.register(MemorySource)
        reader = spark.readStream.format(NAME).options(**{k: str(v) for k, v in memory.items()})
    else:
        reader = _topic_stream(spark, zookeeper, topic)
    if fields is not None:
        reader = reader.option("fields", fields)
    return reader.load().writeStream.format("noop").option("checkpointLocation", checkpoint).trigger(availableNow=True)


def spark_read(
    records: int = 10_000_000,
    value_bytes: int = 100,
    partitions: int = 6,
    batch_records: int = 10_000,
    repeat: int = 3,
    cores: int = 2,
    fields: str | None = None,
    source: str = "topic",
    **_: Any,
) -> dict[str, Any]:
    """Streaming (availableNow) read of ``records`` records into the noop sink, from a sparklog
    topic or (``source="memory"``) from :mod:`sparklog.bench.memory_source` with the same rows,
    schema, partitions and batch size and no cluster: Spark's own ceiling for a Python source. With
    ``fields``: :func:`spark_read_fields` instead."""
    from sparklog.datasource import connections

    if source not in ("topic", "memory"):
        raise ValueError(f"spark-read reads from source 'topic' or 'memory', not {source!r}")
    if fields is not None:
        return spark_read_fields(fields, records, partitions, batch_records, repeat, cores, source)

    spark, own = bench_spark(cores)
    times: list[float] = []
    warmup_rows = 20 * batch_records
    with tempfile.TemporaryDirectory(prefix="sparklog-bench-") as tmp:
        cluster = None
        try:
            if source == "memory":
                memory = {"partitions": partitions, "batchRows": batch_records, "valueBytes": value_bytes}
                total = records

                def query(warmup: bool, checkpoint: str) -> Any:
                    rows = warmup_rows if warmup else records
                    return _read_writer(spark, "", "", checkpoint, memory={**memory, "rows": rows})

            else:
                cluster = LocalCluster(os.path.join(tmp, "cluster"), brokers=1).start()
                zk = cluster.zookeeper
                with Admin(zk) as admin:
                    admin.create_topic(SOURCE, partitions, 1)
                    admin.create_topic("warmup", partitions, 1)
                fill_topic(zk, "warmup", warmup_rows, value_bytes, partitions, batch_records)
                total = fill_topic(zk, SOURCE, records, value_bytes, partitions, batch_records)

                def query(warmup: bool, checkpoint: str) -> Any:
                    return _read_writer(spark, zk, "warmup" if warmup else SOURCE, checkpoint)

            _run(query(True, os.path.join(tmp, "ckpt-warmup")))
            for i in range(repeat):
                times.append(_run(query(False, os.path.join(tmp, f"ckpt-{i}")), total)[0])
        finally:
            if cluster is not None:
                connections.close_all()
                cluster.stop()
            if own:
                spark.stop()
    best = min(times)
    return {
        "scenario": "spark-read",
        "source": source,
        "records": total,
        "value_bytes": value_bytes,
        "partitions": partitions,
        "cores": cores,
        "seconds": round(best, 3),
        "seconds_all": [round(t, 3) for t in times],
        "rows_per_s": round(total / best),
        "read_records_per_s": round(total / best),
        "records_per_s": round(total / best),
        "mb_per_s": round(total * value_bytes / best / 1e6, 1),
    }


def spark_read_fields(
    fields: str = "f0,f1",
    records: int = 2_000_000,
    partitions: int = 6,
    batch_records: int = 10_000,
    repeat: int = 3,
    cores: int = 2,
    source: str = "topic",
) -> dict[str, Any]:
    """A typed topic of 20 columns (as ``consume-fields``) read by availableNow queries into the
    noop sink: every column, then only ``fields`` (the broker sends just those columns, Spark
    converts just those), interleaved ``repeat`` times; medians. ``source="memory"``: the same
    values from :mod:`sparklog.bench.memory_source` (no cluster), Spark's own ratio."""
    import json
    import statistics

    from sparklog.bench.broker_scenarios import fill_typed_topic, typed_schema
    from sparklog.datasource import connections

    spark, own = bench_spark(cores)
    times: dict[str, list[float]] = {"all": [], "fields": []}
    with tempfile.TemporaryDirectory(prefix="sparklog-bench-") as tmp:
        cluster = None
        try:
            memory = None
            if source == "memory":
                total = records
                memory = {"rows": records, "partitions": partitions, "batchRows": batch_records, "typedColumns": 20}
                zookeeper = ""
            else:
                cluster = LocalCluster(os.path.join(tmp, "cluster"), brokers=1).start()
                zookeeper = cluster.zookeeper
                with Admin(zookeeper) as admin:
                    admin.create_topic(SOURCE, partitions, 1, value_schema=json.dumps(typed_schema()))
                total = fill_typed_topic(zookeeper, SOURCE, records, batch_records, partitions)
            for i in range(repeat + 1):  # the first round warms up Spark and the broker
                for name, projection in (("all", None), ("fields", fields)):
                    checkpoint = os.path.join(tmp, f"ckpt-{name}-{i}")
                    took, _ = _run(_read_writer(spark, zookeeper, SOURCE, checkpoint, projection, memory), total)
                    if i:
                        times[name].append(took)
        finally:
            if cluster is not None:
                connections.close_all()
                cluster.stop()
            if own:
                spark.stop()
    took = {k: statistics.median(v) for k, v in times.items()}
    return {
        "scenario": "spark-read",
        "source": source,
        "records": total,
        "columns": 20,
        "fields": fields,
        "partitions": partitions,
        "cores": cores,
        "seconds": round(took["fields"], 3),
        "all_columns_seconds": round(took["all"], 3),
        "records_per_s": round(total / took["fields"]),
        "all_columns_records_per_s": round(total / took["all"]),
        "speedup": round(took["all"] / took["fields"], 2),
    }


def spark_write(
    records: int = 10_000_000,
    value_bytes: int = 100,
    partitions: int = 6,
    batch_records: int = 10_000,
    repeat: int = 1,
    cores: int = 2,
    source: str = "topic",
    **_: Any,
) -> dict[str, Any]:
    """Streaming write of ``records`` rows through the exactly-once sink, read from another topic
    (``source="topic"``: a copy) or from Parquet files (``source="files"``)."""
    from sparklog.datasource import connections

    if source not in ("topic", "files"):
        raise ValueError(f"spark-write reads from source 'topic' or 'files', not {source!r}")
    spark, own = bench_spark(cores)
    times: list[float] = []
    with tempfile.TemporaryDirectory(prefix="sparklog-bench-") as tmp:
        cluster = LocalCluster(os.path.join(tmp, "cluster"), brokers=1).start()
        zk = cluster.zookeeper
        try:
            with Admin(zk) as admin:
                admin.create_topic(SOURCE, partitions, 1)
                admin.create_topic("warmup", partitions, 1)
                admin.create_topic("warmup-out", partitions, 1)
                for i in range(repeat):
                    admin.create_topic(f"{TARGET}-{i}", partitions, 1)
            if source == "files":
                _parquet(spark, os.path.join(tmp, "warmup"), 20 * batch_records, value_bytes, partitions)
                total = _parquet(spark, os.path.join(tmp, SOURCE), records, value_bytes, partitions)
            else:
                fill_topic(zk, "warmup", 20 * batch_records, value_bytes, partitions, batch_records)
                total = fill_topic(zk, SOURCE, records, value_bytes, partitions, batch_records)

            def copy(name: str, target: str, checkpoint: str) -> Any:
                if source == "files":
                    path = os.path.join(tmp, name)
                    rows = spark.readStream.format("parquet").schema(spark.read.parquet(path).schema).load(path)
                else:
                    rows = _topic_stream(spark, zk, name).load().select("value")
                return (
                    rows.writeStream.format("sparklog")
                    .option("zookeeper", zk)
                    .option("topic", target)
                    .option("checkpointLocation", checkpoint)
                    .trigger(availableNow=True)
                )

            _run(copy("warmup", "warmup-out", os.path.join(tmp, "ckpt-warmup")))
            commit_ms = []
            for i in range(repeat):
                took, query = _run(copy(SOURCE, f"{TARGET}-{i}", os.path.join(tmp, f"ckpt-{i}")))
                times.append(took)
                commit_ms.append(sum(p["durationMs"].get("addBatch", 0) for p in query.recentProgress))
                client = connections.cluster_client(zk)
                written = sum(client.list_offsets(f"{TARGET}-{i}", p)["high_watermark"] for p in range(partitions))
                if written != total:
                    raise AssertionError(f"the sink wrote {written} rows for {total}")
        finally:
            connections.close_all()
            cluster.stop()
            if own:
                spark.stop()
    best = min(times)
    return {
        "scenario": "spark-write",
        "source": source,
        "records": total,
        "value_bytes": value_bytes,
        "partitions": partitions,
        "cores": cores,
        "seconds": round(best, 3),
        "seconds_all": [round(t, 3) for t in times],
        "add_batch_ms": commit_ms,
        "rows_per_s": round(total / best),
        "records_per_s": round(total / best),
        "mb_per_s": round(total * value_bytes / best / 1e6, 1),
    }
