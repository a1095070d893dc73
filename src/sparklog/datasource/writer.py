"""The ``sparklog`` sink: ``df.write.format("sparklog")`` and ``df.writeStream.format("sparklog")``.

Input columns: ``value`` (required: binary or string for plain topics; for a typed topic a struct of
its schema's fields, as the sparklog source reads it, or Avro single-object encoded binary, see
:mod:`sparklog.datasource.typed`), optional ``key`` (binary or string),
``partition`` (int), ``headers`` (array<struct<key string, value binary>> or map<string, binary>),
``timestamp`` (timestamp or long ms), ``topic`` (string; used when the ``topic`` option is not
given, which overrides it as in Kafka's sink). Other columns (``offset``, ``timestampType`` as read
from a topic, anything else) are ignored, as Kafka's sink ignores them. Rows with a ``partition``
go there; keyed rows go to the partition the target topic's partitioner picks (``murmur2``, Kafka's,
or ``fnv1a`` for topics created before it; the option ``partitioner`` overrides, see
:mod:`sparklog.datasource.producer_settings` for it and Kafka's producer settings), so a key always
lands in the same partition, the one Kafka's producers put it in; rows without either are spread.

**Exactly-once.** Every row of a micro-batch ends up in its topic exactly once, across task
retries, speculative tasks, re-runs of a whole micro-batch and restarts of the query from its
checkpoint (Spark's Kafka sink is only at-least-once). How:

1. *Stage* (tasks, :class:`Stager`): each task appends its rows, grouped by target partition in
   slices of ``batchRecords`` rows, to a staging topic (``stagingTopic``, default
   ``__sparklog_staging``, created on first use with ``retention.ms`` of one hour; names starting
   ``__sparklog`` are reserved for sparklog, which alone creates them; a staging topic that exists
   already is refused, with the setting named, if its settings could lose staged rows:
   ``cleanup.policy`` other than delete, ``retention.ms`` under an hour, ``retention.bytes`` under
   1 GiB, ``LogAppendTime`` or unclean leader election), in a staging
   partition led by the same broker as the slice's target partition where there is one; its commit
   message lists where each slice landed (staging topic, partition and exact offsets) and which
   partition it is for. Nothing is visible in the target topic yet. A failed or duplicate task
   attempt leaves only unreferenced staged rows, which Spark never hands to the commit, and
   retention deletes.

   *Typed topics* stage their values already checked and converted (columnar, see
   :func:`sparklog.datasource.typed.sink_values`: a row that does not fit the schema fails the task,
   so nothing of the batch is published) into a typed staging topic per target schema version,
   ``<stagingTopic>.<topic>.v<version>.<hash>`` (created on first use with that version's schema as
   its only one, same retention; the hash of the schema text tells a re-created topic's schema
   apart). Its stored batches are then exactly the target's type, and publishing copies them
   unchanged, sent as that version of the target (the leader evolves them if the target has a newer
   one by then). Each staging topic has its own producers, so a target may take slices from two
   versions in one batch.
2. *Publish* (driver, ``commit(messages, batchId)``, :mod:`sparklog.datasource.publish`): first a
   *publish intent* for the batch (its slices per target partition, and where each producer's
   sequence numbers start) is stored in ZooKeeper at ``<root>/sinks/<query id>``; then every slice
   is copied from the staging topic to its partition through the broker's idempotent producer: the
   producer id is derived from (query id, topic, partition, staging partition, and the staging topic
   when it is a typed one) and each slice carries the sequence number the intent implies. When the
   staging partition and the target have the same leader, that broker copies the slices itself
   (the ``copy_records`` action, :mod:`sparklog.broker.record_copy`: the rows do not travel to the
   driver and back); otherwise the driver relays them. Either way the leader recognises a slice it
   already stored (a retry after a lost acknowledgement, a leader change, or a crash of the whole
   commit) and does not append it again. Finally the znode records the batch as published, with
   the next sequence numbers.
3. *Re-runs*: a batch whose znode says published is skipped (after a restart Spark re-runs the
   last batch when it had not recorded its commit itself); a batch found half-published is finished
   from the stored intent (the original staged rows, not the re-run's) with the same sequence
   numbers, so the slices already in the topic are recognised.

Order: rows a task writes to one partition keep their order; rows of different tasks interleave.
Limits: the guarantee covers the rows Spark hands to the sink for a batch id (a query restarted
from a *new* checkpoint is a new query, and a batch job run twice writes twice; a batch write is
exactly-once across its task retries). Finishing a half-published batch needs its staged rows
(kept an hour by default: restart within that, or stage in a topic of your own, ``stagingTopic``,
with a longer ``retention.ms``) and
the partitions' latest batches from this query (the broker recognises repeats by the producer state
it rebuilds from its log; if retention deleted them before the restart, the repeated slices would
be appended again). Every row is written twice (staging, then its topic): a micro-batch costs one
more pass over its data on the brokers than an at-least-once sink.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import os
import time
import uuid
from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from sparklog.client.cluster_address import ClusterAddress
from sparklog.client.cluster_client import ClusterClient
from sparklog.client.partitioner import partitions_for_keys
from sparklog.config import TopicConfig
from sparklog.coordination.cluster import TopicMetadata
from sparklog.datasource import connections
from sparklog.datasource.options import WriteOptions
from sparklog.datasource.typed import check_sink_value_type, sink_values
from sparklog.errors import InvalidRecord, InvalidRequest, PolicyViolation, SparklogError, TopicExists, UnknownTopic
from sparklog.names import is_internal
from sparklog.records import to_record_batch
from sparklog.schemas.value_schema import ValueSchema

log = logging.getLogger("sparklog.datasource")

STAGING_RETENTION_MS = 3600 * 1000
# staged rows keep the rows' own timestamps, whatever they are: the target topic judges them (its
# message.timestamp.*.max.ms) when the publish appends them there
STAGING_CONFIGS = {
    "retention.ms": str(STAGING_RETENTION_MS),
    "segment.ms": str(600 * 1000),
    "message.timestamp.after.max.ms": str((1 << 63) - 1),
}
STAGING_MIN_RETENTION_BYTES = 1 << 30
STAGING_CREATE_WAIT_S = 60.0  # how long a task waits for a staging topic another task is creating

# (target topic, target partition, staging partition, first staged offset, last staged offset, staging topic)
Slice = tuple[str, int, int, int, int, str]


@dataclasses.dataclass
class SparklogCommitMessage(WriterCommitMessage):
    """What one successful task attempt staged."""

    query_id: str | None
    batch_id: int | None
    task_partition: int
    attempt: int
    staging_topic: str
    slices: list[Slice]
    rows: int
    versions: dict[str, int] = dataclasses.field(default_factory=dict)  # typed staging topic -> target version


# ----------------------------------------------------------------------------------------- schema
def _is(dtype: DataType, *types: type) -> bool:
    return isinstance(dtype, types)


def check_input_schema(schema: StructType, options: WriteOptions) -> None:
    """Refuse (at save()/start()) inputs the sink cannot write, naming the column."""
    fields = {f.name.lower(): f for f in schema.fields}
    if options.topic is not None:
        fields.pop("topic", None)  # the option overrides the column, whatever its type (Kafka's rule)
    if "value" not in fields:
        raise InvalidRequest(
            "sparklog sink needs a 'value' column (binary or string, or a struct for a typed topic); the input "
            f"has {schema.simpleString()}"
        )
    checks = {
        "value": (BinaryType, StringType, StructType),
        "key": (BinaryType, StringType),
        "topic": (StringType,),
        "partition": (IntegerType, LongType, ShortType),
        "timestamp": (TimestampType, TimestampNTZType, LongType),
    }
    ignored = [f.name for name, f in fields.items() if name not in checks and name != "headers"]
    if ignored:
        log.info("sparklog sink: ignoring the input column(s) %s, as Kafka's sink does", ", ".join(ignored))
    for name, field in fields.items():
        if name == "headers":
            dtype = field.dataType
            ok = (
                _is(dtype, ArrayType)
                and _is(dtype.elementType, StructType)
                and [f.name for f in dtype.elementType.fields] == ["key", "value"]
                and _is(dtype.elementType.fields[0].dataType, StringType)
                and _is(dtype.elementType.fields[1].dataType, BinaryType, StringType)
            ) or (
                _is(dtype, MapType) and _is(dtype.keyType, StringType) and _is(dtype.valueType, BinaryType, StringType)
            )
            if not ok:
                raise InvalidRequest(
                    "sparklog sink column 'headers' must be array<struct<key:string,value:binary>> or "
                    f"map<string,binary>, got {dtype.simpleString()}"
                )
            continue
        if name not in checks:
            continue
        if not _is(field.dataType, *checks[name]):
            raise InvalidRequest(
                f"sparklog sink column {field.name!r} has type {field.dataType.simpleString()}; expected "
                + " or ".join(t.typeName() for t in checks[name])
            )
    if "topic" not in fields and options.topic is None:
        raise InvalidRequest("sparklog sink needs the option 'topic' or a 'topic' column")


# ----------------------------------------------------------------------------------------- staging
def staging_config_problem(config: TopicConfig) -> str | None:
    """What in a staging topic's settings could lose or alter staged rows before they are
    published (None if nothing): the sink refuses such a topic instead of staging in it."""
    if config.cleanup_policy != "delete":
        return f"cleanup.policy={config.cleanup_policy} (compaction drops staged rows that share a key); needs delete"
    if config.retention_ms != -1 and config.retention_ms < STAGING_RETENTION_MS:
        return (
            f"retention.ms={config.retention_ms} (staged rows could be deleted before they are published); "
            f"needs at least {STAGING_RETENTION_MS} or -1"
        )
    if config.retention_bytes != -1 and config.retention_bytes < STAGING_MIN_RETENTION_BYTES:
        return (
            f"retention.bytes={config.retention_bytes} (staged rows could be deleted before they are published); "
            f"needs at least {STAGING_MIN_RETENTION_BYTES} or -1"
        )
    if config.message_timestamp_type != "CreateTime":
        kind = config.message_timestamp_type
        return f"message.timestamp.type={kind} (staged rows would lose their timestamps); needs CreateTime"
    if config.unclean_leader_election_enable:
        return "unclean.leader.election.enable=true (an unclean election loses staged rows); needs false"
    return None


def check_staging_topic(meta: TopicMetadata) -> None:
    """Refuse (PolicyViolation naming the setting) a staging topic whose settings could lose or
    alter staged rows: someone else created it (before names starting ``__sparklog`` were
    reserved), or a user's own ``stagingTopic`` is set up for another purpose."""
    problem = staging_config_problem(meta.config)
    if problem is None:
        return
    whose = "sparklog's internal staging topic" if is_internal(meta.name) else "the staging topic"
    raise PolicyViolation(
        f"sparklog sink: {whose} {meta.name!r} has {problem}; nothing was written. Use another staging topic "
        "(option 'stagingTopic')" + ("" if is_internal(meta.name) else " or fix its configs")
    )


