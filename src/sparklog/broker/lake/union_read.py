"""The broker's union read (issue 19): a consumer fetch of a lake-enabled partition at an offset
that local retention removed is answered from the topic's Delta table, then from the log.

A partition's lake history is readable when its lake offset reaches the local log start (every
offset from the table's first one up to the log is in the table): its **earliest** offset is then
the table's first offset of the partition (KIP-405's log start offset, which covers remote data;
the local log start offset stays separate). A fetch at an offset in ``[earliest, local log
start)`` gets the table's rows from that offset up to the local log start, about ``max_bytes``,
converted to the stored batch layout (``offset``, ``timestamp`` in ms, ``key``, ``value``,
``headers``; a typed topic's value columns as its value struct in its latest schema version,
evolved from the table's version with Avro defaults), each batch with a
synthetic :class:`BatchHeader`: the consumer's position then moves on exactly as after a log
read, and its next fetch reaches the log at the local log start. Anything below the earliest
offset, or a partition whose lake does not reach its log, is ``OFFSET_OUT_OF_RANGE`` as before.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from sparklog.broker.lake.lake_reader import LakeReader
from sparklog.broker.lake.rows import conformed, schema_of_version, value_struct
from sparklog.broker.log.batch_codec import BatchHeader
from sparklog.errors import LakeUnavailable
from sparklog.records import record_schema, schema_version, versioned_schema
from sparklog.schemas.evolution import evolve

if TYPE_CHECKING:
    from sparklog.broker.log.partition_log import PartitionLog
    from sparklog.broker.partition import Partition
    from sparklog.schemas.value_schema import ValueSchema

log = logging.getLogger(__name__)

Stored = list[tuple[pa.RecordBatch, BatchHeader]]
SchemasOf = Callable[[str], "Sequence[ValueSchema] | None"]


def as_stored(batch: pa.RecordBatch, schemas: Sequence[ValueSchema] = ()) -> tuple[pa.RecordBatch, BatchHeader]:
    """One batch of table rows in the stored layout, with a header describing it. ``schemas``: a
    typed topic's versions: its value columns become the value struct in the latest one, evolved
    (Avro defaults) from the version the batch's snapshot is in, or matched by name when that
    version is unknown here."""
    if schemas:
        latest = schemas[-1]
        schema = versioned_schema(latest.arrow_type, latest.version)
        written = schema_of_version(schemas, schema_version(batch.schema))
        if written is None:
            value = value_struct(batch, latest.arrow_type)
        else:
            value = evolve(value_struct(batch, written.arrow_type), written, latest)
        columns = [conformed(batch.column(f.name), f.type) for f in schema if f.name != "value"]
        columns.insert(schema.get_field_index("value"), value)
    else:
        schema = record_schema()
        columns = [conformed(batch.column(field.name), field.type) for field in schema]
    stored = pa.RecordBatch.from_arrays(columns, schema=schema)
    offsets = stored.column(0)
    bounds = pc.min_max(offsets)
    max_ts = pc.max(stored.column(1).cast(pa.int64())).as_py()
    header = BatchHeader(
        base_offset=bounds["min"].as_py(),
        last_offset=bounds["max"].as_py(),
        count=stored.num_rows,
        max_timestamp=-1 if max_ts is None else max_ts,
    )
    return stored, header


class UnionRead:
    """What a broker's consumer fetches read: the log, or the lake below the local log start."""

    def __init__(self, reader: LakeReader | None, schemas_of: SchemasOf) -> None:
        """``reader``: the broker's lake (None: no ``--lake-dir``, nothing is read from a table)."""
        self.reader = reader
        self.schemas_of = schemas_of

    def _lake_start(self, topic: str, partition: int, plog: PartitionLog) -> int | None:
        """The partition's first offset in the table when the table reaches the local log (else None)."""
        tiered = plog.tiered_offset
        start = plog.log_start_offset
        if self.reader is None or not plog.config.lake_enabled or tiered is None or tiered < start or start == 0:
            return None
        first = self.reader.first_offset(topic, partition, start)
        return first if first is not None and first < start else None

    def earliest(self, partition: Partition) -> int:
        """The partition's earliest readable offset (the table's first one when the lake reaches
        the log; the local log start while the table cannot be read, with a warning)."""
        plog = partition.log
        try:
            first = self._lake_start(partition.topic, partition.partition, plog)
        except LakeUnavailable as exc:
            log.warning("%s-%s: earliest offset from the local log: %s", partition.topic, partition.partition, exc)
            first = None
        return plog.log_start_offset if first is None else first

    def offset_for_time(self, partition: Partition, timestamp_ms: int) -> int | None:
        """The first offset whose timestamp is >= ``timestamp_ms``: in the table when the lake
        reaches the log and holds one, else in the local log (None: every record is older)."""
        plog = partition.log
        topic, p, start = partition.topic, partition.partition, plog.log_start_offset
        try:
            if self.reader is not None and self._lake_start(topic, p, plog) is not None:
                found = self.reader.offset_for_time(topic, p, timestamp_ms, start)
                if found is not None:
                    return found
        except LakeUnavailable as exc:
            log.warning("%s-%s: offset for a time from the local log only: %s", topic, p, exc)
        return plog.offset_for_time(timestamp_ms)

    def lake_table(self, topic: str) -> str | None:
        """The URI of a topic's table, if this broker has a lake."""
        return None if self.reader is None else self.reader.table_uri(topic)

    def read(self, partition: Partition, offset: int, max_bytes: int, upto: int | None) -> Stored:
        """A consumer fetch's stored batches at ``offset``: from the log (``PartitionLog.read_stored``),
        or, below the local log start of a lake-enabled partition, from its table (``[]`` while the
        table's snapshot does not reach the log yet, at most ``REFRESH_MIN_S``; offsets the table
        lacks below the log continue at the log, as a compaction gap)."""
        plog = partition.log
        start = plog.log_start_offset
        if offset >= start or self.reader is None:
            return plog.read_stored(offset, max_bytes, upto=upto)
        first = self._lake_start(partition.topic, partition.partition, plog)
        if first is None or offset < first:
            return plog.read_stored(offset, max_bytes, upto=upto)  # OffsetOutOfRange, as before
        end = start if upto is None else min(start, upto)
        batches = self.reader.read(partition.topic, partition.partition, offset, end, max_bytes)
        if batches is None:  # the table's snapshot does not reach the log yet: nothing this time
            return []
        if not batches:  # a gap in the table (never tiered): on at the log, as after compaction
            return plog.read_stored(start, max_bytes, upto=upto)
        schemas = self.schemas_of(partition.topic) or ()
        return [as_stored(batch, schemas) for batch in batches]


def from_lake(stored: Stored, offset: int, plog: PartitionLog) -> bool:
    """Whether a read at ``offset`` was answered from the table (it lies below the local log start)."""
    return bool(stored) and offset < plog.log_start_offset and stored[0][1].base_offset < plog.log_start_offset
