"""Bring values written with an older schema version to a newer version's Arrow type.

A segment never mixes schema versions, but a reader may get batches of version 1 and version 2 of a
topic; :func:`evolve` turns a version-1 column into version 2's type with Avro's resolution rules,
column by column: fields are matched by name (or the reader's aliases), fields the reader added take
their default (or null), fields it removed are dropped, numbers are promoted (int -> long -> float
-> double, as Avro does: possibly inexact), string <-> bytes, enum symbols the reader lacks take its
enum default, decimals widen. Unchanged columns are passed through without a copy.

Raises :class:`IncompatibleSchema` when the reader cannot read the writer's data at all (a checked
registry never lets that happen within the topic's compatibility mode) and :class:`InvalidRecord`
when particular values cannot be converted (a null for a field that became required, bytes that are
not UTF-8 read as a string, an enum symbol without a default).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from sparklog.errors import IncompatibleSchema, InvalidRecord
from sparklog.schemas._arrays import list_parts, make_list, make_struct, struct_children
from sparklog.schemas.avro import short_name
from sparklog.schemas.avro_arrow import Field, Node
from sparklog.schemas.defaults import default_column

if TYPE_CHECKING:
    from sparklog.schemas.schema_view import SchemaView

_PROMOTIONS = {
    ("int", "long"),
    ("int", "float"),
    ("int", "double"),
    ("long", "float"),
    ("long", "double"),
    ("float", "double"),
    ("string", "bytes"),
    ("bytes", "string"),
}


def evolve(values: pa.Array, writer: SchemaView, reader: SchemaView) -> pa.StructArray:
    """``values`` (of ``writer.arrow_type``) as ``reader.arrow_type``; zero-copy if nothing changes."""
    if writer is reader or writer.same_as(reader):
        return values
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if not values.type.equals(writer.arrow_type):
        raise InvalidRecord(f"values are {values.type}, not the type of {writer.label} ({writer.arrow_type})")
    return _Evolver(writer, reader).node(values, writer.tree, reader.tree)


def needs_evolution(writer: SchemaView, reader: SchemaView) -> bool:
    """Whether values of ``writer`` must be converted to be values of ``reader``."""
    return not (writer.same_as(reader) or _same(writer.tree, reader.tree))


def same_data(w: Node, r: Node) -> bool:
    """Data of type node ``w`` already is data of ``r``: nothing to convert (see :func:`needs_evolution`)."""
    return _same(w, r)


def _same(w: Node, r: Node) -> bool:
    """Data of ``w`` already is data of ``r`` (same Arrow type, no symbol or nullability narrowing)."""
    if not w.arrow.equals(r.arrow) or (w.nullable and not r.nullable):
        return False
    if w.kind == "enum":
        return set(w.symbols) <= set(r.symbols)
    if w.kind == "record":
        return all(_same(wf.node, rf.node) for wf, rf in zip(w.fields, r.fields, strict=True))
    if w.items is not None and r.items is not None:
        return _same(w.items, r.items)
    return True


class _Evolver:
    def __init__(self, writer: SchemaView, reader: SchemaView) -> None:
        self.writer, self.reader = writer, reader

    def fail(self, r: Node, why: str) -> IncompatibleSchema:
        return IncompatibleSchema(f"{r.where}: {self.reader.label} cannot read data of {self.writer.label}: {why}")

    def node(self, arr: pa.Array, w: Node, r: Node, valid: pa.Array | None = None) -> pa.Array:
        """``valid``: rows whose ancestors are all non-null (None: every row)."""
        if _same(w, r):
            return arr
        if w.kind == "null":
            if r.nullable or r.kind == "null":
                return pa.nulls(len(arr), r.arrow)
            raise self.fail(r, "null is not readable as " + r.describe())
        if w.kind != r.kind:
            if (w.kind, r.kind) not in _PROMOTIONS or w.logical or r.logical:
                raise self.fail(r, f"{w.describe()} is not readable as {r.describe()}")
            return self.promote(arr, w, r)
        if w.kind in ("record", "enum", "fixed") and not _names_match(w, r):
            raise self.fail(r, f"named type {w.name} is not {r.name} (nor one of its aliases)")
        if w.kind == "record":
            return self.record(arr, w, r, _valid_of(arr, valid))
        if w.kind in ("array", "map"):
            return self.collection(arr, w, r)
        if w.kind == "enum":
            return self.enum(arr, w, r)
        if w.kind == "fixed" and w.size != r.size:
            raise self.fail(r, f"fixed size {w.size} is not {r.size}")
        if w.arrow.equals(r.arrow):
            return arr
        if pa.types.is_decimal(w.arrow) and pa.types.is_decimal(r.arrow) and w.arrow.scale == r.arrow.scale:
            return arr.cast(r.arrow)
        raise self.fail(r, f"{w.describe()} is not readable as {r.describe()}")

    def promote(self, arr: pa.Array, w: Node, r: Node) -> pa.Array:
        try:
            return arr.cast(r.arrow, safe=(w.kind, r.kind) == ("bytes", "string"))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            raise InvalidRecord(
                f"{r.where}: cannot read {w.describe()} of {self.writer.label} as {r.describe()}: {exc}"
            ) from None

    def record(self, arr: pa.StructArray, w: Node, r: Node, valid: pa.Array | None) -> pa.StructArray:
        columns = dict(zip((f.name for f in w.fields), struct_children(arr), strict=True))
        kids = []
        for rf in r.fields:
            wf = _writer_field(w, rf)
            if wf is None:
                kids.append(self.added(rf, len(arr)))
                continue
            col = self.node(columns[wf.name], wf.node, rf.node, valid)
            kids.append(self.required(col, wf.node, rf, valid))
        return make_struct(kids, r.arrow, arr)

    def added(self, rf: Field, length: int) -> pa.Array:
        if rf.has_default:
            return default_column(rf, length)
        if rf.node.nullable or rf.node.kind == "null":
            return pa.nulls(length, rf.node.arrow)
        raise self.fail(rf.node, "the field is not in the writer's schema and has no default")

    def required(self, col: pa.Array, w: Node, rf: Field, valid: pa.Array | None) -> pa.Array:
        """A nullable writer field read as a required one: its nulls take the default, else fail."""
        if not w.nullable or rf.node.nullable or col.null_count == 0:
            return col
        bad = col.is_null() if valid is None else pc.and_(col.is_null(), valid)
        if not pc.any(bad).as_py():
            return col
        if rf.has_default:
            return pc.if_else(bad, default_column(rf, len(col)), col)
        row = pc.index(bad, True).as_py()
        raise InvalidRecord(
            f"row {row}: {rf.node.where} is null in {self.writer.label} but required in {self.reader.label}"
        )

    def collection(self, arr: pa.Array, w: Node, r: Node) -> pa.Array:
        offsets, values = list_parts(arr)
        if w.items.nullable and not r.items.nullable:
            inner = values.field(1) if w.kind == "map" else values
            if inner.null_count:
                raise InvalidRecord(
                    f"{r.items.where}: null items of {self.writer.label} are not allowed by {self.reader.label}"
                )
        if w.kind == "map":
            items = self.node(values.field(1), w.items, r.items)
            entries = pa.StructArray.from_arrays(
                [values.field(0), items], fields=[r.arrow.key_field, r.arrow.item_field]
            )
            return make_list(offsets, entries, r.arrow, arr)
        return make_list(offsets, self.node(values, w.items, r.items), r.arrow, arr)

    def enum(self, arr: pa.Array, w: Node, r: Node) -> pa.Array:
        missing = [s for s in w.symbols if s not in r.symbols]
        if not missing:
            return arr
        unknown = pc.and_(pc.is_in(arr, value_set=pa.array(missing, pa.string())), arr.is_valid())
        if not pc.any(unknown).as_py():
            return arr
        if r.enum_default is None:
            row = pc.index(unknown, True).as_py()
            raise InvalidRecord(
                f"row {row}: {r.where} has symbol {arr[row].as_py()!r}, unknown to {self.reader.label} "
                "(whose enum has no default)"
            )
        return pc.if_else(unknown, pa.scalar(r.enum_default, pa.string()), arr)


def _valid_of(arr: pa.Array, valid: pa.Array | None) -> pa.Array | None:
    if arr.null_count == 0:
        return valid
    mine = arr.is_valid()
    return mine if valid is None else pc.and_(valid, mine)


def _writer_field(w: Node, rf: Field) -> Field | None:
    found = w.field(rf.name)
    if found is not None:
        return found
    for alias in rf.aliases:
        found = w.field(alias)
        if found is not None:
            return found
    return None


def _names_match(w: Node, r: Node) -> bool:
    if w.name is None or r.name is None:
        return True
    aliases = {short_name(a) for a in (r.schema.get("aliases", ()) if isinstance(r.schema, dict) else ())}
    return short_name(w.name) == short_name(r.name) or short_name(w.name) in aliases
