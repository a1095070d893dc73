"""Avro schema text -> a parsed schema (fastavro), its canonical form, fingerprint and helpers.

A *parsed* schema is what :func:`fastavro.parse_schema` returns: plain dicts and lists with fully
qualified names, where a named type (record, enum, fixed) is spelled out where it is first defined and
referred to by its full name afterwards (``parsed["__named_schemas"]`` maps names to definitions).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from typing import Any

import fastavro
from fastavro.schema import fingerprint as _fastavro_fingerprint
from fastavro.schema import to_parsing_canonical_form

from sparklog.errors import SchemaError

PRIMITIVES = ("null", "boolean", "int", "long", "float", "double", "bytes", "string")
NAMED = ("record", "error", "enum", "fixed")
AvroSchema = Any  # a parsed schema: dict (complex or annotated), list (union) or str (primitive or name)


def load_json(schema: str | bytes | Mapping[str, Any] | list[Any]) -> Any:
    """The schema as a JSON object (text is parsed; objects are deep-copied so callers keep theirs)."""
    if isinstance(schema, bytes | bytearray):
        try:
            schema = bytes(schema).decode("utf-8")
        except UnicodeDecodeError:
            raise SchemaError("the Avro schema is not UTF-8 text") from None
    if isinstance(schema, str):
        text = schema.strip()
        if not text:
            raise SchemaError("the Avro schema is empty")
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            # a bare primitive name ("string") is valid Avro but not JSON
            if text in PRIMITIVES:
                return text
            raise SchemaError(
                f"the Avro schema is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
            ) from None
    if isinstance(schema, Mapping | list):
        return copy.deepcopy(dict(schema) if isinstance(schema, Mapping) else list(schema))
    raise SchemaError(f"an Avro schema must be JSON text or a dict, got {type(schema).__name__}")


def parse_avro(schema: str | bytes | Mapping[str, Any] | list[Any]) -> AvroSchema:
    """Parse and validate an Avro schema with fastavro; :class:`SchemaError` says what is wrong."""
    if isinstance(schema, Mapping) and schema.get("__fastavro_parsed"):
        return schema
    obj = load_json(schema)
    try:
        return fastavro.parse_schema(obj)
    except Exception as exc:  # fastavro raises SchemaParseException, UnknownType, KeyError, TypeError...
        raise SchemaError(_parse_error(obj, exc)) from None


def _parse_error(obj: Any, exc: Exception) -> str:
    """fastavro's complaint, with the path of the field it is about when that can be found."""
    text = _describe_parse_error(exc)
    path = _locate(obj, text)
    return f"invalid Avro schema: field '{path}': {text}" if path else f"invalid Avro schema: {text}"


def _describe_parse_error(exc: Exception) -> str:
    if isinstance(exc, fastavro.schema.UnknownType):
        return f"unknown type {exc.name!r}"
    if isinstance(exc, KeyError):
        return f"missing attribute {exc.args[0]!r}"
    return str(exc)


def _locate(obj: Any, text: str) -> str | None:
    """The deepest field whose declaration alone makes fastavro fail with the same message."""

    def fails(field: dict[str, Any]) -> bool:
        try:
            fastavro.parse_schema({"type": "record", "name": "__probe", "fields": [field]})
        except Exception as exc:
            return _describe_parse_error(exc) == text
        return False

    def walk(t: Any, path: str) -> str | None:
        if isinstance(t, list):
            for branch in t:
                found = walk(branch, path)
                if found:
                    return found
            return None
        if not isinstance(t, dict):
            return None
        if t.get("type") in ("record", "error") and isinstance(t.get("fields"), list):
            for f in t["fields"]:
                if not isinstance(f, dict):
                    continue
                child = f"{path}.{f.get('name')}" if path else str(f.get("name"))
                found = walk(f.get("type"), child)
                if found:
                    return found
                if fails(f):
                    return child
            return None
        if t.get("type") in ("array", "map"):
            inner, child = (t.get("items"), path + "[]") if t["type"] == "array" else (t.get("values"), path + "{}")
            found = walk(inner, child)
            if found:
                return found
            return child if fails({"name": "x", "type": inner}) else None
        if isinstance(t.get("type"), dict | list):
            return walk(t["type"], path)
        return None

    try:
        return walk(obj, "")
    except Exception:  # pragma: no cover - locating is best effort
        return None