def ensure_staging_topic(client: ClusterClient, name: str, value_schema: ValueSchema | None = None) -> int:
    """The staging topic's partition count, creating the topic on first use (typed with
    ``value_schema`` as its only version, for a typed target) with the sink's settings; a topic
    that exists already must have settings that keep staged rows (:func:`check_staging_topic`).
    Names starting ``__sparklog`` are sparklog's internal topics: created through the internal path
    (users cannot create them)."""
    try:
        meta = client.topic(name, refresh=True)
    except UnknownTopic:
        brokers = len(client.view.brokers())
        try:
            meta = client.view.create_topic(
                name,
                max(4, 2 * brokers),
                min(3, max(1, brokers)),
                STAGING_CONFIGS,
                value_schema=None if value_schema is None else value_schema.json,
                internal=True,
            )
            log.info("sparklog: created the staging topic %s", name)
        except TopicExists:
            meta = _wait_for_topic(client, name)  # another task created it (or is creating it)
    check_staging_topic(meta)
    partitions = meta.partitions
    if value_schema is not None:
        staged = client.value_schema(name)
        if staged is None or not staged.same_as(value_schema):
            raise InvalidRequest(
                f"sparklog sink: the staging topic {name!r} does not have the value schema of {value_schema.label}; "
                "delete it (it only holds staged rows) and write again"
            )
    return partitions


