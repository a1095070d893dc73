"""The broker's side of typed topics: produced values brought to the latest schema version, and
stored batches served to consumers in the latest version, projected to the fields they asked for
(only those columns' buffers go over the wire). Kafka clients (the Kafka listener) write and read
a typed topic's values as Avro binary of its latest schema: :func:`from_avro` and :func:`to_avro`."""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

from sparklog.errors import InvalidRequest
from sparklog.records import schema_version, versioned_schema
from sparklog.schemas.evolution import evolve
from sparklog.schemas.projection import Projection
from sparklog.schemas.value_schema import ValueSchema


def _version(schemas: Sequence[ValueSchema], version: int) -> ValueSchema:
    for candidate in schemas:
        if candidate.version == version:
            return candidate
    raise InvalidRequest(f"unknown value schema version {version} (known: {[s.version for s in schemas]})")


def _with_value(batch: pa.RecordBatch, value: pa.Array) -> pa.RecordBatch:
    i = batch.schema.get_field_index("value")
    return batch.set_column(i, pa.field("value", value.type), value)


def conform_produced(
    batch: pa.RecordBatch, schemas: Sequence[ValueSchema], writer_version: int | None
) -> pa.RecordBatch:
    """A produced batch with its ``value`` column in the latest schema's Arrow type: evolved from the
    version the producer wrote with, or checked and cast (errors name the field and the row)."""
    latest = schemas[-1]
    if "value" not in batch.schema.names:
        return batch  # the log refuses it with a clear error
    value = batch.column(batch.schema.get_field_index("value"))
    if writer_version is not None and writer_version != latest.version:
        value = evolve(value, _version(schemas, writer_version), latest)
    elif value.type != latest.arrow_type:
        value = latest.conform(value)
    return _with_value(batch, value)


def from_avro(batch: pa.RecordBatch, schemas: Sequence[ValueSchema]) -> pa.RecordBatch:
    """A batch whose values are Avro binary (bare bodies, no framing) of the latest schema, with
    its values decoded to the latest schema's columns (InvalidRecord naming the row otherwise)."""
    latest = schemas[-1]
    value = batch.column(batch.schema.get_field_index("value"))
    return _with_value(batch, latest.decode(value, framing="schemaless"))


def to_avro(batch: pa.RecordBatch, schemas: Sequence[ValueSchema]) -> pa.RecordBatch:
    """A stored batch of any schema version with its values as Avro binary of the latest schema."""
    columns = ConsumerView(schemas, None).columns(batch)
    value = schemas[-1].encode(columns[3], framing="schemaless")
    names = batch.schema.names
    return pa.RecordBatch.from_arrays([*columns[:3], value, *columns[4:]], names=names)


class ConsumerView:
    """How a consumer of a typed topic sees stored batches of any schema version: in the latest
    version, projected to the fields it asked for. Worked out once per fetch (the projection is
    validated and compiled here), then applied to each stored batch."""

    def __init__(self, schemas: Sequence[ValueSchema], fields: Sequence[str] | None) -> None:
        self.schemas = schemas
        latest = schemas[-1]
        self.projection = Projection(latest.arrow_type, fields) if fields else None
        value_type = self.projection.type if self.projection is not None else latest.arrow_type
        self.schema = versioned_schema(value_type, latest.version)

    def columns(self, batch: pa.RecordBatch) -> list[pa.Array]:
        """The columns of a stored batch as the consumer sees them (the batch itself is built
        once, by the caller, with whatever else it changes)."""
        latest = self.schemas[-1]
        value = batch.column(3)  # the stored layout: offset, timestamp, key, value, headers
        written = schema_version(batch.schema)
        if written is not None and written != latest.version:
            value = evolve(value, _version(self.schemas, written), latest)
        if self.projection is not None:
            value = self.projection(value)
        return [*batch.columns[:3], value, batch.column(4)]
