"""Python dicts -> a typed topic's struct column (:func:`from_pylist`), with errors naming the row
and the field.

Nulls: a ``None`` row is a null value (a tombstone), never an error.
Bad input raises :class:`sparklog.errors.InvalidRecord` naming the row and the field.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from sparklog.errors import InvalidRecord
from sparklog.schemas._pycheck import explain
from sparklog.schemas.avro_arrow import Node
from sparklog.schemas.conformance import conform

if TYPE_CHECKING:
    from sparklog.schemas.schema_view import SchemaView


def from_pylist(rows: Iterable[Mapping[str, Any] | None], schema: SchemaView) -> pa.StructArray:
    """Python dicts (``None`` for a null value) -> a struct column of ``schema.arrow_type``.

    Values use Arrow's Python conversions: ints, floats, str, bytes, bool, ``datetime`` (or epoch
    ints in the schema's unit) for timestamps, ``date``, ``time``, ``Decimal``, dicts for records and
    maps, lists for arrays; enum symbols and uuids as strings. A missing or ``None`` field that is
    not nullable takes its default, else the row is refused; unknown top-level keys are refused.
    """
    rows = rows if isinstance(rows, list) else list(rows)
    tree = schema.tree
    for i, row in enumerate(rows):
        if row is not None and type(row) is not dict:
            if not isinstance(row, Mapping):
                raise InvalidRecord(f"row {i}: a value must be a dict (or None), got {type(row).__name__}")
            rows[i] = dict(row)
    if _has_unknown_keys([r for r in rows if r is not None], tree):
        raise InvalidRecord(explain(rows, tree) or f"values have fields unknown to {schema.label}")
    try:
        arr = pa.array(rows, type=schema.arrow_type)
    except (
        pa.ArrowInvalid,
        pa.ArrowTypeError,
        pa.ArrowNotImplementedError,
        TypeError,
        ValueError,
        OverflowError,
    ) as exc:
        raise InvalidRecord(explain(rows, tree) or f"values do not match {schema.label}: {exc}") from None
    try:
        return conform(arr, schema)
    except InvalidRecord as exc:  # say "missing" rather than "null" when a key was left out
        raise InvalidRecord(explain(rows, tree) or str(exc)) from None


def _has_unknown_keys(dicts: list[Any], node: Node) -> bool:
    """Whether any record dict (at any depth) has a key that is not a field (cheap: set unions)."""
    dicts = [d for d in dicts if type(d) is dict]
    if not dicts:
        return False
    if set().union(*dicts) - node.__dict__.setdefault("_names", frozenset(f.name for f in node.fields)):
        return True
    for f in node.fields:
        sub = f.node
        while sub.kind in ("array", "map") and sub.items is not None:
            sub = sub.items
        if sub.kind != "record":
            continue
        values = [d.get(f.name) for d in dicts]
        inner = f.node
        while inner.kind in ("array", "map"):
            if inner.kind == "array":
                values = [x for v in values if isinstance(v, list | tuple) for x in v]
            else:
                values = [x for v in values if isinstance(v, dict) for x in v.values()]
            inner = inner.items
        if _has_unknown_keys(values, inner):
            return True
    return False
