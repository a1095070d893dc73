"""Values of typed topics: Avro bytes, Python dicts and Arrow columns to and from the topic's Arrow
struct type, column by column wherever the formats allow it.

* :func:`decode_avro` — Avro payloads (single-object encoding, or schemaless bytes with the writer's
  version given separately) -> a struct column; payloads of older versions are brought to the
  requested schema (:mod:`sparklog.schemas.evolution`).
* :func:`encode_avro` — a struct column -> Avro payloads (single-object encoding by default).
* :func:`from_pylist` — Python dicts -> a struct column, with errors naming the row and the field.
* :func:`conform` — any Arrow struct column (or table of the fields) -> exactly the topic's Arrow type:
  fields matched by name, safe casts, defaults for missing fields, required fields checked.

Nulls: a null payload or a ``None`` row is a null value (a tombstone), never an error.
Bad input raises :class:`sparklog.errors.InvalidRecord` naming the row and the field.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Literal

import fastavro
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sparklog.errors import InvalidRecord
from sparklog.schemas._arrays import list_parts, make_list, make_struct, to_logical, to_physical
from sparklog.schemas.avro_arrow import Node
from sparklog.schemas.errors import UnknownSchema
from sparklog.schemas.value_schema import ValueSchema, default_column

SINGLE_OBJECT_MAGIC = b"\xc3\x01"
SINGLE_OBJECT_HEADER = 10  # magic (2) + fingerprint (8)
Framing = Literal["single-object", "schemaless"]
FRAMINGS = ("single-object", "schemaless")
Lookup = Callable[[bytes], ValueSchema]

UUID_PATTERN = r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"


# =========================================================================== framing


def as_binary_array(payloads: Any) -> pa.BinaryArray:
    """Payloads as one ``binary`` array (from a list of bytes/None, a (large) binary array or chunks)."""
    if isinstance(payloads, pa.ChunkedArray):
        payloads = payloads.combine_chunks() if payloads.num_chunks != 1 else payloads.chunk(0)
    if not isinstance(payloads, pa.Array):
        try:
            payloads = pa.array(list(payloads), type=pa.binary())
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError) as exc:
            raise InvalidRecord(f"Avro payloads must be bytes (or None), got {exc}") from None
    if pa.types.is_binary(payloads.type):
        return payloads
    if pa.types.is_null(payloads.type):
        return pa.nulls(len(payloads), pa.binary())
    if pa.types.is_large_binary(payloads.type) or pa.types.is_binary_view(payloads.type):
        return payloads.cast(pa.binary())
    raise InvalidRecord(f"Avro payloads must be a binary column, got {payloads.type}")


def _layout(payloads: pa.BinaryArray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(starts, ends, data bytes, valid mask) of a binary column."""
    n = len(payloads)
    bufs = payloads.buffers()
    offsets = np.frombuffer(bufs[1], dtype=np.int32, count=n + 1, offset=payloads.offset * 4).astype(np.int64)
    data = np.frombuffer(bufs[2], dtype=np.uint8) if bufs[2] is not None else np.zeros(0, np.uint8)
    valid = np.ones(n, dtype=bool) if payloads.null_count == 0 else payloads.is_valid().to_numpy(zero_copy_only=False)
    return offsets[:-1], offsets[1:], data, valid


def read_fingerprints(payloads: Any) -> np.ndarray:
    """The 8-byte fingerprints of single-object-encoded payloads as little-endian uint64 (0 where
    null), checking the ``C3 01`` marker of every payload."""
    payloads = as_binary_array(payloads)
    starts, ends, data, valid = _layout(payloads)
    return _fingerprints(starts, ends, data, valid)


def _fingerprints(starts: np.ndarray, ends: np.ndarray, data: np.ndarray, valid: np.ndarray) -> np.ndarray:
    n = len(starts)
    short = valid & (ends - starts < SINGLE_OBJECT_HEADER)
    if short.any():
        row = int(np.nonzero(short)[0][0])
        raise InvalidRecord(
            f"value at row {row} is not single-object-encoded Avro: {int(ends[row] - starts[row])} bytes, "
            f"less than the {SINGLE_OBJECT_HEADER}-byte header"
        )
    s = starts[valid]
    bad = (data[s] != 0xC3) | (data[s + 1] != 0x01)
    if bad.any():
        row = int(np.nonzero(valid)[0][np.nonzero(bad)[0][0]])
        head = data[starts[row] : starts[row] + 2].tobytes().hex(" ")
        raise InvalidRecord(f"value at row {row} is not single-object-encoded Avro: starts with {head}, expected c3 01")
    out = np.zeros(n, dtype=np.uint64)
    if len(s):
        idx = s[:, None] + np.arange(2, SINGLE_OBJECT_HEADER)
        out[valid] = data[idx].copy().view("<u8").ravel()
    return out


