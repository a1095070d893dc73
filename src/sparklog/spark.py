"""A whole topic as one Spark DataFrame, its history read by Spark's own Parquet reader from its Delta table (issue 19).

```python
from sparklog.spark import read_topic
df = read_topic(spark, "events", zookeeper="127.0.0.1:2181", includeHeaders="true")
```

For a topic with ``lake.enabled``, each partition with rows in the table (its lake offset, from its
leader, above 0) is read up to its **boundary** from the topic's Delta table, and from the boundary
on through the ``sparklog`` source (``startingOffsets`` per partition = the boundary,
``endingOffsets`` = the high watermarks when ``read_topic`` is called, so the DataFrame reads the
same records each time it runs); the two are one ``unionByName``. When the table holds every
record (a quiet lake-enabled topic: its tierer closes a segment ``segment.ms`` old), there is no
``sparklog`` source in the plan at all. The boundaries come from one snapshot
of the table read on the driver with ``deltalake`` (:mod:`sparklog.lake.snapshot`): a partition's
end in it (the offset the tierer committed with its rows; at or past the lake offset, since a
tierer commits to Delta before ZooKeeper). Where Spark's plain Parquet reader reads the table
exactly as Delta would (reader version 1, ``partition=<p>/`` directories: the tierer's tables),
Spark reads **that snapshot's files** with the table's schema, and every row of them is below its
partition's end: no row filter and no Delta log replay in the JVM. Otherwise (a table another
writer gave reader features, or one ``deltalake`` cannot open here) it is
``spark.read.format("delta")`` with ``offset < boundary`` per partition, the boundary being the
lake offset. Either way: no gap (every offset below the boundary is in the table; offsets from it
that local retention deletes meanwhile are served from the table by the broker's union read) and
no duplicate. Columns and types are the ``sparklog``
read schema's (``key``, ``value``, ``topic``, ``partition``, ``offset``, ``timestamp`` and, with
``includeHeaders``, ``headers``; a union's nullability is the wider of its two parts'); a typed
topic's value struct in its latest schema version, made of the table's value columns (matched by
name; the tierer keeps the table in the topic's latest version, so added fields carry their Avro
defaults; a field the table lacks, while the tierer has not caught up with a version, is null).

The table is located by the leaders' ``list_offsets`` answer (``lake_table``: the broker's
``--lake-dir`` + ``/<topic>``) or by ``lake_dir=`` (needed when Spark sees the lake under another
path or URI than the brokers). A topic without ``lake.enabled`` (or with nothing tiered yet) is
read through the ``sparklog`` source alone. The Spark session needs Delta Lake only for the
fallback (:func:`sparklog.spark_session.local_spark` configures it).
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Mapping
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.types import ArrayType, DataType, MapType, StructField, StructType

from sparklog.datasource import connections
from sparklog.datasource.offsets import discover
from sparklog.datasource.options import check_known, parse_read_options
from sparklog.datasource.reader import TIMESTAMP_TYPES, read_schema
from sparklog.errors import InvalidRequest
from sparklog.lake.layout import table_uri
from sparklog.lake.snapshot import LakeSnapshot, read_snapshot
from sparklog.names import check_topic_name

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


@dataclasses.dataclass(frozen=True)
class _Planned:
    """What ``read_topic`` learns of the topic when called, from its leaders (``list_offsets``)."""

    lake_offsets: dict[int, int]  # each partition's lake offset (0 where nothing is tiered)
    earliest: dict[int, int]  # each partition's earliest offset (in the table once it holds the oldest)
    latest: dict[int, int]  # each partition's high watermark: where the read ends
    table: str | None  # the table's URI as the brokers name it (None: not lake-enabled, or no lake dir)
    timestamp_type: int  # the topic's message.timestamp.type, as the source's column has it
    schema: StructType  # the sparklog source's read schema for these options


def _plan(options: Mapping[str, str], topic: str) -> _Planned:
    """The topic's offsets and table, and the read's schema (what the ``sparklog`` source would
    declare, computed here: a read all in the table needs no source)."""
    check_known(options)
    read = parse_read_options({**options, "subscribe": topic})
    client = connections.cluster_client(read.address)
    tps = discover(client, read.subscription, require_topics=True)
    listed = client.list_offsets_many(tps)
    lake_offsets: dict[int, int] = {}
    uri: str | None = None
    for (_, p), info in listed.items():
        lake = info.get("lake_offset")  # absent: not lake-enabled; None: not known yet
        lake_offsets[p] = int(lake) if lake is not None else 0
        uri = uri or info.get("lake_table")
    return _Planned(
        lake_offsets,
        {p: int(info["log_start_offset"]) for (_, p), info in listed.items()},
        {p: int(info["high_watermark"]) for (_, p), info in listed.items()},
        uri,
        TIMESTAMP_TYPES[client.topic(topic).config.message_timestamp_type],
        read_schema(read),
    )


def _value(target: Any, table: StructType) -> Column:
    """The table's value as the sparklog read's value type: a plain topic's ``value`` column; a
    typed topic's value columns as the struct (fields matched by name, a field the table lacks is
    null, a row whose value columns are all null is a null value, as the broker's union read)."""
    if not isinstance(target, StructType):
        return F.expr(f"CAST(`value` AS {target.simpleString()})")
    have = set(table.fieldNames())
    present = [F.col(f"`{f.name}`") for f in target.fields if f.name in have]
    # cast to the field's type with nullable elements: a Parquet read (Spark makes its columns
    # nullable, nested ones too) cannot be cast to non-null ones; the union is as wide anyway
    fields = [
        (F.col(f"`{f.name}`") if f.name in have else F.lit(None)).cast(_nullable(f.dataType)).alias(f.name)
        for f in target.fields
    ]
    tombstone = functools.reduce(lambda a, b: a & b, [c.isNull() for c in present], F.lit(True))
    return F.when(tombstone, F.lit(None).cast(_nullable(target))).otherwise(F.struct(*fields))