def _wait_for_topic(client: ClusterClient, name: str) -> TopicMetadata:
    """A topic that exists or is being created (in chunks, by another task): its metadata once
    it is complete."""
    deadline = time.monotonic() + STAGING_CREATE_WAIT_S
    while True:
        try:
            return client.topic(name, refresh=True)
        except UnknownTopic:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def typed_staging_topic(staging: str, topic: str, schema: ValueSchema) -> str:
    """The staging topic of a typed target's schema version: ``<staging>.<topic>.v<version>.<hash>``."""
    digest = hashlib.sha256(schema.json.encode()).hexdigest()[:8]
    name = f"{staging}.{topic}.v{schema.version}.{digest}"
    # names were limited to 200 characters when this was written; the threshold stays so that the
    # staging topics of existing targets keep their names (the hashed form is well within today's 249)
    if len(name) > 200:
        name = f"{staging}.{hashlib.sha256(topic.encode()).hexdigest()[:16]}.v{schema.version}.{digest}"
    return name


_partition_counts: dict[tuple[ClusterAddress, str], int] = {}


def _partitions_of(client: ClusterClient, topic: str) -> int:
    """The partition count of a topic the sink may write (cached per process); refuses topics that
    do not exist."""
    key = (client.address, topic)
    n = _partition_counts.get(key)
    if n is None:
        try:
            n = client.topic(topic, refresh=True).partitions
        except UnknownTopic:
            raise UnknownTopic(f"sparklog sink: topic {topic!r} does not exist (create it first)") from None
        _partition_counts[key] = n
    return n


