"""Find the row and field that made a Python -> Arrow conversion fail (the slow path of
:func:`sparklog.schemas.pylist.from_pylist`, only run after the columnar conversion refused the rows)."""

from __future__ import annotations

import datetime
import decimal
import re
from collections.abc import Mapping, Sequence
from typing import Any

from sparklog.schemas.avro_arrow import Node

_UUID = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")
_INT_RANGE = {"int": (-(2**31), 2**31 - 1), "long": (-(2**63), 2**63 - 1)}


def explain(rows: Sequence[Any], root: Node) -> str | None:
    """``row 3: field 'address.zip' must be a string, got int 12345`` for the first bad row, or None."""
    for i, row in enumerate(rows):
        if row is None:
            continue
        problem = _check(row, root)
        if problem:
            return f"row {i}: {problem}"
    return None


def _got(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 40 else text[:37] + '...'}"


def _check(value: Any, node: Node) -> str | None:
    where = node.where
    if value is None:
        return None if node.nullable or node.kind == "null" else f"{where} is null, but it is required"
    kind = node.kind
    if kind == "record":
        if not isinstance(value, Mapping):
            return f"{where} must be a dict (Avro {node.describe()}), got {_got(value)}"
        names = {f.name for f in node.fields}
        for key in value:
            if key not in names:
                return f"unknown field '{node.path + '.' if node.path else ''}{key}'"
        for f in node.fields:
            if f.name not in value or value[f.name] is None:
                if f.node.nullable or f.has_default or f.node.kind == "null":
                    continue
                if f.name not in value:
                    return f"missing required {f.node.where} ({f.node.describe()}, no default)"
                return f"{f.node.where} is null, but it is required ({f.node.describe()})"
            problem = _check(value[f.name], f.node)
            if problem:
                return problem
        return None
    if kind == "array":
        if isinstance(value, str | bytes | Mapping) or not isinstance(value, Sequence):
            return f"{where} must be a list (Avro {node.describe()}), got {_got(value)}"
        for item in value:
            problem = _check(item, node.items)
            if problem:
                return problem
        return None
    if kind == "map":
        pairs = value.items() if isinstance(value, Mapping) else value
        try:
            pairs = list(pairs)
            for key, item in pairs:
                if not isinstance(key, str):
                    return f"{where}: map keys must be strings, got {_got(key)}"
                problem = _check(item, node.items)
                if problem:
                    return problem
        except (TypeError, ValueError):
            return f"{where} must be a dict (Avro {node.describe()}), got {_got(value)}"
        return None
    return _check_leaf(value, node)


def _check_leaf(value: Any, node: Node) -> str | None:
    where, kind, logical = node.where, node.kind, node.logical
    expected = f"{where} must be {node.describe()}"
    if logical == "decimal":
        if isinstance(value, bool) or not isinstance(value, decimal.Decimal | int):
            return f"{expected} (a Decimal), got {_got(value)}"
        if isinstance(value, decimal.Decimal):
            _, digits, exponent = value.as_tuple()
            precision, scale = node.arrow.precision, node.arrow.scale
            if not isinstance(exponent, int):
                return f"{where}: {value} is not a finite decimal"
            if -exponent > scale:
                return f"{where}: {value} has more than {scale} decimal places"
            if len(digits) + exponent > precision - scale:
                return f"{where}: {value} does not fit decimal({precision}, {scale})"
        return None
    if logical == "date":
        ok = isinstance(value, datetime.date) and not isinstance(value, datetime.datetime)
        return None if ok or _is_int(value) else f"{expected} (a datetime.date), got {_got(value)}"
    if logical in ("time-millis", "time-micros"):
        return None if isinstance(value, datetime.time) or _is_int(value) else f"{expected} (a time), got {_got(value)}"
    if logical and "timestamp" in logical:
        return (
            None
            if isinstance(value, datetime.datetime) or _is_int(value)
            else f"{expected} (a datetime), got {_got(value)}"
        )
    if logical == "uuid" and kind == "string":
        if not isinstance(value, str) or not _UUID.match(value):
            return f"{where}: {_got(value)} is not a uuid (text like '123e4567-e89b-12d3-a456-426614174000')"
        return None
    if kind == "boolean":
        return None if isinstance(value, bool) else f"{expected}, got {_got(value)}"
    if kind in ("int", "long"):
        if not _is_int(value):
            return f"{expected}, got {_got(value)}"
        low, high = _INT_RANGE[kind]
        return None if low <= value <= high else f"{where}: {value} is out of range for Avro {kind}"
    if kind in ("float", "double"):
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        return None if ok else f"{expected}, got {_got(value)}"
    if kind == "string":
        return None if isinstance(value, str) else f"{expected}, got {_got(value)}"
    if kind == "enum":
        if isinstance(value, str) and value in node.symbols:
            return None
        return f"{where}: {value!r} is not a symbol of enum {node.name} ({', '.join(node.symbols)})"
    if kind == "bytes":
        return None if isinstance(value, bytes | bytearray | memoryview) else f"{expected}, got {_got(value)}"
    if kind == "fixed":
        if not isinstance(value, bytes | bytearray | memoryview):
            return f"{expected}, got {_got(value)}"
        return None if len(value) == node.size else f"{where}: {len(value)} bytes, fixed size is {node.size}"
    if kind == "null":
        return f"{where} must be null, got {_got(value)}"
    return None


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
