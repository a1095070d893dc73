"""The broker's side of typed topics: produced values brought to the latest schema version, and
stored batches served to consumers in the latest version, projected to the fields they asked for
(only those columns' buffers go over the wire)."""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

from sparklog.errors import InvalidRequest
from sparklog.records import schema_version, versioned_schema
from sparklog.schemas.evolution import evolve
from sparklog.schemas.projection import project, projected_type
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


def consumer_schema(schemas: Sequence[ValueSchema], fields: Sequence[str] | None) -> pa.Schema:
    """The schema of what a consumer of a typed topic receives."""
    latest = schemas[-1]
    value_type = projected_type(latest.arrow_type, fields) if fields else latest.arrow_type
    return versioned_schema(value_type, latest.version)


def for_consumer(
    batch: pa.RecordBatch, schemas: Sequence[ValueSchema], fields: Sequence[str] | None, target: pa.Schema
) -> pa.RecordBatch:
    """A stored batch of any version as the consumer sees it: latest version, projected."""
    latest = schemas[-1]
    value = batch.column(batch.schema.get_field_index("value"))
    written = schema_version(batch.schema)
    if written is not None and written != latest.version:
        value = evolve(value, _version(schemas, written), latest)
    if fields:
        value = project(value, fields)
    return pa.RecordBatch.from_arrays([*batch.columns[:3], value, batch.column(4)], schema=target)