def check_existing_staging_topic(options: WriteOptions) -> None:
    """At save()/start(): a staging topic that exists must keep staged rows (fails the write at
    once, not in its tasks); one that does not exist yet is created by the first task."""
    client = connections.cluster_client(options.address)
    try:
        meta = client.topic(options.staging_topic, refresh=True)
    except UnknownTopic:
        return
    check_staging_topic(meta)


def check_target_topic(options: WriteOptions, schema: StructType) -> None:
    """At save()/start(): the ``topic`` option names a topic that exists and takes the input's
    ``value`` type (rows naming other topics in a ``topic`` column are checked when written)."""
    if options.topic is None:
        return
    client = connections.cluster_client(options.address)
    _partitions_of(client, options.topic)
    value = next(f for f in schema.fields if f.name.lower() == "value")
    check_sink_value_type(value.dataType, client.value_schema(options.topic), options.topic)


class Stager:
    """One task attempt's staging: routes rows to target partitions and appends them, in slices,
    to the staging topic (a typed target's values, checked against its schema, to the typed staging
    topic of its schema version)."""

    def __init__(self, options: WriteOptions, task_partition: int, attempt: int) -> None:
        self.options = options
        self.task_partition = task_partition
        self.attempt = attempt
        self.client = connections.cluster_client(options.address)
        # (staging topic, staging partition) -> this task's stream to it
        self.streams: dict[tuple[str, int], connections.PutStream] = {}
        self.staging_partitions: dict[str, int] = {}  # staging topic -> its partition count
        self.staging_types: dict[str, tuple[pa.DataType | None, int | None]] = {}  # value type, schema version
        self.placement: dict[tuple[str, str, int], int] = {}  # (staging, topic, partition) -> staging partition
        self.versions: dict[str, int] = {}  # typed staging topic -> the target's schema version
        # pending rows per (target topic, target partition, staging topic)
        self.pending: dict[tuple[str, int, str], list[pa.RecordBatch]] = {}
        self.pending_rows: dict[tuple[str, int, str], int] = {}
        self.slices: list[Slice] = []
        self.rows = 0
        self.sticky = task_partition

    # ------------------------------------------------------------------ routing
    def add(self, batch: pa.RecordBatch) -> None:
        if batch.num_rows == 0:
            return
        lower = {n.lower(): n for n in batch.schema.names}
        present = [c for c in ("key", "value", "timestamp", "headers") if c in lower]
        user = pa.RecordBatch.from_arrays([batch.column(lower[c]) for c in present], names=present)
        column = batch.column(lower["topic"]) if "topic" in lower and self.options.topic is None else None
        topics = self._topics(column, batch.num_rows)
        explicit = batch.column(lower["partition"]) if "partition" in lower else None
        for topic, rows in topics:
            if topic == self.options.staging_topic:
                raise InvalidRecord(f"sparklog sink: rows name the staging topic {topic!r} as their topic")
            subset = user if rows is None else user.take(pa.array(rows))
            part_col = None if explicit is None else (explicit if rows is None else explicit.take(pa.array(rows)))
            n = _partitions_of(self.client, topic)
            schema = self.client.value_schema(topic)
            staging = self._staging(topic, schema)
            records = self._records(topic, subset, schema)
            self.rows += records.num_rows
            targets = self._route(topic, n, records, part_col)
            for p in np.unique(targets):
                idx = np.nonzero(targets == p)[0]
                piece = records if len(idx) == records.num_rows else records.take(pa.array(idx))
                self._queue((topic, int(p), staging), piece)

    def _records(self, topic: str, rows: pa.RecordBatch, schema: ValueSchema | None) -> pa.RecordBatch:
        """The rows as stored records of ``topic`` (without offsets): values checked and converted."""
        i = rows.schema.get_field_index("value")
        lookup = None if schema is None else self.client.schema_lookup(topic)
        value = sink_values(rows.column(i), schema, topic, lookup)
        if value is not rows.column(i):
            rows = rows.set_column(i, pa.field("value", value.type), value)
        value_type = pa.binary() if schema is None else schema.arrow_type
        return to_record_batch(rows, value_type).drop_columns(["offset"])

    def _staging(self, topic: str, schema: ValueSchema | None) -> str:
        """The staging topic for ``topic``'s rows (created on first use)."""
        name = (
            self.options.staging_topic
            if schema is None
            else typed_staging_topic(self.options.staging_topic, topic, schema)
        )
        if name not in self.staging_partitions:
            partitions = ensure_staging_topic(self.client, name, schema)
            version = None
            if schema is not None:
                staged = self.client.value_schema(name)
                assert staged is not None and schema.version is not None
                version = staged.version
                self.versions[name] = schema.version
            self.staging_partitions[name] = partitions
            self.staging_types[name] = (None if schema is None else schema.arrow_type, version)
        return name

    def _stage_partition(self, staging: str, topic: str, partition: int) -> int:
        """Where this task stages rows for ``topic``-``partition``: a staging partition with the
        same leader, so that the publish step copies them on that broker (``copy_records``) instead
        of through the driver; chosen by the task's number among those, so tasks spread over them.
        Without one (or while leaders are unknown), the task's own (task number modulo partitions)."""
        key = (staging, topic, partition)
        chosen = self.placement.get(key)
        if chosen is None:
            partitions = self.staging_partitions[staging]
            try:
                leader = self.client.leader(topic, partition).broker_id
                led = [sp for sp in range(partitions) if self.client.leader(staging, sp).broker_id == leader]
            except SparklogError:
                led = []
            pool = led or list(range(partitions))
            chosen = self.placement[key] = pool[self.task_partition % len(pool)]
        return chosen

    def _stream(self, staging: str, stage_partition: int) -> connections.PutStream:
        """This task's stream to a staging partition (opened on first use)."""
        stream = self.streams.get((staging, stage_partition))
        if stream is None:
            value_type, version = self.staging_types[staging]
            stream = self.streams[(staging, stage_partition)] = connections.PutStream(
                self.client,
                staging,
                stage_partition,
                acks="all",
                window=8,
                value_type=value_type,
                schema_version=version,
            )
        return stream

    def _topics(self, column: pa.Array | None, n: int) -> list[tuple[str, np.ndarray | None]]:
        """The target topic of the rows: the ``topic`` option for all (it overrides the column, as
        in Kafka's sink), else each row's ``topic`` column, as (topic, its rows or None for all)."""
        if self.options.topic is not None:
            return [(self.options.topic, None)]
        assert column is not None
        if column.null_count:
            raise InvalidRecord(
                "sparklog sink: null topic present in the data; use the option 'topic' for setting a default topic"
            )
        encoded = column.dictionary_encode()
        names = encoded.dictionary.to_pylist()
        if len(names) == 1:
            return [(names[0], None)]
        codes = encoded.indices.to_numpy(zero_copy_only=False)
        return [(name, np.nonzero(codes == i)[0]) for i, name in enumerate(names)]

    def _route(self, topic: str, n: int, records: pa.RecordBatch, explicit: pa.Array | None) -> np.ndarray:
        rows = records.num_rows
        parts = np.full(rows, -1, dtype=np.int64)
        if explicit is not None:
            given = explicit.cast(pa.int64())
            values = np.asarray(pc.fill_null(given, -1).to_numpy(zero_copy_only=False), dtype=np.int64)
            bad = (values >= n) | (values < -1) | ((values == -1) & ~np.asarray(given.is_null()))
            if bad.any():
                raise InvalidRecord(
                    f"sparklog sink: topic {topic!r} has {n} partitions; a row asks for partition {int(values[bad][0])}"
                )
            parts[:] = values
        free = parts < 0
        if free.any():
            keys = records.column("key")
            if keys.null_count < rows:
                partitioner = self.options.partitioner or self.client.topic(topic).config.partitioner
                hashed = partitions_for_keys(keys, n, partitioner)
                keyed = free & ~np.asarray(keys.is_null().to_numpy(zero_copy_only=False))
                parts[keyed] = hashed[keyed]
                free &= ~keyed
            if free.any():  # unkeyed rows: sticky, one partition per input batch, rotating
                parts[free] = self.sticky % n
                self.sticky += 1
        return parts

    # ------------------------------------------------------------------ staging
    def _queue(self, target: tuple[str, int, str], piece: pa.RecordBatch) -> None:
        self.pending.setdefault(target, []).append(piece)
        self.pending_rows[target] = self.pending_rows.get(target, 0) + piece.num_rows
        if self.pending_rows[target] >= self.options.batch_records:
            self._flush(target, final=False)

    def _flush(self, target: tuple[str, int, str], final: bool) -> None:
        pieces = self.pending.pop(target, [])
        self.pending_rows.pop(target, None)
        if not pieces:
            return
        data = pieces[0] if len(pieces) == 1 else pa.concat_batches(pieces)
        size = self.options.batch_records
        start = 0
        while data.num_rows - start >= size or (final and start < data.num_rows):
            piece = data.slice(start, min(size, data.num_rows - start))
            self._stage(target, piece)
            start += piece.num_rows
        if start < data.num_rows:
            rest = data.slice(start)
            self.pending[target] = [rest]
            self.pending_rows[target] = rest.num_rows

    def _stage(self, target: tuple[str, int, str], piece: pa.RecordBatch) -> None:
        topic, partition, staging = target
        stage_partition = self._stage_partition(staging, topic, partition)
        for ack in self._stream(staging, stage_partition).submit(piece, tag=(*target, stage_partition)):
            self._staged(*ack)

    def _staged(self, tag: tuple[str, int, str, int], base: int, last: int, rows: int) -> None:
        if last - base + 1 != rows:
            raise InvalidRecord(f"sparklog staging stored {last - base + 1} rows for a slice of {rows}")
        topic, partition, staging, stage_partition = tag
        self.slices.append((topic, partition, stage_partition, base, last, staging))
        _maybe_fail_task(self.options, self.attempt)

    def finish(self, query_id: str | None, batch_id: int | None) -> SparklogCommitMessage:
        for target in sorted(self.pending):
            self._flush(target, final=True)
        for stream in self.streams.values():
            for ack in stream.flush():
                self._staged(*ack)
        self.close()
        return SparklogCommitMessage(
            query_id,
            batch_id,
            self.task_partition,
            self.attempt,
            self.options.staging_topic,
            self.slices,
            self.rows,
            dict(self.versions),
        )

    def close(self) -> None:
        for stream in self.streams.values():
            stream.close()