def _fp_int(fingerprint: bytes) -> int:
    return int.from_bytes(fingerprint, "little")


# =========================================================================== decode


def decode_avro(
    payloads: Any,
    schema: ValueSchema,
    *,
    framing: Framing = "single-object",
    writer: ValueSchema | None = None,
    lookup: Lookup | None = None,
) -> pa.StructArray:
    """Avro payloads -> a struct column of ``schema.arrow_type``.

    ``framing="single-object"``: each payload is ``C3 01`` + the writer schema's 8-byte fingerprint +
    the Avro body; payloads whose fingerprint is not ``schema``'s are decoded with the schema that
    ``lookup(fingerprint)`` returns (e.g. ``registry.lookup(topic)``) and evolved to ``schema``.
    ``framing="schemaless"``: payloads are bare Avro bodies written with ``writer`` (default ``schema``).
    Null payloads give null values. Malformed payloads raise :class:`InvalidRecord` naming the row.
    """
    if framing not in FRAMINGS:
        raise InvalidRecord(f"unknown Avro framing {framing!r}; use one of {', '.join(FRAMINGS)}")
    payloads = as_binary_array(payloads)
    n = len(payloads)
    starts, ends, data, valid = _layout(payloads)
    if framing == "schemaless":
        groups = [(writer or schema, np.nonzero(valid)[0])]
    else:
        fps = _fingerprints(starts, ends, data, valid)
        starts = starts + SINGLE_OBJECT_HEADER
        groups = _group_by_fingerprint(fps, valid, schema, writer, lookup)
    parts = []
    for group_writer, rows in groups:
        part = decode_bodies(data, starts[rows], ends[rows], group_writer, rows)
        if group_writer is not schema and not group_writer.same_as(schema):
            from sparklog.schemas.evolution import evolve

            part = evolve(part, group_writer, schema)
        parts.append((rows, part))
    return _scatter(parts, n, schema.arrow_type)


def _group_by_fingerprint(
    fps: np.ndarray, valid: np.ndarray, schema: ValueSchema, writer: ValueSchema | None, lookup: Lookup | None
) -> list[tuple[ValueSchema, np.ndarray]]:
    known = {_fp_int(schema.fingerprint): schema}
    if writer is not None:
        known.setdefault(_fp_int(writer.fingerprint), writer)
    present = fps[valid]
    if len(present) == 0:
        return []
    first = int(present[0])
    uniques = [first] if (present == first).all() else [int(u) for u in np.unique(present)]
    groups = []
    for fp in uniques:
        found = known.get(fp)
        if found is None:
            raw = fp.to_bytes(8, "little")
            if lookup is None:
                raise InvalidRecord(f"values are written with an unknown schema (fingerprint {raw.hex()})")
            try:
                found = lookup(raw)
            except UnknownSchema as exc:
                raise InvalidRecord(f"values are written with an unknown schema: {exc}") from None
        rows = np.nonzero(valid)[0] if len(uniques) == 1 else np.nonzero(valid & (fps == np.uint64(fp)))[0]
        groups.append((found, rows))
    return groups


def decode_bodies(
    data: np.ndarray | bytes, starts: np.ndarray, ends: np.ndarray, writer: ValueSchema, rows: np.ndarray | None = None
) -> pa.StructArray:
    """Decode Avro bodies ``data[starts[i]:ends[i]]`` written with ``writer`` into a column of its type
    (``rows`` only labels error messages)."""
    from sparklog.schemas import fast_decode

    supported = writer.tree.__dict__.get("_fast_decode")
    if supported is None:
        supported = writer.tree.__dict__["_fast_decode"] = fast_decode.supported(writer.tree)
    if supported:
        return fast_decode.decode(data, starts, ends, writer.tree, rows, writer)
    return decode_bodies_fastavro(data, starts, ends, writer, rows)


