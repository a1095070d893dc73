"""The task side of the sink: each task attempt routes its rows to target partitions and stages
them, in slices, in a staging topic (:class:`Stager`), then reports where each slice landed in its
commit message (:class:`SparklogCommitMessage`), which the driver publishes
(:mod:`sparklog.datasource.publish`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import WriterCommitMessage

from sparklog.client.partitioner import partitions_for_keys
from sparklog.datasource import connections
from sparklog.datasource.fault_injection import first_to_claim
from sparklog.datasource.options import WriteOptions
from sparklog.datasource.sink_checks import partitions_of
from sparklog.datasource.staging_topics import ensure_staging_topic, typed_staging_topic
from sparklog.datasource.typed import sink_values
from sparklog.errors import InvalidRecord, SparklogError
from sparklog.records import to_record_batch
from sparklog.schemas.value_schema import ValueSchema

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
            n = partitions_of(self.client, topic)
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
    if marker and first_to_claim(marker, f"failed attempt {attempt}"):
        raise RuntimeError("sparklog test: injected task failure after staging a slice")


def stage_task(options: WriteOptions, iterator: Iterator[pa.RecordBatch], streaming: bool) -> SparklogCommitMessage:
    """A writer's ``write()``: stage this task's rows; the commit message carries the streaming
    query's id and batch id when Spark's task properties have them."""
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