def _maybe_fail_task(options: WriteOptions, attempt: int) -> None:
    """Test-only fault injection (option sparklog.test.failTaskOnce=<marker file>): the first task
    attempt to get here, after staging a slice, fails once."""
    marker = options.test_fail_task_once
    if not marker:
        return
    try:
        fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return
    os.write(fd, f"failed attempt {attempt}\n".encode())
    os.close(fd)
    raise RuntimeError("sparklog test: injected task failure after staging a slice")


def _stage_task(options: WriteOptions, iterator: Iterator[pa.RecordBatch], streaming: bool) -> SparklogCommitMessage:
    from pyspark import TaskContext

    ctx = TaskContext.get()
    task_partition = ctx.partitionId() if ctx else 0
    attempt = ctx.attemptNumber() if ctx else 0
    query_id = batch_id = None
    if ctx is not None and streaming:
        query_id = ctx.getLocalProperty("sql.streaming.queryId")
        raw_batch = ctx.getLocalProperty("streaming.sql.batchId")
        batch_id = int(raw_batch) if raw_batch is not None else None
    stager = Stager(options, task_partition, attempt)
    try:
        for batch in iterator:
            stager.add(batch)
        return stager.finish(query_id, batch_id)
    except BaseException:
        stager.close()
        raise


# ----------------------------------------------------------------------------------------- writers
class SparklogBatchWriter(DataSourceArrowWriter):
    """``df.write.format("sparklog")``: staged by tasks, published once by ``commit``."""

    def __init__(self, options: WriteOptions, schema: StructType) -> None:
        check_input_schema(schema, options)
        check_target_topic(options, schema)
        check_existing_staging_topic(options)
        self.options = options
        self.sink_id = f"batch-{uuid.uuid4().hex}"  # this writer is pickled to tasks and to commit()

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SparklogCommitMessage:
        return _stage_task(self.options, iterator, streaming=False)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        from sparklog.datasource.publish import publish_batch

        publish_batch(self.options, self.sink_id, 0, _ours(messages), forget=True)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        log.info("sparklog: write %s aborted; its staged rows are left to retention", self.sink_id)