def decode_bodies_fastavro(
    data: np.ndarray | bytes, starts: np.ndarray, ends: np.ndarray, writer: ValueSchema, rows: np.ndarray | None = None
) -> pa.StructArray:
    """The reference decoder: fastavro per payload, then one ``pa.array`` over the dicts."""
    view = memoryview(data if isinstance(data, bytes) else np.ascontiguousarray(data)).cast("B")
    physical = writer.physical_avro
    read = fastavro.schemaless_reader
    records = []
    for i, (s, e) in enumerate(zip(starts.tolist(), ends.tolist(), strict=True)):
        body = io.BytesIO(view[s:e])
        try:
            records.append(read(body, physical, None))
        except Exception as exc:  # fastavro raises EOFError, ValueError, UnicodeDecodeError, IndexError...
            row = i if rows is None else int(rows[i])
            raise InvalidRecord(
                f"value at row {row} is not valid Avro for {writer.label}: {type(exc).__name__}: {exc}"
            ) from None
        if body.tell() != e - s:
            row = i if rows is None else int(rows[i])
            raise InvalidRecord(
                f"value at row {row} is not valid Avro for {writer.label}: "
                f"{e - s - body.tell()} bytes left over (written with another schema?)"
            )
    arr = pa.array(records, type=writer.tree.physical)
    return to_logical(arr, writer.tree)


def _scatter(parts: list[tuple[np.ndarray, pa.Array]], n: int, type_: pa.DataType) -> pa.StructArray:
    """Put decoded groups back at their rows, nulls elsewhere."""
    if not parts:
        return pa.nulls(n, type_)
    if len(parts) == 1 and len(parts[0][0]) == n:
        return parts[0][1]
    order = np.concatenate([rows for rows, _ in parts])
    combined = pa.concat_arrays([part for _, part in parts]) if len(parts) > 1 else parts[0][1]
    inverse = np.full(n, -1, dtype=np.int64)
    inverse[order] = np.arange(len(order))
    indices = pa.array(inverse, mask=inverse < 0)
    return combined.take(indices)


# =========================================================================== encode


def encode_avro(values: Any, schema: ValueSchema, *, framing: Framing = "single-object") -> pa.Array:
    """A struct column (or anything :func:`conform` accepts) -> Avro payloads, one per row: binary,
    with ``C3 01`` + fingerprint in front of each body for ``framing="single-object"``; null values
    give null payloads."""
    if framing not in FRAMINGS:
        raise InvalidRecord(f"unknown Avro framing {framing!r}; use one of {', '.join(FRAMINGS)}")
    arr = conform(values, schema)
    prefix = SINGLE_OBJECT_MAGIC + schema.fingerprint if framing == "single-object" else b""
    from sparklog.schemas import fast_encode

    if fast_encode.supported(schema.tree):
        return fast_encode.encode(arr, schema.tree, prefix)
    return encode_fastavro(arr, schema, prefix)


def encode_fastavro(arr: pa.StructArray, schema: ValueSchema, prefix: bytes = b"") -> pa.Array:
    """The reference encoder: ``to_pylist`` then fastavro per row into one buffer."""
    n = len(arr)
    physical_values = to_physical(arr, schema.tree)
    # (maps_as_pydicts is much slower, only ask for it when there are maps)
    rows = physical_values.to_pylist(maps_as_pydicts="strict") if schema.tree.has_map else physical_values.to_pylist()
    physical = schema.physical_avro
    write = fastavro.schemaless_writer
    out = io.BytesIO()
    offsets = np.zeros(n + 1, dtype=np.int64)
    for i, record in enumerate(rows):
        if record is not None:
            out.write(prefix)
            write(out, physical, record)
        offsets[i + 1] = out.tell()
    return binary_from_parts(offsets, out.getvalue(), arr)


def binary_from_parts(offsets: np.ndarray, data: bytes | np.ndarray, like: pa.Array) -> pa.Array:
    """A binary (or large_binary past 2 GiB) column from int64 offsets and data, nulls of ``like``."""
    from sparklog.schemas._arrays import validity_buffer

    n = len(offsets) - 1
    if offsets[-1] < 2**31:
        type_, offsets = pa.binary(), offsets.astype(np.int32)
    else:
        type_ = pa.large_binary()
    return pa.Array.from_buffers(
        type_, n, [validity_buffer(like), pa.py_buffer(offsets), pa.py_buffer(data)], like.null_count
    )


# =========================================================================== Python dicts


def from_pylist(rows: Iterable[Mapping[str, Any] | None], schema: ValueSchema) -> pa.StructArray:
    """Python dicts (``None`` for a null value) -> a struct column of ``schema.arrow_type``.

    Values use Arrow's Python conversions: ints, floats, str, bytes, bool, ``datetime`` (or epoch
    ints in the schema's unit) for timestamps, ``date``, ``time``, ``Decimal``, dicts for records and
    maps, lists for arrays; enum symbols and uuids as strings. A missing or ``None`` field that is
    not nullable takes its default, else the row is refused; unknown top-level keys are refused.
    """
    from sparklog.schemas._pycheck import explain

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


# =========================================================================== Arrow conformance


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


def conform(values: Any, schema: ValueSchema) -> pa.StructArray:
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
