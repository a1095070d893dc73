"""One version of a typed topic's value schema: the Avro schema, its Arrow type, fingerprint and the
column conversions, in one immutable object that is cheap to share (build it once per version)."""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import pyarrow as pa

from sparklog.schemas import avro as _avro
from sparklog.schemas.avro_arrow import Node, build_tree
from sparklog.schemas.codec import decode_avro, encode_avro
from sparklog.schemas.conformance import conform
from sparklog.schemas.defaults import check_defaults
from sparklog.schemas.evolution import evolve
from sparklog.schemas.projection import projected_type
from sparklog.schemas.pylist import from_pylist


@dataclasses.dataclass(frozen=True, eq=False)
class ValueSchema:
    """A parsed, validated and Arrow-mapped value schema (optionally a registered version of a topic).

    Build with :meth:`parse`; it raises :class:`SchemaError` for malformed or unmappable schemas.
    """

    avro: Any  # the fastavro-parsed schema
    json: str  # the schema as compact JSON text (what the registry stores)
    tree: Node
    fingerprint: bytes  # 8 bytes, CRC-64-AVRO of the canonical form, little-endian
    version: int | None = None
    topic: str | None = None

    @classmethod
    def parse(
        cls,
        schema: str | bytes | Mapping[str, Any] | list[Any] | ValueSchema,
        version: int | None = None,
        topic: str | None = None,
    ) -> ValueSchema:
        """Parse (JSON text or object), validate with fastavro, map to Arrow and check every default."""
        if isinstance(schema, ValueSchema):
            return (
                schema
                if version is None and topic is None
                else dataclasses.replace(
                    schema, version=version if version is not None else schema.version, topic=topic or schema.topic
                )
            )
        obj = _avro.load_json(schema)
        parsed = _avro.parse_avro(obj)
        tree = build_tree(parsed)
        out = cls(parsed, _avro.to_json_text(obj), tree, _avro.fingerprint(parsed), version, topic)
        check_defaults(tree)
        return out

    # ------------------------------------------------------------------ properties
    @property
    def arrow_type(self) -> pa.StructType:
        """The Arrow struct type of values (what segments store and consumers get)."""
        return self.tree.arrow

    @property
    def canonical_form(self) -> str:
        return _avro.canonical_form(self.avro)

    @functools.cached_property
    def physical_avro(self) -> Any:
        """The parsed schema without logical types (what the codecs hand to fastavro)."""
        return _avro.physical_schema(self.avro)

    @property
    def label(self) -> str:
        """``version 3 of topic 'orders'`` (or less, when not registered), for messages."""
        if self.version is None:
            return "the schema" if self.topic is None else f"the schema of topic {self.topic!r}"
        if self.topic is None:
            return f"schema version {self.version}"
        return f"version {self.version} of topic {self.topic!r}"

    def __repr__(self) -> str:
        return f"ValueSchema({self.label}, fingerprint={self.fingerprint.hex()}, arrow={self.arrow_type})"

    @functools.cached_property
    def _json_object(self) -> Any:
        return json.loads(self.json)

    def same_as(self, other: ValueSchema) -> bool:
        """The same schema (equal JSON, whatever the formatting or key order): interchangeable."""
        return self is other or self.json == other.json or self._json_object == other._json_object

    # ------------------------------------------------------------------ conversions
    def decode(self, payloads: Any, **kwargs: Any) -> pa.StructArray:
        """Avro payloads -> values of this schema; see :func:`sparklog.schemas.codec.decode_avro`."""
        return decode_avro(payloads, self, **kwargs)

    def encode(self, values: Any, **kwargs: Any) -> pa.Array:
        """Values -> Avro payloads; see :func:`sparklog.schemas.codec.encode_avro`."""
        return encode_avro(values, self, **kwargs)

    def from_pylist(self, rows: Iterable[Mapping[str, Any] | None]) -> pa.StructArray:
        """Python dicts -> values; see :func:`sparklog.schemas.pylist.from_pylist`."""
        return from_pylist(rows, self)

    def conform(self, values: Any) -> pa.StructArray:
        """Arrow values -> values of exactly :attr:`arrow_type`; see
        :func:`sparklog.schemas.conformance.conform`."""
        return conform(values, self)

    def evolve(self, values: pa.Array, writer: ValueSchema) -> pa.StructArray:
        """Values written with ``writer`` (an older version) -> this schema's type; see
        :func:`sparklog.schemas.evolution.evolve`."""
        return evolve(values, writer, self)

    def projected_type(self, fields: str | Sequence[str]) -> pa.StructType:
        return projected_type(self.arrow_type, fields)