class SparklogStreamWriter(DataSourceStreamArrowWriter):
    """``df.writeStream.format("sparklog")``: exactly-once per micro-batch (see the module docs)."""

    def __init__(self, options: WriteOptions, schema: StructType) -> None:
        check_input_schema(schema, options)
        check_target_topic(options, schema)
        check_existing_staging_topic(options)
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SparklogCommitMessage:
        return _stage_task(self.options, iterator, streaming=True)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        from sparklog.datasource.publish import publish_batch

        ours = _ours(messages)
        sink_id = next((m.query_id for m in ours if m.query_id), None) or _query_id_from_checkpoint(
            self.options.checkpoint_location
        )
        if sink_id is None:
            if any(m.slices for m in ours):
                raise InvalidRequest("sparklog sink: cannot tell the streaming query's id; nothing was published")
            return
        publish_batch(self.options, sink_id, batchId, ours, forget=False)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        log.info("sparklog: micro-batch %s aborted; its staged rows are left to retention", batchId)


def _ours(messages: list[Any]) -> list[SparklogCommitMessage]:
    return [m for m in messages if isinstance(m, SparklogCommitMessage)]


def _query_id_from_checkpoint(location: str | None) -> str | None:
    """The query id Spark keeps in ``<checkpoint>/metadata`` (local file systems only)."""
    if not location:
        return None
    path = location[len("file:") :] if location.startswith("file:") else location
    try:
        import json

        with open(os.path.join(path, "metadata")) as f:
            return json.loads(f.readline()).get("id")
    except (OSError, ValueError):
        return None
