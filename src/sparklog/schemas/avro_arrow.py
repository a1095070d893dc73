"""Avro -> Arrow type mapping.

A typed topic's value schema must be an Avro **record**; it becomes an Arrow **struct**. The mapping:

| Avro | Arrow |
| --- | --- |
| null / boolean / int / long / float / double | null / bool / int32 / int64 / float32 / float64 |
| bytes / string | binary / string (utf8) |
| record | struct (field order kept; a field is non-nullable unless its type is a union with null) |
| enum | string (the symbol; symbols are checked on write; see below why not a dictionary) |
| array<T> | list<item: T> |
| map<T> | map<string, T> (keys non-null) |
| fixed(n) | fixed_size_binary(n) |
| union [null, T] or [T, null] | T, nullable |
| union ["null"] | null |
| other unions | refused (SchemaError) |
| decimal(p, s) on bytes or fixed | decimal128(p, s) (p <= 38), decimal256(p, s) (p <= 76) |
| date | date32 |
| time-millis / time-micros | time32[ms] / time64[us] |
| timestamp-millis / -micros / -nanos | timestamp[ms / us / ns, tz=UTC] |
| local-timestamp-millis / -micros / -nanos | timestamp[ms / us / ns] (no time zone) |
| uuid on string | string (the 36-character text, checked on write) |
| uuid on fixed(16), duration on fixed(12) | fixed_size_binary(16) / (12) (the raw bytes) |
| unknown logical types | the underlying type (as the Avro spec requires) |

Enums are plain strings rather than ``dictionary<int32, string>``: Spark's Arrow reader has no
dictionary support, batches written under different schema versions (with more symbols) then share
one Arrow type, and segment compression removes most of the repetition anyway.

Refused at declaration (:class:`SchemaError`, naming the field): a top-level type other than a
record, unions of several non-null types, recursive records, records without fields, duplicate or
non-Avro field names, a known logical type on the wrong base type, decimals wider than 76 digits or
than their fixed size allows.

The mapping is computed into a tree of :class:`Node` (one per occurrence of a type, so each knows its
``path`` such as ``address.zip``, ``tags[]`` or ``attrs{}``) that the codecs, the conformance checks and
the evolution of old batches walk.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping
from typing import Any

import pyarrow as pa

from sparklog.errors import SchemaError
from sparklog.schemas.avro import PRIMITIVES, AvroSchema, describe, named_types, parse_avro, resolve, type_name

FIELD_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

_PRIMITIVE_ARROW: dict[str, pa.DataType] = {
    "null": pa.null(),
    "boolean": pa.bool_(),
    "int": pa.int32(),
    "long": pa.int64(),
    "float": pa.float32(),
    "double": pa.float64(),
    "bytes": pa.binary(),
    "string": pa.string(),
}

# (base type, logical type) -> Arrow type, for the logical types whose physical form is a primitive
_LOGICAL_ARROW: dict[tuple[str, str], pa.DataType] = {
    ("int", "date"): pa.date32(),
    ("int", "time-millis"): pa.time32("ms"),
    ("long", "time-micros"): pa.time64("us"),
    ("long", "timestamp-millis"): pa.timestamp("ms", tz="UTC"),
    ("long", "timestamp-micros"): pa.timestamp("us", tz="UTC"),
    ("long", "timestamp-nanos"): pa.timestamp("ns", tz="UTC"),
    ("long", "local-timestamp-millis"): pa.timestamp("ms"),
    ("long", "local-timestamp-micros"): pa.timestamp("us"),
    ("long", "local-timestamp-nanos"): pa.timestamp("ns"),
    ("string", "uuid"): pa.string(),
}
_KNOWN_LOGICAL = {logical for _, logical in _LOGICAL_ARROW} | {"decimal", "duration"}


@dataclasses.dataclass(eq=False)
class Field:
    """A record field: its name, type node, default (Avro JSON form) and aliases."""

    name: str
    node: Node
    has_default: bool = False
    default: Any = None
    aliases: tuple[str, ...] = ()

    @property
    def arrow(self) -> pa.Field:
        return pa.field(self.name, self.node.arrow, nullable=self.node.nullable)

    @property
    def physical(self) -> pa.Field:
        return pa.field(self.name, self.node.physical, nullable=self.node.nullable)


@dataclasses.dataclass(eq=False)
class Node:
    """One Avro type at one place of the value schema, with its Arrow types.

    ``arrow`` is the type users see and segments store; ``physical`` the type of the same data with
    logical types stripped (timestamps as int64, decimals as big-endian bytes...), which is what
    fastavro reads and writes. ``nullable`` is set for a union with null.
    """

    kind: str  # Avro type: a primitive, record, enum, array, map or fixed
    path: str  # "" for the value itself, "address.zip", "tags[]", "attrs{}"
    arrow: pa.DataType
    physical: pa.DataType
    schema: AvroSchema  # the resolved Avro schema of this node (without the null of a union)
    nullable: bool = False
    logical: str | None = None
    name: str | None = None  # full name of a record, enum or fixed
    fields: tuple[Field, ...] = ()  # record
    items: Node | None = None  # array items, map values
    symbols: tuple[str, ...] = ()  # enum
    enum_default: str | None = None
    size: int | None = None  # fixed
    union: tuple[int | None, int | None] | None = None  # (null branch, value branch) of a writer union
    has_map: bool = False  # a map somewhere at or below this node

    @property
    def plain(self) -> bool:
        """True when the Arrow type is the physical one (no logical conversion anywhere below)."""
        return self.arrow.equals(self.physical)

    @property
    def where(self) -> str:
        """``field 'address.zip'`` (or ``the value`` for the root), for messages."""
        return f"field '{self.path}'" if self.path else "the value"

    def field(self, name: str) -> Field | None:
        for f in self.fields:
            if f.name == name:
                return f
        return None

    def describe(self) -> str:
        return describe(self.schema) + (" or null" if self.nullable and self.kind != "null" else "")


def build_tree(schema: AvroSchema | str | Mapping[str, Any]) -> Node:
    """The :class:`Node` tree of a value schema (JSON text, JSON object or fastavro-parsed).

    Raises :class:`SchemaError` when the schema is malformed or cannot be mapped to Arrow.
    """
    parsed = parse_avro(schema)
    top = resolve(parsed, named_types(parsed))
    if type_name(top) != "record":
        raise SchemaError(
            f"the value schema of a typed topic must be an Avro record, got {describe(top)}; "
            "wrap the value in a record with one field"
        )
    return _Builder(named_types(parsed)).build(parsed, "", ())


def avro_to_arrow(schema: AvroSchema | str | Mapping[str, Any]) -> pa.StructType:
    """The Arrow struct type of a value schema (raises :class:`SchemaError` when unmappable)."""
    return build_tree(schema).arrow


def _child_path(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


class _Builder:
    def __init__(self, named: dict[str, Any]) -> None:
        self.named = named

    def build(self, schema: AvroSchema, path: str, stack: tuple[str, ...], nullable: bool = False) -> Node:
        where = f"field '{path}'" if path else "the value"
        if isinstance(schema, list):
            return self._union(schema, path, stack, where)
        if isinstance(schema, str) and schema not in PRIMITIVES and schema in stack:
            raise SchemaError(f"{where}: recursive type {schema!r} cannot be mapped to Arrow")
        schema = resolve(schema, self.named)
        if isinstance(schema, list):
            return self._union(schema, path, stack, where)
        kind = type_name(schema)
        if kind in PRIMITIVES:
            logical = schema.get("logicalType") if isinstance(schema, dict) else None
            return self._primitive(kind, schema, logical, path, where, nullable or kind == "null")
        name = schema.get("name")
        if name in stack:
            raise SchemaError(f"{where}: recursive type {name!r} cannot be mapped to Arrow")
        if kind == "record":
            return self._record(schema, path, (*stack, name), where, nullable)
        if kind == "enum":
            symbols = tuple(schema.get("symbols", ()))
            if not symbols:
                raise SchemaError(f"{where}: enum {name!r} has no symbols")
            return Node(
                "enum", path, pa.string(), pa.string(), schema, nullable, name=name,
                symbols=symbols, enum_default=schema.get("default"),
            )  # fmt: skip
        if kind == "array":
            items = self.build(schema["items"], path + "[]", stack)
            item = pa.field("item", items.arrow, nullable=items.nullable)
            physical = pa.field("item", items.physical, nullable=items.nullable)
            return Node(
                "array", path, pa.list_(item), pa.list_(physical), schema, nullable, items=items, has_map=items.has_map
            )
        if kind == "map":
            values = self.build(schema["values"], path + "{}", stack)
            arrow = pa.map_(pa.string(), pa.field("value", values.arrow, nullable=values.nullable))
            physical = pa.map_(pa.string(), pa.field("value", values.physical, nullable=values.nullable))
            return Node("map", path, arrow, physical, schema, nullable, items=values, has_map=True)
        if kind == "fixed":
            return self._fixed(schema, path, where, nullable)
        raise SchemaError(f"{where}: unsupported Avro type {kind!r}")

    def _union(self, branches: list[Any], path: str, stack: tuple[str, ...], where: str) -> Node:
        others = [b for b in branches if b != "null"]
        if len(others) > 1:
            raise SchemaError(
                f"{where}: union [{', '.join(describe(b) for b in branches)}] cannot be mapped to Arrow; "
                "only a union of one type with null is supported (it becomes a nullable field)"
            )
        if others and isinstance(others[0], list):
            raise SchemaError(f"{where}: a union cannot directly contain another union")
        null_branch = branches.index("null") if "null" in branches else None
        value_branch = branches.index(others[0]) if others else None
        if not others:
            node = self.build("null", path, stack, nullable=True)
        else:
            node = self.build(others[0], path, stack, nullable=null_branch is not None)
        node.nullable = null_branch is not None
        node.union = (null_branch, value_branch)
        return node

    def _record(self, schema: dict[str, Any], path: str, stack: tuple[str, ...], where: str, nullable: bool) -> Node:
        raw_fields = schema.get("fields")
        if not isinstance(raw_fields, list):
            raise SchemaError(f"{where}: record {schema.get('name')!r} needs a list of fields")
        if not raw_fields:
            raise SchemaError(f"{where}: record {schema.get('name')!r} has no fields (an empty struct is not mappable)")
        fields: list[Field] = []
        seen: set[str] = set()
        for raw in raw_fields:
            name = raw.get("name")
            child_path = _child_path(path, str(name))
            if not isinstance(name, str) or not FIELD_NAME.match(name):
                raise SchemaError(f"field '{child_path}': invalid Avro field name (use [A-Za-z_][A-Za-z0-9_]*)")
            if name in seen:
                raise SchemaError(f"field '{child_path}' is declared twice in record {schema.get('name')!r}")
            seen.add(name)
            node = self.build(raw["type"], child_path, stack)
            fields.append(Field(name, node, "default" in raw, raw.get("default"), tuple(raw.get("aliases", ()))))
        arrow = pa.struct([f.arrow for f in fields])
        physical = pa.struct([f.physical for f in fields])
        return Node(
            "record", path, arrow, physical, schema, nullable, name=schema.get("name"), fields=tuple(fields),
            has_map=any(f.node.has_map for f in fields),
        )  # fmt: skip

    def _fixed(self, schema: dict[str, Any], path: str, where: str, nullable: bool) -> Node:
        size = schema.get("size")
        if not isinstance(size, int) or size < 1:
            raise SchemaError(f"{where}: fixed {schema.get('name')!r} needs a positive size, got {size!r}")
        logical = schema.get("logicalType")
        physical = pa.binary(size)
        arrow: pa.DataType = physical
        if logical == "decimal":
            arrow = _decimal_type(schema, where, max_digits=math.floor(math.log10(2 ** (8 * size - 1) - 1)))
        elif logical == "uuid" and size != 16:
            raise SchemaError(f"{where}: logical type 'uuid' on fixed needs size 16, got {size}")
        elif logical == "duration" and size != 12:
            raise SchemaError(f"{where}: logical type 'duration' needs fixed size 12, got {size}")
        elif logical in _KNOWN_LOGICAL and logical not in ("uuid", "duration"):
            raise SchemaError(f"{where}: logical type {logical!r} cannot annotate a fixed")
        logical = logical if logical in _KNOWN_LOGICAL else None
        return Node(
            "fixed", path, arrow, physical, schema, nullable, logical=logical, name=schema.get("name"), size=size
        )

    def _primitive(
        self, kind: str, schema: AvroSchema, logical: str | None, path: str, where: str, nullable: bool
    ) -> Node:
        physical = _PRIMITIVE_ARROW[kind]
        if logical is None or logical not in _KNOWN_LOGICAL:
            return Node(kind, path, physical, physical, schema, nullable)
        if logical == "decimal":
            if kind != "bytes":
                raise SchemaError(f"{where}: logical type 'decimal' needs bytes or fixed, got {kind}")
            return Node(kind, path, _decimal_type(schema, where, 76), physical, schema, nullable, logical=logical)
        arrow = _LOGICAL_ARROW.get((kind, logical))
        if arrow is None:
            bases = sorted(
                {b for b, lt in _LOGICAL_ARROW if lt == logical} | ({"fixed"} if logical == "uuid" else set())
            )
            raise SchemaError(f"{where}: logical type {logical!r} needs {' or '.join(bases)}, got {kind}")
        return Node(kind, path, arrow, physical, schema, nullable, logical=logical)


def _decimal_type(schema: Mapping[str, Any], where: str, max_digits: int) -> pa.DataType:
    precision, scale = schema.get("precision"), schema.get("scale", 0)
    if not isinstance(precision, int) or isinstance(precision, bool) or precision < 1:
        raise SchemaError(f"{where}: decimal needs a positive integer precision, got {precision!r}")
    if not isinstance(scale, int) or isinstance(scale, bool) or not 0 <= scale <= precision:
        raise SchemaError(f"{where}: decimal scale must be an integer from 0 to the precision, got {scale!r}")
    if precision > max_digits:
        raise SchemaError(f"{where}: decimal precision {precision} exceeds the {max_digits} digits its type can hold")
    return pa.decimal128(precision, scale) if precision <= 38 else pa.decimal256(precision, scale)
