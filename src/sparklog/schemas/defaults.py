"""Avro field defaults as Arrow values: the default of a field as a column of its Arrow type (for
fields a reader added, fields left out of Arrow input, nulls of required fields), checked once when
a schema is parsed (:func:`check_defaults`).

A default that is not a valid value of its field raises :class:`SchemaError`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pyarrow as pa

from sparklog.errors import SchemaError
from sparklog.schemas._arrays import to_logical
from sparklog.schemas.avro_arrow import Field, Node


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


def check_defaults(node: Node) -> None:
    """Build every field default once, so a bad one is refused at declaration."""
    for f in node.fields:
        if f.has_default:
            _default_array(f)
        check_defaults(f.node)
    if node.items is not None:
        check_defaults(node.items)
