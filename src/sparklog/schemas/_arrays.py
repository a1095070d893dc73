"""Column helpers: take nested Arrow arrays apart and put them back together without copying the
children, and convert logical columns (decimals, timestamps, dates...) to and from Avro's physical form.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sparklog.errors import InvalidRecord
from sparklog.schemas.avro_arrow import Node


def validity_buffer(arr: pa.Array) -> pa.Buffer | None:
    """A validity bitmap for ``arr`` that starts at bit 0 (shared when the offset allows, else computed)."""
    if arr.null_count == 0:
        return None
    if arr.offset == 0:
        return arr.buffers()[0]
    if arr.offset % 8 == 0:
        buf = arr.buffers()[0]
        return buf.slice(arr.offset // 8)
    return arr.is_valid().buffers()[1]


def with_validity(values: pa.Array, like: pa.Array) -> pa.Array:
    """``values`` (offset 0, no nulls of its own) with the nulls of ``like`` (same length)."""
    if like.null_count == 0:
        return values
    bufs = values.buffers()
    return pa.Array.from_buffers(values.type, len(values), [validity_buffer(like), *bufs[1:]], like.null_count)


def binary_from_parts(offsets: np.ndarray, data: bytes | np.ndarray, like: pa.Array) -> pa.Array:
    """A binary (or large_binary past 2 GiB) column from int64 offsets and data, nulls of ``like``."""
    n = len(offsets) - 1
    if offsets[-1] < 2**31:
        type_, offsets = pa.binary(), offsets.astype(np.int32)
    else:
        type_ = pa.large_binary()
    return pa.Array.from_buffers(
        type_, n, [validity_buffer(like), pa.py_buffer(offsets), pa.py_buffer(data)], like.null_count
    )


def null_mask(arr: pa.Array) -> pa.Array | None:
    return arr.is_null() if arr.null_count else None


def struct_children(arr: pa.StructArray) -> list[pa.Array]:
    """The child columns, aligned with ``arr``'s rows (zero-copy slices)."""
    return [arr.field(i) for i in range(arr.type.num_fields)]


def make_struct(children: list[pa.Array], type_: pa.StructType, like: pa.Array) -> pa.StructArray:
    """A struct of ``type_`` over ``children`` with the nulls of ``like``."""
    if not children:
        raise InvalidRecord("an Arrow struct needs at least one field")
    return pa.StructArray.from_arrays(children, fields=list(type_), mask=null_mask(like))


def list_parts(arr: pa.ListArray | pa.MapArray) -> tuple[pa.Array, pa.Array]:
    """(offsets, values) of a list or map column, with values covering exactly the used range
    (zero-copy unless the column is a slice that does not start at its first value)."""
    offsets = arr.offsets
    values = arr.values
    if len(offsets) == 0:
        return pa.array([0], pa.int32()), values.slice(0, 0)
    first, last = offsets[0].as_py(), offsets[-1].as_py()
    if first != 0 or last != len(values):
        values = values.slice(first, last - first)
        if first:
            offsets = pc.subtract(offsets, pa.scalar(first, offsets.type))
    return offsets, values


def make_list(offsets: pa.Array, values: pa.Array, type_: pa.DataType, like: pa.Array) -> pa.Array:
    """A list (or map, when ``type_`` is one) column of ``type_`` with the nulls of ``like``."""
    mask = null_mask(like)
    if pa.types.is_map(type_):
        return pa.MapArray.from_arrays(offsets, values.field(0), values.field(1), type=type_, mask=mask)
    return pa.ListArray.from_arrays(offsets, values, type=type_, mask=mask)


def rebuild(arr: pa.Array, node: Node, child: Callable[[pa.Array, Node], pa.Array], type_: pa.DataType) -> pa.Array:
    """``arr`` (a record, array or map column of ``node``) with each child column replaced by
    ``child(column, child_node)``, as an array of ``type_``."""
    if node.kind == "record":
        kids = [child(col, f.node) for col, f in zip(struct_children(arr), node.fields, strict=True)]
        return make_struct(kids, type_, arr)
    offsets, values = list_parts(arr)
    if node.kind == "map":
        items = child(values.field(1), node.items)
        entries = pa.StructArray.from_arrays([values.field(0), items], fields=[type_.key_field, type_.item_field])
        return make_list(offsets, entries, type_, arr)
    return make_list(offsets, child(values, node.items), type_, arr)


# --------------------------------------------------------------------------- logical <-> physical


def to_logical(arr: pa.Array, node: Node) -> pa.Array:
    """A column of ``node.physical`` (what fastavro gives) -> ``node.arrow`` (what is stored)."""
    if node.plain:
        return arr
    if node.kind in ("record", "array", "map"):
        return rebuild(arr, node, to_logical, node.arrow)
    if pa.types.is_decimal(node.arrow):
        return decimal_from_bytes(arr, node.arrow, node.where)
    return arr.cast(node.arrow)


def to_physical(arr: pa.Array, node: Node) -> pa.Array:
    """A column of ``node.arrow`` -> ``node.physical`` (what fastavro writes)."""
    if node.plain:
        return arr
    if node.kind in ("record", "array", "map"):
        return rebuild(arr, node, to_physical, node.physical)
    if pa.types.is_decimal(node.arrow):
        return decimal_to_bytes(arr, node.size, node.where)
    return arr.cast(node.physical)


