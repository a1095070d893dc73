"""Arrow conformance: any Arrow struct column (or a table of the fields) -> exactly a typed topic's
Arrow struct type.

* :func:`conform` — fields matched by name, safe casts, defaults for missing fields, required
  fields, enum symbols and uuids checked.
* :func:`as_struct` — a struct column from a StructArray, a ChunkedArray or a Table/RecordBatch.

Nulls: a ``None`` row is a null value (a tombstone), never an error.
Bad input raises :class:`sparklog.errors.InvalidRecord` naming the row and the field.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sparklog.errors import InvalidRecord
from sparklog.schemas._arrays import list_parts, make_list, make_struct
from sparklog.schemas.avro_arrow import Node
from sparklog.schemas.defaults import default_column

if TYPE_CHECKING:
    from sparklog.schemas.schema_view import SchemaView

UUID_PATTERN = r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"


def as_struct(values: Any) -> pa.StructArray:
    """A struct column from a StructArray, a ChunkedArray of structs, or a Table/RecordBatch whose
    columns are the record's fields."""
    if isinstance(values, pa.Table):
        values = values.combine_chunks().to_batches()
        values = values[0] if len(values) == 1 else pa.concat_batches(values) if values else None
        if values is None:
            raise InvalidRecord("an empty table without batches has no values")
    if isinstance(values, pa.RecordBatch):
        return pa.StructArray.from_arrays(values.columns, fields=list(values.schema))
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks() if values.num_chunks != 1 else values.chunk(0)
    if not isinstance(values, pa.Array):
        raise InvalidRecord(f"expected Arrow values (a struct array or a table), got {type(values).__name__}")
    if isinstance(values, pa.DictionaryArray):
        values = values.dictionary_decode()
    return values


def conform(values: Any, schema: SchemaView) -> pa.StructArray:
    """Arrow values -> a struct column of exactly ``schema.arrow_type`` (zero-copy when it already is
    and every value is valid). Fields are matched by name; safe casts only (int32 -> int64, a smaller
    timestamp unit, ...; never a lossy one nor parsing text); missing nullable fields become nulls and
    missing fields with a default take it; required fields, enum symbols and uuids are checked.
    Raises :class:`InvalidRecord` naming the field (and row)."""
    arr = as_struct(values)
    root = schema.tree
    if not pa.types.is_struct(arr.type):
        raise InvalidRecord(f"values of {schema.label} must be a struct, got {arr.type}")
    return _Conformer().record(arr, root, _Loc(), _valid_of(arr, None))


class _Loc:
    """Maps a position in a (nested) column to the top-level row, for messages."""

    def __init__(self, parent: _Loc | None = None, parents: Callable[[], np.ndarray] | None = None) -> None:
        self.parent = parent
        self.parents = parents
        self._cache: np.ndarray | None = None

    def row(self, i: int) -> int:
        if self.parent is None or self.parents is None:
            return i
        if self._cache is None:
            self._cache = self.parents()
        return self.parent.row(int(self._cache[i]))


def _valid_of(arr: pa.Array, valid: pa.Array | None) -> pa.Array | None:
    """Positions where ``arr`` and all its ancestors are non-null (None: all of them)."""
    if arr.null_count == 0:
        return valid
    mine = arr.is_valid()
    return mine if valid is None else pc.and_(valid, mine)


def _first(mask: pa.Array) -> int | None:
    idx = pc.index(mask, True).as_py()
    return None if idx is None or idx < 0 else idx