def _nullable(data_type: DataType) -> DataType:
    """``data_type`` with every nested field, array element and map value nullable."""
    if isinstance(data_type, StructType):
        return StructType([StructField(f.name, _nullable(f.dataType), True) for f in data_type.fields])
    if isinstance(data_type, ArrayType):
        return ArrayType(_nullable(data_type.elementType), True)
    if isinstance(data_type, MapType):
        return MapType(_nullable(data_type.keyType), _nullable(data_type.valueType), True)
    return data_type


def _default_parallelism(spark: SparkSession) -> int | None:
    """The session's default parallelism (None where it has no SparkContext: Spark Connect)."""
    try:
        return int(spark.sparkContext.defaultParallelism)
    except Exception:  # Spark Connect sessions have no sparkContext
        return None


def read_topic(spark: SparkSession, topic: str, *, lake_dir: str | None = None, **options: Any) -> DataFrame:
    """The whole of ``topic`` (earliest offset to the high watermarks when called) as one DataFrame:
    the lake-enabled history through Spark's Parquet (or Delta) reader, the rest through the
    ``sparklog`` source. ``options``: the ``sparklog`` read options (``zookeeper`` /
    ``bootstrap.servers``, security, ``includeHeaders``, ``minPartitions``, ``maxPartitions``,
    ``failOnDataLoss``); not the ones choosing topics or offsets. Without ``minPartitions``,
    ``maxPartitions`` or ``maxRecordsPerPartition``, the source's part has ``maxPartitions`` = the
    session's default parallelism."""
    opts = {key: str(value) for key, value in options.items()}
    chosen = sorted(k for k in opts if k.lower() in CHOSEN_OPTIONS)
    if chosen:
        raise InvalidRequest(f"read_topic reads the whole topic: option(s) {', '.join(chosen)} cannot be set")
    check_topic_name(topic)
    planned = _plan(opts, topic)
    uri = planned.table if lake_dir is None else table_uri(lake_dir, topic)
    lake_parts = {p: b for p, b in planned.lake_offsets.items() if b > 0}
    table = None
    if uri is not None and lake_parts:
        snapshot = read_snapshot(uri, topic, lake_parts)
        if snapshot is not None and all(snapshot.ends.get(p, -1) >= b for p, b in lake_parts.items()):
            # the table's own ends: at or past the lake offsets (a tierer commits to Delta first)
            lake_parts = {p: snapshot.ends[p] for p in lake_parts}
        else:
            snapshot = None  # read through Delta's reader, up to the lake offsets
        table = _lake_table(spark, uri, snapshot, lake_parts)
    if table is None:  # the sparklog source alone, from the earliest offsets (-2, when read)
        return _log_part(spark, topic, opts, {p: -2 for p in sorted(planned.latest)}, planned.latest)
    # the log from each boundary (-2: the earliest offset) to the high watermark when called
    starting = {p: lake_parts.get(p, -2) for p in sorted(planned.latest)}
    ending = {p: max(latest, lake_parts.get(p, 0)) for p, latest in planned.latest.items()}
    history = _history(table, planned.schema, topic, planned.timestamp_type)
    if all(ending[p] <= lake_parts.get(p, earliest) for p, earliest in planned.earliest.items()):
        return history  # every record is in the table: no sparklog source
    return history.unionByName(_log_part(spark, topic, opts, starting, ending))


