"""Typed topics: Avro value schemas, their Arrow mapping, versions in ZooKeeper, and conversions.

A typed topic declares an Avro **record** schema for its values; values are stored as an Arrow
struct column (mapping: :mod:`sparklog.schemas.avro_arrow`). Modules:

* :mod:`~sparklog.schemas.value_schema` — :class:`ValueSchema`: one parsed, mapped schema version.
* :mod:`~sparklog.schemas.avro_arrow` — :func:`avro_to_arrow`, the type mapping and its decisions.
* :mod:`~sparklog.schemas.compatibility` — :func:`check`, :func:`assert_compatible` (BACKWARD,
  FORWARD, FULL, NONE by Avro's resolution rules).
* :mod:`~sparklog.schemas.codec` — :func:`decode_avro`, :func:`encode_avro`: Avro payloads <-> struct
  columns (single-object framing, fingerprints).
* :mod:`~sparklog.schemas.conformance` — :func:`conform`: any Arrow struct column -> exactly the topic's type.
* :mod:`~sparklog.schemas.pylist` — :func:`from_pylist`: Python dicts -> a struct column.
* :mod:`~sparklog.schemas.defaults` — field defaults as Arrow columns.
* :mod:`~sparklog.schemas.evolution` — :func:`evolve`: older versions' batches to the latest type.
* :mod:`~sparklog.schemas.projection` — :func:`project`, :func:`projected_type` (option ``fields``).
* :mod:`~sparklog.schemas.registry` — :class:`SchemaRegistry` over ``schemas/<topic>/<version>``.
* :mod:`~sparklog.schemas.spark` — the Arrow types Spark takes (``time32`` and ``decimal256`` widened).
* :mod:`~sparklog.schemas.fast_decode`, :mod:`~sparklog.schemas.fast_encode` — the columnar Avro codecs
  behind decode/encode (numpy; fastavro, :mod:`~sparklog.schemas.fastavro_codec`, is the reference and
  the fallback for damaged data).
* :mod:`~sparklog.schemas.bench` — ``python -m sparklog.schemas.bench``: codec throughput, 20 fields.

Errors (in :mod:`sparklog.errors`, named here too): :class:`SchemaError`, :class:`IncompatibleSchema`,
:class:`UnknownSchema` (all ``InvalidRequest``), and :class:`sparklog.errors.InvalidRecord` for bad
values.
"""

from sparklog.errors import IncompatibleSchema, SchemaError, UnknownSchema
from sparklog.schemas.avro_arrow import avro_to_arrow
from sparklog.schemas.codec import decode_avro, encode_avro
from sparklog.schemas.compatibility import Problem, assert_compatible, check
from sparklog.schemas.conformance import conform
from sparklog.schemas.evolution import evolve, needs_evolution
from sparklog.schemas.projection import parse_fields, project, project_batch, projected_type
from sparklog.schemas.pylist import from_pylist
from sparklog.schemas.registry import SchemaRegistry
from sparklog.schemas.spark import spark_arrow_type, to_spark_arrow
from sparklog.schemas.value_schema import ValueSchema

__all__ = [
    "IncompatibleSchema",
    "Problem",
    "SchemaError",
    "SchemaRegistry",
    "UnknownSchema",
    "ValueSchema",
    "assert_compatible",
    "avro_to_arrow",
    "check",
    "conform",
    "decode_avro",
    "encode_avro",
    "evolve",
    "from_pylist",
    "needs_evolution",
    "parse_fields",
    "project",
    "project_batch",
    "projected_type",
    "spark_arrow_type",
    "to_spark_arrow",
]