def _castable(source: pa.DataType, node: Node) -> bool:
    t = pa.types
    target = node.arrow
    if t.is_boolean(target):
        return t.is_boolean(source)
    if t.is_integer(target):
        return t.is_integer(source)
    if t.is_floating(target):
        return t.is_integer(source) or t.is_floating(source)
    if t.is_decimal(target):
        return t.is_decimal(source) or t.is_integer(source)
    if t.is_string(target):
        return t.is_large_string(source) or t.is_string_view(source)
    if t.is_binary(target):
        return (
            t.is_large_binary(source)
            or t.is_binary_view(source)
            or t.is_string(source)
            or t.is_large_string(source)
            or t.is_fixed_size_binary(source)
        )
    if t.is_fixed_size_binary(target):
        return t.is_binary(source) or t.is_large_binary(source) or t.is_fixed_size_binary(source)
    if t.is_timestamp(target):
        return t.is_timestamp(source)
    if t.is_date(target):
        return t.is_date(source)
    if t.is_time(target):
        return t.is_time(source)
    return False


class _Conformer:
    def value(self, arr: pa.Array, node: Node, loc: _Loc, valid: pa.Array | None) -> pa.Array:
        if isinstance(arr, pa.DictionaryArray):
            arr = arr.dictionary_decode()
        if pa.types.is_null(arr.type):
            return pa.nulls(len(arr), node.arrow)
        if node.kind == "record":
            if not pa.types.is_struct(arr.type):
                raise InvalidRecord(f"{node.where} must be a struct (Avro {node.describe()}), got {arr.type}")
            return self.record(arr, node, loc, _valid_of(arr, valid))
        if node.kind in ("array", "map"):
            return self.collection(arr, node, loc, valid)
        return self.leaf(arr, node, loc, valid)

    def record(self, arr: pa.StructArray, node: Node, loc: _Loc, valid: pa.Array | None) -> pa.StructArray:
        by_name = {}
        for i, f in enumerate(arr.type):
            if f.name in by_name:
                raise InvalidRecord(f"{_child_where(node, f.name)} appears twice")
            by_name[f.name] = i
        unknown = [name for name in by_name if node.field(name) is None]
        if unknown:
            raise InvalidRecord(
                f"unknown {_child_where(node, unknown[0])}; {node.where} has {', '.join(f.name for f in node.fields)}"
            )
        kids = []
        unchanged = [f.name for f in arr.type] == [f.name for f in node.fields]
        for f in node.fields:
            if f.name in by_name:
                col = arr.field(by_name[f.name])
                out = self.value(col, f.node, loc, valid)
                unchanged = unchanged and out is col
            else:
                out = self._missing(arr, f, valid)
                unchanged = False
            kids.append(self._required(out, f, loc, valid))
            unchanged = unchanged and kids[-1] is out
        if unchanged and arr.type.equals(node.arrow):
            return arr
        return make_struct(kids, node.arrow, arr)

    def _missing(self, arr: pa.Array, f: Any, valid: pa.Array | None) -> pa.Array:
        if f.has_default:
            return default_column(f, len(arr))
        if f.node.nullable or f.node.kind == "null" or (valid is not None and not pc.any(valid).as_py()):
            return pa.nulls(len(arr), f.node.arrow)
        raise InvalidRecord(f"missing required {f.node.where} ({f.node.describe()}, no default)")

    def _required(self, col: pa.Array, f: Any, loc: _Loc, valid: pa.Array | None) -> pa.Array:
        """Nulls of a non-nullable field (where its parent is non-null): the default, else an error."""
        if f.node.nullable or f.node.kind == "null" or col.null_count == 0:
            return col
        bad = col.is_null() if valid is None else pc.and_(col.is_null(), valid)
        row = _first(bad)
        if row is None:
            return col
        if f.has_default:
            return pc.if_else(bad, default_column(f, len(col)), col)
        raise InvalidRecord(f"row {loc.row(row)}: {f.node.where} is null, but it is required ({f.node.describe()})")

    def collection(self, arr: pa.Array, node: Node, loc: _Loc, valid: pa.Array | None) -> pa.Array:
        t = pa.types
        if node.kind == "array":
            if t.is_large_list(arr.type) or t.is_fixed_size_list(arr.type) or t.is_list_view(arr.type):
                arr = arr.cast(pa.list_(arr.type.value_field))
            if not t.is_list(arr.type):
                raise InvalidRecord(f"{node.where} must be a list (Avro {node.describe()}), got {arr.type}")
        elif not t.is_map(arr.type):
            raise InvalidRecord(f"{node.where} must be a map<string, ...> (Avro {node.describe()}), got {arr.type}")
        offsets, values = list_parts(arr)
        counts = np.diff(offsets.to_numpy())

        def parents() -> np.ndarray:
            return np.repeat(np.arange(len(arr)), counts)

        item_loc = _Loc(loc, parents)
        list_valid = _valid_of(arr, valid)
        item_valid = None
        if list_valid is not None:
            item_valid = pc.take(list_valid, pa.array(parents()))
        items_node = node.items
        if node.kind == "map":
            keys = values.field(0)
            if not t.is_string(keys.type):
                if not (t.is_large_string(keys.type) or t.is_string_view(keys.type)):
                    raise InvalidRecord(f"{node.where}: map keys must be strings, got {keys.type}")
                keys = keys.cast(pa.string())
            items = values.field(1)
            new_items = self.value(items, items_node, item_loc, item_valid)
            new_items = self._item_required(new_items, items_node, item_loc, item_valid)
            if keys is values.field(0) and new_items is items and arr.type.equals(node.arrow):
                return arr
            entries = pa.StructArray.from_arrays(
                [keys, new_items], fields=[node.arrow.key_field, node.arrow.item_field]
            )
            return make_list(offsets, entries, node.arrow, arr)
        new_values = self.value(values, items_node, item_loc, item_valid)
        new_values = self._item_required(new_values, items_node, item_loc, item_valid)
        if new_values is values and arr.type.equals(node.arrow):
            return arr
        return make_list(offsets, new_values, node.arrow, arr)

    def _item_required(self, col: pa.Array, node: Node, loc: _Loc, valid: pa.Array | None) -> pa.Array:
        if node.nullable or node.kind == "null" or col.null_count == 0:
            return col
        bad = col.is_null() if valid is None else pc.and_(col.is_null(), valid)
        row = _first(bad)
        if row is not None:
            raise InvalidRecord(f"row {loc.row(row)}: {node.where} has a null item, but items are not nullable")
        return col

    def leaf(self, arr: pa.Array, node: Node, loc: _Loc, valid: pa.Array | None) -> pa.Array:
        target = node.arrow
        out = arr
        if not arr.type.equals(target):
            if not _castable(arr.type, node):
                raise InvalidRecord(f"{node.where} must be {target} (Avro {node.describe()}), got {arr.type}")
            try:
                out = arr.cast(target, safe=True)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
                raise InvalidRecord(f"{node.where}: cannot convert {arr.type} to {target} safely: {exc}") from None
        if node.kind == "enum":
            self._check(out, pc.invert(pc.is_in(out, value_set=_symbols(node))), node, loc, valid, "enum symbol")
        elif node.logical == "uuid" and node.kind == "string":
            self._check(out, pc.invert(pc.match_substring_regex(out, UUID_PATTERN)), node, loc, valid, "uuid")
        return out

    def _check(self, col: pa.Array, bad: pa.Array, node: Node, loc: _Loc, valid: pa.Array | None, what: str) -> None:
        bad = pc.and_(bad, col.is_valid())
        if valid is not None:
            bad = pc.and_(bad, valid)
        row = _first(bad)
        if row is not None:
            hint = f" (one of {', '.join(node.symbols)})" if node.kind == "enum" else ""
            raise InvalidRecord(f"row {loc.row(row)}: {node.where} has {col[row].as_py()!r}, not a valid {what}{hint}")


def _symbols(node: Node) -> pa.Array:
    cached = node.__dict__.get("_symbols_array")
    if cached is None:
        cached = node.__dict__["_symbols_array"] = pa.array(list(node.symbols), pa.string())
    return cached


def _child_where(node: Node, name: str) -> str:
    return f"field '{node.path}.{name}'" if node.path else f"field '{name}'"