def _lake_table(
    spark: SparkSession, uri: str, snapshot: LakeSnapshot | None, parts: Mapping[int, int]
) -> DataFrame | None:
    """The table's rows of ``parts`` below their boundaries (None: the snapshot has no file of
    them). Spark's Parquet reader on exactly the snapshot's files, with no row filter (a
    partition's rows in it are its offsets below its end, no Delta log replay in the JVM), where
    it reads them as Delta would (:mod:`sparklog.lake.snapshot`) and lists them on the driver: no
    more than ``spark.sql.sources.parallelPartitionDiscovery.threshold`` files (above it Spark
    lists them in a job of its own, which costs more than Delta's reader, which takes them from
    its log). Otherwise Delta's reader, filtered to the boundaries."""
    root = uri.rstrip("/")
    if snapshot is not None and snapshot.files is not None:
        paths = [f"{root}/{path}" for p in sorted(parts) for path in snapshot.files.get(p, ())]
        threshold = spark.conf.get("spark.sql.sources.parallelPartitionDiscovery.threshold", "32")
        if not paths:
            return None
        if len(paths) <= int(threshold or 32):
            return spark.read.schema(from_arrow_schema(snapshot.schema)).option("basePath", root).parquet(*paths)
    wanted = " OR ".join(f"(`partition` = {p} AND `offset` < {b})" for p, b in sorted(parts.items()))
    return spark.read.format("delta").load(uri).where(wanted)


def _log_part(
    spark: SparkSession, topic: str, opts: dict[str, str], starting: dict[int, int], ending: dict[int, int]
) -> DataFrame:
    """The ``sparklog`` source's read of ``topic`` from ``starting`` (-2: earliest) to ``ending``."""
    given = {k.lower() for k in opts}
    parallelism = _default_parallelism(spark)
    if parallelism and not given & {"minpartitions", "maxpartitions", "maxrecordsperpartition"}:
        # as many tasks as the session runs at once: a task per partition would cost a Python
        # worker round each, for a tail of a few records per partition
        opts = {**opts, "maxPartitions": str(parallelism)}
    return (
        spark.read.format("sparklog")
        .options(**opts)
        .option("subscribe", topic)
        .option("startingOffsets", json.dumps({topic: {str(p): o for p, o in starting.items()}}))
        .option("endingOffsets", json.dumps({topic: {str(p): o for p, o in ending.items()}}))
        .load()
    )


def _history(table: DataFrame, schema: StructType, topic: str, timestamp_type: int) -> DataFrame:
    """The table's rows in the ``sparklog`` read's columns and types (``schema``). SQL expressions,
    not Column objects: one call into the JVM for each instead of several."""
    types = {f.name: f.dataType for f in schema.fields}

    def cast(column: str, expression: str | None = None) -> Column:
        return F.expr(f"CAST({expression or f'`{column}`'} AS {types[column].simpleString()}) AS `{column}`")

    columns = [
        cast("key"),
        _value(types["value"], table.schema).alias("value"),
        cast("topic", f"'{topic}'"),  # a checked topic name: letters, digits, '.', '_', '-'
        cast("partition"),
        cast("offset"),
        cast("timestamp"),
        cast("timestampType", str(timestamp_type)),
    ]
    if "headers" in types:
        columns.append(cast("headers"))
    return table.select(*columns)