def _binary_layout(arr: pa.Array) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(starts, lengths, data bytes) of a binary or fixed_size_binary column."""
    n = len(arr)
    bufs = arr.buffers()
    if pa.types.is_fixed_size_binary(arr.type):
        width = arr.type.byte_width
        data = np.frombuffer(bufs[1], dtype=np.uint8) if bufs[1] is not None else np.zeros(0, np.uint8)
        starts = (np.arange(n, dtype=np.int64) + arr.offset) * width
        return starts, np.full(n, width, dtype=np.int64), data
    offsets = np.frombuffer(bufs[1], dtype=np.int32, count=n + 1, offset=arr.offset * 4).astype(np.int64)
    data = np.frombuffer(bufs[2], dtype=np.uint8) if bufs[2] is not None else np.zeros(0, np.uint8)
    return offsets[:-1], np.diff(offsets), data


def decimal_from_bytes(arr: pa.Array, type_: pa.DataType, where: str = "the value") -> pa.Array:
    """Avro decimals (big-endian two's-complement bytes or fixed) -> a decimal128/256 column, vectorized."""
    n = len(arr)
    width = type_.byte_width
    starts, lengths, data = _binary_layout(arr)
    valid = np.ones(n, dtype=bool) if arr.null_count == 0 else arr.is_valid().to_numpy(zero_copy_only=False)
    lengths = np.where(valid, lengths, 0)
    if n and lengths.max(initial=0) > width:
        # longer than needed: legal if the extra leading bytes only extend the sign
        for i in np.nonzero(lengths > width)[0]:
            raw = data[starts[i] : starts[i] + lengths[i]].tobytes()
            value = int.from_bytes(raw, "big", signed=True)
            try:
                trimmed = value.to_bytes(width, "big", signed=True)
            except OverflowError:
                raise InvalidRecord(f"{where}: decimal value at row {i} does not fit {type_}") from None
            data = np.concatenate([data, np.frombuffer(trimmed, np.uint8)])
            starts[i], lengths[i] = len(data) - width, width
    out = np.zeros((n, width), dtype=np.uint8)
    nonempty = lengths > 0
    negative = np.zeros(n, dtype=bool)
    negative[nonempty] = data[starts[nonempty]] >= 0x80
    out[negative] = 0xFF
    total = int(lengths.sum())
    if total:
        rows = np.repeat(np.arange(n), lengths)
        k = np.arange(total) - np.repeat(np.cumsum(lengths) - lengths, lengths)
        out[rows, lengths[rows] - 1 - k] = data[np.repeat(starts, lengths) + k]
    values = pa.Array.from_buffers(type_, n, [None, pa.py_buffer(out)])
    return with_validity(values, arr)


def decimal_to_bytes(arr: pa.Array, fixed_size: int | None = None, where: str = "the value") -> pa.Array:
    """A decimal128/256 column -> Avro's big-endian two's-complement bytes: minimal length
    (like Java's ``BigInteger.toByteArray``), or exactly ``fixed_size`` bytes for a fixed decimal."""
    n = len(arr)
    width = arr.type.byte_width
    raw = np.frombuffer(arr.buffers()[1], dtype=np.uint8)[arr.offset * width : (arr.offset + n) * width]
    be = raw.reshape(n, width)[:, ::-1]
    sign = np.where(be[:, 0] >= 0x80, 0xFF, 0).astype(np.uint8) if n else np.zeros(0, np.uint8)
    redundant = be == sign[:, None]
    run = np.where(redundant.all(axis=1), width, np.argmin(redundant, axis=1))
    # drop the leading sign bytes, but keep one when the next byte's top bit would flip the sign
    nxt = be[np.arange(n), np.minimum(run, width - 1)]
    keep_one = (run == width) | ((nxt >= 0x80) != (sign == 0xFF))
    start = np.maximum(run - keep_one.astype(np.int64), 0)
    needed = width - start
    if fixed_size is not None:
        valid = np.ones(n, dtype=bool) if arr.null_count == 0 else arr.is_valid().to_numpy(zero_copy_only=False)
        too_big = valid & (needed > fixed_size)
        if too_big.any():
            row = int(np.nonzero(too_big)[0][0])
            raise InvalidRecord(f"{where}: decimal value at row {row} does not fit fixed({fixed_size})")
        if fixed_size <= width:
            out = np.ascontiguousarray(be[:, width - fixed_size :])
        else:
            out = np.concatenate([np.repeat(sign[:, None], fixed_size - width, axis=1), be], axis=1)
        values = pa.Array.from_buffers(pa.binary(fixed_size), n, [None, pa.py_buffer(out)])
        return with_validity(values, arr)
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(needed, out=offsets[1:])
    total = int(offsets[-1])
    rows = np.repeat(np.arange(n), needed)
    k = np.arange(total) - np.repeat(offsets[:-1].astype(np.int64), needed)
    data = be[rows, start[rows] + k] if total else np.zeros(0, np.uint8)
    values = pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data)])
    return with_validity(values, arr)