def to_json_text(schema: Any) -> str:
    """Compact JSON text of a schema object (without fastavro's bookkeeping keys)."""
    return json.dumps(_without_bookkeeping(schema), separators=(",", ":"), ensure_ascii=False)


def _without_bookkeeping(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _without_bookkeeping(v) if k != "default" else v for k, v in obj.items() if not k.startswith("__")}
    if isinstance(obj, list):
        return [_without_bookkeeping(v) for v in obj]
    return obj


def canonical_form(parsed: AvroSchema) -> str:
    """Avro's Parsing Canonical Form (what fingerprints are computed over)."""
    return to_parsing_canonical_form(parsed)


def fingerprint(parsed: AvroSchema) -> bytes:
    """The 8-byte CRC-64-AVRO (Rabin) fingerprint, little-endian: the bytes of single-object encoding."""
    return bytes.fromhex(_fastavro_fingerprint(canonical_form(parsed), "CRC-64-AVRO"))


def physical_schema(parsed: AvroSchema) -> AvroSchema:
    """The schema without logical types, parsed: fastavro then reads/writes raw ints, longs and bytes
    (no datetime or Decimal objects), which sparklog converts to Arrow's logical types column by column."""

    def strip(obj: Any) -> Any:
        if isinstance(obj, dict):
            return {
                k: (v if k == "default" else strip(v))
                for k, v in obj.items()
                if k != "logicalType" and not k.startswith("__")
            }
        if isinstance(obj, list):
            return [strip(v) for v in obj]
        return obj

    return fastavro.parse_schema(strip(parsed))


def named_types(parsed: AvroSchema) -> dict[str, Any]:
    """Full name -> definition of every named type of a parsed schema."""
    if isinstance(parsed, dict):
        return dict(parsed.get("__named_schemas", {}))
    if isinstance(parsed, list):
        out: dict[str, Any] = {}
        for branch in parsed:
            out.update(named_types(branch))
        return out
    return {}


def resolve(schema: AvroSchema, named: Mapping[str, Any]) -> AvroSchema:
    """Follow a reference to a named type (``"ns.Address"``) to its definition; others unchanged."""
    while isinstance(schema, str) and schema not in PRIMITIVES:
        try:
            schema = named[schema]
        except KeyError:
            raise SchemaError(f"unknown Avro type {schema!r}") from None
    while isinstance(schema, dict) and isinstance(schema.get("type"), dict | list) and len(schema) == 1:
        schema = schema["type"]
    return schema


def type_name(schema: AvroSchema) -> str:
    """The Avro type of a (resolved) schema: ``"int"``, ``"record"``, ``"union"``..."""
    if isinstance(schema, list):
        return "union"
    if isinstance(schema, dict):
        t = schema.get("type")
        if isinstance(t, dict | list):
            return type_name(t)
        return "record" if t == "error" else str(t)
    return str(schema)


def describe(schema: AvroSchema) -> str:
    """A short human-readable spelling of a schema for messages: ``int``, ``record ns.Address``,
    ``array<string>``, ``union[null, long]``, ``long (timestamp-millis)``."""
    if isinstance(schema, list):
        return "union[" + ", ".join(describe(b) for b in schema) + "]"
    if isinstance(schema, str):
        return schema
    t = type_name(schema)
    if t in NAMED or t == "error":
        return f"{t} {schema.get('name', '?')}"
    if t == "array":
        return f"array<{describe(schema.get('items'))}>"
    if t == "map":
        return f"map<{describe(schema.get('values'))}>"
    logical = schema.get("logicalType")
    if logical == "decimal":
        return f"{t} (decimal({schema.get('precision')}, {schema.get('scale', 0)}))"
    return f"{t} ({logical})" if logical else t


def short_name(name: str) -> str:
    """The unqualified part of a full name."""
    return name.rsplit(".", 1)[-1]
