"""One version of a typed topic's value schema: the Avro schema, its Arrow type, fingerprint and the
column conversions, in one immutable object that is cheap to share (build it once per version)."""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from sparklog.schemas import avro as _avro
from sparklog.schemas._arrays import to_logical
from sparklog.schemas.avro_arrow import Field, Node, build_tree
from sparklog.schemas.errors import SchemaError


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
        _check_defaults(tree)
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

    # ------------------------------------------------------------------ conversions (see codec)
    def decode(self, payloads: Any, **kwargs: Any) -> pa.StructArray:
        """Avro payloads -> values of this schema; see :func:`sparklog.schemas.codec.decode_avro`."""
        from sparklog.schemas.codec import decode_avro

        return decode_avro(payloads, self, **kwargs)

    def encode(self, values: Any, **kwargs: Any) -> pa.Array:
        """Values -> Avro payloads; see :func:`sparklog.schemas.codec.encode_avro`."""
        from sparklog.schemas.codec import encode_avro

        return encode_avro(values, self, **kwargs)

    def from_pylist(self, rows: Iterable[Mapping[str, Any] | None]) -> pa.StructArray:
        """Python dicts -> values; see :func:`sparklog.schemas.codec.from_pylist`."""
        from sparklog.schemas.codec import from_pylist

        return from_pylist(rows, self)

    def conform(self, values: Any) -> pa.StructArray:
        """Arrow values -> values of exactly :attr:`arrow_type`; see :func:`sparklog.schemas.codec.conform`."""
        from sparklog.schemas.codec import conform

        return conform(values, self)

    def evolve(self, values: pa.Array, writer: ValueSchema) -> pa.StructArray:
        """Values written with ``writer`` (an older version) -> this schema's type; see
        :func:`sparklog.schemas.evolution.evolve`."""
        from sparklog.schemas.evolution import evolve

        return evolve(values, writer, self)

    def projected_type(self, fields: str | Sequence[str]) -> pa.StructType:
        from sparklog.schemas.projection import projected_type

        return projected_type(self.arrow_type, fields)


# ---------------------------------------------------------------------------- defaults


def default_column(f: Field, length: int) -> pa.Array:
    """A column of ``length`` copies of the field's default value, of the field's Arrow type."""
    one = _default_array(f)
    if length == 1:
        return one
    return one.take(pa.array(np.zeros(length, dtype=np.int32)))


def _default_array(f: Field) -> pa.Array:
    """The field's default as a one-row array of its Arrow type (computed once per field)."""
    cached = f.__dict__.get("_default_array")
    if cached is not None:
        return cached
    value = default_value(f.node, f.default, f.node.path)
    try:
        physical = pa.array([value], type=f.node.physical)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError) as exc:
        raise SchemaError(f"{f.node.where}: default {f.default!r} is not a valid {f.node.describe()}: {exc}") from None
    out = to_logical(physical, f.node)
    f.__dict__["_default_array"] = out
    return out


def default_value(node: Node, value: Any, path: str) -> Any:
    """An Avro JSON default -> the Python value of ``node.physical`` (bytes from ISO-8859-1 strings...)."""
    where = f"field '{path}'" if path else "the value"
    if value is None:
        if not node.nullable and node.kind != "null":
            raise SchemaError(f"{where}: default null is not valid for {node.describe()}")
        return None
    kind = node.kind
    if kind in ("bytes", "fixed"):
        if not isinstance(value, str):
            raise SchemaError(f"{where}: a {kind} default must be a JSON string, got {value!r}")
        try:
            raw = value.encode("latin-1")
        except UnicodeEncodeError:
            raise SchemaError(f"{where}: a {kind} default must only have characters \\u0000-\\u00ff") from None
        if kind == "fixed" and len(raw) != node.size:
            raise SchemaError(f"{where}: default has {len(raw)} bytes, fixed size is {node.size}")
        return raw
    if kind in ("float", "double") and isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if kind == "record":
        if not isinstance(value, Mapping):
            raise SchemaError(f"{where}: a record default must be a JSON object, got {value!r}")
        out = {}
        for f in node.fields:
            if f.name in value:
                out[f.name] = default_value(f.node, value[f.name], f.node.path)
            elif f.has_default:
                out[f.name] = default_value(f.node, f.default, f.node.path)
            else:
                raise SchemaError(f"{where}: default has no value for field '{f.name}', which has no default")
        return out
    if kind == "array":
        if not isinstance(value, list):
            raise SchemaError(f"{where}: an array default must be a JSON array, got {value!r}")
        return [default_value(node.items, v, node.items.path) for v in value]
    if kind == "map":
        if not isinstance(value, Mapping):
            raise SchemaError(f"{where}: a map default must be a JSON object, got {value!r}")
        return {k: default_value(node.items, v, node.items.path) for k, v in value.items()}
    if kind == "enum" and value not in node.symbols:
        raise SchemaError(f"{where}: default {value!r} is not one of the symbols {list(node.symbols)}")
    return value


def _check_defaults(node: Node) -> None:
    """Build every field default once, so a bad one is refused at declaration."""
    for f in node.fields:
        if f.has_default:
            _default_array(f)
        _check_defaults(f.node)
    if node.items is not None:
        _check_defaults(node.items)
