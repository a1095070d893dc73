"""Reading a topic partition's offset range into Spark: the input partition, the fetch loop and the
Arrow conversion (shared by batch and streaming reads), and the batch reader.

``read()`` runs in executor workers: everything it needs travels in the picklable
:class:`OffsetRangePartition` (connect string, range, leader location, flags). It fetches stored
batches from the partition's leader over Arrow Flight and yields ``pyarrow.RecordBatch`` es already
in Spark's Arrow schema (``to_arrow_schema(schema, timezone="UTC")``): columns are converted whole with
pyarrow (timestamp ms -> us, constant ``topic``/``partition``/``timestampType`` columns, headers
dropped unless asked for), never row by row in Python.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from sparklog.client.cluster_address import ClusterAddress
from sparklog.datasource import connections, offsets, typed
from sparklog.datasource.options import ReadOptions, check_batch_read
from sparklog.errors import InvalidRequest, OffsetOutOfRange, SparklogError
from sparklog.records import offsets_of

log = logging.getLogger("sparklog.datasource")

FETCH_MAX_BYTES = 16 << 20
YIELD_ROWS = 10_000  # small stored batches are combined up to this many rows for Spark; larger ones pass uncopied
RETRY_BACKOFF_S = 0.1
# Kafka's timestampType column: a topic's message.timestamp.type
TIMESTAMP_TYPES = {"CreateTime": 0, "LogAppendTime": 1}


def spark_schema(include_headers: bool, value_type: DataType | None = None) -> StructType:
    """The schema of a sparklog read (Kafka source's columns, in its order); ``value`` is binary, or
    a struct for typed topics (:mod:`sparklog.datasource.typed`)."""
    fields = [
        StructField("key", BinaryType()),
        StructField("value", value_type or BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        header = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
        fields.append(StructField("headers", ArrayType(header)))
    return StructType(fields)


def read_schema(options: ReadOptions) -> StructType:
    """What a read with ``options`` declares (``DataSource.schema()``): a typed topic's ``value``
    struct comes from the cluster's metadata (:func:`sparklog.datasource.typed.value_type_for`)."""
    return spark_schema(options.include_headers, typed.value_type_for(options))


def arrow_schema(schema: StructType) -> pa.Schema:
    """Exactly the Arrow schema Spark checks the first yielded batch against."""
    return to_arrow_schema(schema, timezone="UTC")


def check_schema(options: ReadOptions, schema: StructType) -> pa.Schema:
    """The schema Spark asks a reader for must be sparklog's (any value type: it was chosen at
    load()); its Arrow form, which every yielded batch has."""
    value = next((f.dataType for f in schema.fields if f.name == "value"), None)
    expected = spark_schema(options.include_headers, value)
    if value is None or schema != expected:
        raise InvalidRequest(
            f"sparklog has a fixed schema {expected.simpleString()}; do not pass another with .schema() "
            f"(got {schema.simpleString()})"
        )
    return arrow_schema(schema)


@dataclasses.dataclass
class OffsetRangePartition(InputPartition):
    """One input partition: offsets ``[start, end)`` of one topic partition, and how to hand them to
    Spark (its Arrow schema, the value fields to fetch)."""

    address: ClusterAddress
    topic: str
    partition: int
    start: int
    end: int
    leader: str | None
    schema: pa.Schema
    fields: tuple[str, ...] | None
    fail_on_data_loss: bool
    timestamp_type: int = 0  # 0 CreateTime, 1 LogAppendTime (the topic's message.timestamp.type)
    poll_timeout_ms: int = 120_000  # kafkaConsumer.pollTimeoutMs: how long a fetch may keep failing


@dataclasses.dataclass
class OffsetRangeGroup(InputPartition):
    """Several offset ranges read one after the other by one task (``maxPartitions``)."""

    parts: tuple[OffsetRangePartition, ...]


def plan_partitions(
    options: ReadOptions, schema: pa.Schema, client: Any, begin: offsets.Offsets, end: offsets.Offsets
) -> list[OffsetRangePartition | OffsetRangeGroup]:
    """The input partitions reading ``[begin, end)`` of each topic partition: one offset range
    each (split by ``minPartitions`` / ``maxRecordsPerPartition``), or groups of ranges when
    there are more than ``maxPartitions``."""
    ranges = [offsets.Range(t, p, begin[(t, p)], end[(t, p)]) for (t, p) in sorted(end) if (t, p) in begin]
    ranges = offsets.split_ranges(ranges, options.min_partitions, options.max_records_per_partition)
    parts = _range_partitions(options, schema, client, ranges)
    groups = offsets.pack_ranges(ranges, options.max_partitions)
    if len(groups) == len(ranges):
        return list(parts.values())
    return [OffsetRangeGroup(tuple(parts[r] for r in group)) for group in groups]


def _range_partitions(
    options: ReadOptions, schema: pa.Schema, client: Any, ranges: list[offsets.Range]
) -> dict[offsets.Range, OffsetRangePartition]:
    leaders: dict[tuple[str, int], str | None] = {}
    timestamp_types: dict[str, int] = {}
    for r in ranges:
        tp = (r.topic, r.partition)
        if tp not in leaders:
            leaders[tp] = connections.leader_location(client, r.topic, r.partition)
        if r.topic not in timestamp_types:
            timestamp_types[r.topic] = TIMESTAMP_TYPES[client.topic(r.topic).config.message_timestamp_type]
    return {
        r: OffsetRangePartition(
            options.address,
            r.topic,
            r.partition,
            r.start,
            r.end,
            leaders[(r.topic, r.partition)],
            schema,
            options.fields,
            options.fail_on_data_loss,
            timestamp_types[r.topic],
            options.poll_timeout_ms,
        )
        for r in ranges
    }


# ----------------------------------------------------------------------------------------- conversion
class _Converter:
    """Fetched batches (offset, timestamp ms, key, value, headers) -> Spark's Arrow schema."""

    def __init__(self, topic: str, partition: int, schema: pa.Schema, timestamp_type: int = 0) -> None:
        self.schema = schema
        self.where = f"{topic}-{partition}"
        self.include_headers = "headers" in schema.names
        self.topic_bytes = topic.encode()
        self.partition = partition
        self.timestamp_type = timestamp_type
        self.ts_type = schema.field("timestamp").type
        self.value_type = schema.field("value").type
        self.headers_type = schema.field("headers").type if self.include_headers else None
        self._constant: dict[int, tuple[pa.Array, pa.Array]] = {}

    def _constants(self, n: int) -> tuple[pa.Array, pa.Array, pa.Array]:
        cached = self._constant.get(n)
        if cached is None:
            width = len(self.topic_bytes)
            offsets = np.arange(0, (n + 1) * width, width, dtype=np.int32) if width else np.zeros(n + 1, np.int32)
            topic = pa.Array.from_buffers(
                pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(self.topic_bytes * n)]
            )
            part = pa.Array.from_buffers(
                pa.int32(), n, [None, pa.py_buffer(np.full(n, self.partition, dtype=np.int32))]
            )
            kind = pa.Array.from_buffers(
                pa.int32(), n, [None, pa.py_buffer(np.full(n, self.timestamp_type, dtype=np.int32))]
            )
            cached = (topic, part, kind)
            if len(self._constant) < 8:
                self._constant[n] = cached
        return cached

    def convert(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        topic, part, kind = self._constants(batch.num_rows)
        value = batch.column(3)
        if not value.type.equals(self.value_type):
            value = typed.to_spark_values(value, self.value_type, self.where)
        columns = [
            batch.column(2),
            value,
            topic,
            part,
            batch.column(0),
            batch.column(1).cast(self.ts_type),
            kind,
        ]
        if self.include_headers:
            columns.append(batch.column(4).cast(self.headers_type))
        return pa.RecordBatch.from_arrays(columns, schema=self.schema)


def _combine(pending: list[pa.RecordBatch]) -> pa.RecordBatch:
    return pending[0] if len(pending) == 1 else pa.concat_batches(pending)


# ----------------------------------------------------------------------------------------- reading
def read_partition(part: InputPartition) -> Iterator[pa.RecordBatch]:
    """An input partition's records: its range's, or each range's of a group in turn."""
    if isinstance(part, OffsetRangeGroup):
        for member in part.parts:
            yield from read_range(member)
    else:
        yield from read_range(part)  # type: ignore[arg-type]


def read_range(part: OffsetRangePartition) -> Iterator[pa.RecordBatch]:
    """Every record of ``[part.start, part.end)`` in offset order, as Spark-schema Arrow batches."""
    if not isinstance(part, OffsetRangePartition) or part.end <= part.start:
        return
    convert = _Converter(part.topic, part.partition, part.schema, part.timestamp_type).convert
    offset, end = part.start, part.end
    pending: list[pa.RecordBatch] = []
    pending_rows = 0
    failing_since: float | None = None  # when the current run of failed fetches began
    where = f"{part.topic}-{part.partition}"
    while offset < end:
        progressed = False
        try:
            deadline = (time.monotonic() if failing_since is None else failing_since) + part.poll_timeout_ms / 1000
            for stored in connections.fetch(
                part.address,
                part.topic,
                part.partition,
                offset,
                FETCH_MAX_BYTES,
                part.leader,
                part.fields,
                deadline=deadline,
            ):
                if stored.num_rows == 0:
                    continue
                offs = offsets_of(stored)
                lo = int(np.searchsorted(offs, offset, side="left"))
                hi = int(np.searchsorted(offs, end, side="left"))
                if hi > lo:
                    piece = stored if (lo == 0 and hi == stored.num_rows) else stored.slice(lo, hi - lo)
                    pending.append(piece)
                    pending_rows += piece.num_rows
                    if pending_rows >= YIELD_ROWS:
                        yield convert(_combine(pending))
                        pending, pending_rows = [], 0
                last = int(offs[-1])
                if last + 1 > offset:
                    offset = last + 1
                    progressed = True
                if offset >= end:
                    break
            failing_since = None
        except OffsetOutOfRange:
            offset = _after_lost(part, offset, where)
            continue
        except SparklogError as exc:
            now = time.monotonic()
            failing_since = now if failing_since is None else failing_since
            if not exc.retriable:
                raise
            if now + RETRY_BACKOFF_S - failing_since > part.poll_timeout_ms / 1000:
                raise type(exc)(
                    f"sparklog: failed to get records for {where} at offset {offset} after polling for "
                    f"{part.poll_timeout_ms} ms (kafkaConsumer.pollTimeoutMs): {exc}"
                ) from exc
            log.info("sparklog read of %s interrupted at offset %d (%s); resuming", where, offset, exc)
            part = dataclasses.replace(part, leader=None)
            time.sleep(RETRY_BACKOFF_S)
            continue
        if not progressed and offset < end:
            offset = _after_lost(part, offset, where)
    if pending:
        yield convert(_combine(pending))


def _after_lost(part: OffsetRangePartition, offset: int, where: str) -> int:
    """Nothing could be read at ``offset`` although the range goes on to ``part.end``: retention
    deleted it (the log start moved past it) or the log was truncated below it. Fail or, with
    failOnDataLoss=false, say so and return where reading goes on (``part.end`` to stop)."""
    client = connections.cluster_client(part.address)
    info = client.list_offsets(part.topic, part.partition)
    log_start, hw = int(info["log_start_offset"]), int(info["high_watermark"])
    if offset < log_start:
        last = min(log_start, part.end) - 1
        message = f"sparklog: {where} offsets {offset}..{last} were deleted by retention before they were read"
        resume = min(log_start, part.end)
    elif hw <= offset:
        message = f"sparklog: {where} offsets {offset}..{part.end - 1} are gone (the log now ends at {hw})"
        resume = part.end
    else:
        # the broker had nothing at an offset inside the log: a compaction gap right at the end of
        # what was fetched; move on past it
        return offset + 1 if offset + 1 < part.end else part.end
    if part.fail_on_data_loss:
        raise OffsetOutOfRange(message + "; set failOnDataLoss=false to skip lost records")
    log.warning("%s; skipping them (failOnDataLoss=false)", message)
    return resume


# ----------------------------------------------------------------------------------------- batch reader
class SparklogBatchReader(DataSourceReader):
    """``spark.read.format("sparklog")``: offsets resolved when Spark plans the read."""

    def __init__(self, options: ReadOptions, schema: StructType) -> None:
        check_batch_read(options)
        self.schema = check_schema(options, schema)
        self.options = options

    def partitions(self) -> list[InputPartition]:
        options = self.options
        client = connections.cluster_client(options.address)
        tps = offsets.discover(client, options.subscription, require_topics=True)
        listed = offsets.list_offsets(client, options, tps)
        begin = offsets.starting_offsets(client, options, listed, streaming=False)
        begin = offsets.check_data_loss(begin, listed, options.fail_on_data_loss)
        end = offsets.ending_offsets(client, options, listed)
        for tp in tps:
            if end[tp] < begin[tp]:
                if options.ending == "json" and options.starting in ("json", "timestamp"):
                    raise InvalidRequest(
                        f"sparklog options: {offsets.describe(tp)} would end at {end[tp]} "
                        f"before it starts at {begin[tp]}"
                    )
                end[tp] = begin[tp]
        return list(plan_partitions(options, self.schema, client, begin, end))

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(partition)
