"""A whole topic as one Spark DataFrame, its history read by Spark's own Delta reader (issue 19).

```python
from sparklog.spark import read_topic
df = read_topic(spark, "events", zookeeper="127.0.0.1:2181", includeHeaders="true")
```

For a topic with ``lake.enabled``, each partition's **boundary** is its lake offset when
``read_topic`` is called: the rows below it come from the topic's Delta table through
``spark.read.format("delta")`` (Spark's Parquet reader, partition pruning on ``partition``, Parquet
statistics on ``offset``), the rows from it on through the ``sparklog`` source
(``startingOffsets`` per partition = the boundary, ``endingOffsets=latest``), and the two are one
``unionByName``: no gap (every offset below the lake offset is in the table; offsets from it that
local retention deletes meanwhile are served from the table by the broker's union read) and no
duplicate (the Delta part keeps only ``offset < boundary``). Columns and types are the ``sparklog``
read schema's (``key``, ``value``, ``topic``, ``partition``, ``offset``, ``timestamp`` and, with
``includeHeaders``, ``headers``; a union's nullability is the wider of its two parts'); a typed
topic's value struct in its latest schema version, made of the table's value columns (matched by
name; the tierer keeps the table in the topic's latest version, so added fields carry their Avro
defaults; a field the table lacks, while the tierer has not caught up with a version, is null).

The table is located by the leaders' ``list_offsets`` answer (``lake_table``: the broker's
``--lake-dir`` + ``/<topic>``) or by ``lake_dir=`` (needed when Spark sees the lake under another
path or URI than the brokers). A topic without ``lake.enabled`` (or with nothing tiered yet) is
read through the ``sparklog`` source alone. The Spark session needs Delta Lake
(:func:`sparklog.spark_session.local_spark` configures it).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from sparklog.broker.lake.delta_table import table_uri
from sparklog.datasource import connections
from sparklog.datasource.offsets import discover
from sparklog.datasource.options import parse_read_options
from sparklog.datasource.reader import TIMESTAMP_TYPES
from sparklog.errors import InvalidRequest

# what read_topic chooses itself (the whole topic, earliest to latest)
CHOSEN_OPTIONS = frozenset(
    name.lower()
    for name in (
        "subscribe",
        "subscribePattern",
        "topic",
        "startingOffsets",
        "startingTimestamp",
        "endingOffsets",
        "endingTimestamp",
        "fields",
    )
)


def _boundaries(options: Mapping[str, str], topic: str) -> tuple[dict[int, int], str | None, int]:
    """Each partition's lake offset (0 where nothing is tiered), the table's URI as the brokers
    name it (None: not lake-enabled, or brokers without a lake dir), and the topic's
    ``timestampType`` (its ``message.timestamp.type``, as the source's column has it)."""
    read = parse_read_options({**options, "subscribe": topic})
    client = connections.cluster_client(read.address)
    tps = discover(client, read.subscription, require_topics=True)
    listed = client.list_offsets_many(tps)
    boundaries: dict[int, int] = {}
    uri: str | None = None
    for (_, p), info in listed.items():
        lake = info.get("lake_offset")  # absent: not lake-enabled; None: not known yet
        boundaries[p] = int(lake) if lake is not None else 0
        uri = uri or info.get("lake_table")
    return boundaries, uri, TIMESTAMP_TYPES[client.topic(topic).config.message_timestamp_type]


def _value(target: Any, table: StructType) -> Column:
    """The table's value as the sparklog read's value type: a plain topic's ``value`` column; a
    typed topic's value columns as the struct (fields matched by name, a field the table lacks is
    null, a row whose value columns are all null is a null value, as the broker's union read)."""
    if not isinstance(target, StructType):
        return F.col("value").cast(target)
    have = set(table.fieldNames())
    present = [F.col(f"`{f.name}`") for f in target.fields if f.name in have]
    fields = [
        (F.col(f"`{f.name}`") if f.name in have else F.lit(None)).cast(f.dataType).alias(f.name) for f in target.fields
    ]
    tombstone = functools.reduce(lambda a, b: a & b, [c.isNull() for c in present], F.lit(True))
    return F.when(tombstone, F.lit(None).cast(target)).otherwise(F.struct(*fields))


def _default_parallelism(spark: SparkSession) -> int | None:
    """The session's default parallelism (None where it has no SparkContext: Spark Connect)."""
    try:
        return int(spark.sparkContext.defaultParallelism)
    except Exception:  # Spark Connect sessions have no sparkContext
        return None


def read_topic(spark: SparkSession, topic: str, *, lake_dir: str | None = None, **options: Any) -> DataFrame:
    """The whole of ``topic`` (earliest offset to the high watermark at planning) as one DataFrame:
    the lake-enabled history through Spark's Delta reader, the rest through the ``sparklog``
    source. ``options``: the ``sparklog`` read options (``zookeeper`` / ``bootstrap.servers``,
    security, ``includeHeaders``, ``minPartitions``, ``maxPartitions``, ``failOnDataLoss``); not
    the ones choosing topics or offsets. Without ``minPartitions``, ``maxPartitions`` or
    ``maxRecordsPerPartition``, the source's part has ``maxPartitions`` = the session's default
    parallelism."""
    opts = {key: str(value) for key, value in options.items()}
    chosen = sorted(k for k in opts if k.lower() in CHOSEN_OPTIONS)
    if chosen:
        raise InvalidRequest(f"read_topic reads the whole topic: option(s) {', '.join(chosen)} cannot be set")
    boundaries, uri, timestamp_type = _boundaries(opts, topic)
    if lake_dir is not None:
        uri = table_uri(lake_dir, topic)
    lake_parts = {p: b for p, b in boundaries.items() if b > 0}
    if uri is None:
        lake_parts = {}
    starting = {topic: {str(p): lake_parts.get(p, -2) for p in sorted(boundaries)}}
    given = {k.lower() for k in opts}
    parallelism = _default_parallelism(spark)
    if parallelism and not given & {"minpartitions", "maxpartitions", "maxrecordsperpartition"}:
        # as many tasks as the session runs at once: a task per partition would cost a Python
        # worker round each, for a tail of a few records per partition
        opts["maxPartitions"] = str(parallelism)
    log = (
        spark.read.format("sparklog")
        .options(**opts)
        .option("subscribe", topic)
        .option("startingOffsets", json.dumps(starting))
        .option("endingOffsets", "latest")
        .load()
    )
    if not lake_parts:
        return log
    table = spark.read.format("delta").load(uri)
    wanted = F.lit(False)
    for p, boundary in sorted(lake_parts.items()):
        wanted = wanted | ((F.col("partition") == p) & (F.col("offset") < boundary))
    types = {f.name: f.dataType for f in log.schema.fields}
    columns = [
        F.col("key").cast(types["key"]).alias("key"),
        _value(types["value"], table.schema).alias("value"),
        F.lit(topic).cast(types["topic"]).alias("topic"),
        F.col("partition").cast(types["partition"]).alias("partition"),
        F.col("offset").cast(types["offset"]).alias("offset"),
        F.col("timestamp").cast(types["timestamp"]).alias("timestamp"),
        F.lit(timestamp_type).cast(types["timestampType"]).alias("timestampType"),
    ]
    if "headers" in types:
        columns.append(F.col("headers").cast(types["headers"]).alias("headers"))
    history = table.where(wanted).select(*columns)
    return history.unionByName(log)
