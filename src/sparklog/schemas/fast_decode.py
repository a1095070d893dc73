"""A columnar Avro decoder: all payloads of a batch are decoded together, one field at a time, with
numpy (no Python object per record or value).

Avro's binary encoding is sequential within a record, but the same field of every record can be
read at once: the decoder keeps one read position per record and advances all of them by each
field's encoded size (varints are decoded with vectorized byte loops, strings are gathered into an
Arrow buffer in one go). Arrays and maps advance item by item across all records that still have
items (so the number of numpy steps grows with the longest array, not the number of items).

Anything unexpected (corrupt bytes, trailing bytes, a value out of range) makes :func:`decode` hand
the batch to the fastavro decoder, which names the bad row; so results and errors are fastavro's.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from sparklog.schemas._arrays import decimal_from_bytes
from sparklog.schemas.avro_arrow import Node
from sparklog.schemas.fastavro_codec import decode_bodies_fastavro

MAX_ITEM_STEPS = 4096  # longest array/map block handled column-wise; longer ones go to fastavro
_PAD = 16


class _Fallback(Exception):
    """The batch needs the reference decoder (corrupt data, or a shape this decoder does not do)."""


def min_size(node: Node) -> int:
    """The fewest bytes a value of ``node`` takes (to bound item counts read from the data)."""
    if node.union is not None:
        return 1 if node.union[0] is not None else 1 + _min_inner(node)
    return _min_inner(node)


def _min_inner(node: Node) -> int:
    kind = node.kind
    if kind == "null":
        return 0
    if kind == "float":
        return 4
    if kind == "double":
        return 8
    if kind == "fixed":
        return node.size or 0
    if kind == "record":
        return sum(min_size(f.node) for f in node.fields)
    return 1


def supported(node: Node) -> bool:
    """Whether the columnar decoder handles this schema (arrays/maps of zero-size items it does not)."""
    if node.kind in ("array", "map") and min_size(node.items) == 0:
        return False
    if node.items is not None and not supported(node.items):
        return False
    return all(supported(f.node) for f in node.fields)


def decode(
    data: np.ndarray | bytes,
    starts: np.ndarray,
    ends: np.ndarray,
    tree: Node,
    rows: np.ndarray | None = None,
    writer: object | None = None,
) -> pa.Array:
    """Decode ``data[starts[i]:ends[i]]`` (Avro bodies of ``tree``) into a column of ``tree.arrow``."""
    raw = np.frombuffer(data, dtype=np.uint8) if isinstance(data, bytes | bytearray | memoryview) else data
    starts = np.asarray(starts, dtype=np.int64)
    ends = np.asarray(ends, dtype=np.int64)
    try:
        if len(starts) and (starts.min() < 0 or ends.max() > len(raw) or (ends < starts).any()):
            raise _Fallback
        buf = np.concatenate([raw, np.zeros(_PAD, dtype=np.uint8)])
        arr, pos = _Decoder(buf).value(tree, starts.copy(), ends)
        if not np.array_equal(pos, ends):
            raise _Fallback
        return arr
    except (_Fallback, pa.ArrowInvalid, ValueError, IndexError, OverflowError):
        if writer is None:
            raise _Fallback from None
        return decode_bodies_fastavro(data, starts, ends, writer, rows)


class _Decoder:
    def __init__(self, buf: np.ndarray) -> None:
        self.buf = buf

    # ------------------------------------------------------------------ primitives
    def varint(self, pos: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Zigzag varints (Avro int and long) at ``pos`` -> (int64 values, positions after them)."""
        buf = self.buf
        b = buf[pos]
        acc = (b & 0x7F).astype(np.uint64)
        more = np.flatnonzero(b >= 0x80)
        length = np.ones(len(pos), dtype=np.int64)
        k = 1
        while len(more):
            if k > 9:
                raise _Fallback
            b = buf[pos[more] + k]
            acc[more] |= (b & 0x7F).astype(np.uint64) << np.uint64(7 * k)
            length[more] += 1
            more = more[b >= 0x80]
            k += 1
        new = pos + length
        if len(new) and (new > end).any():
            raise _Fallback
        values = (acc >> np.uint64(1)).view(np.int64) ^ -(acc & np.uint64(1)).view(np.int64)
        return values, new

    def fixed_bytes(self, pos: np.ndarray, width: int) -> np.ndarray:
        return self.buf[pos[:, None] + np.arange(width)]

    def blobs(self, pos: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Length-prefixed bytes -> (int32 offsets, data, positions after)."""
        lengths, pos = self.varint(pos, end)
        if len(lengths) and ((lengths < 0).any() or (lengths > end - pos).any()):
            raise _Fallback
        offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        total = int(offsets[-1])
        if total >= 2**31:
            raise _Fallback
        if total:
            idx = np.arange(total, dtype=np.int64) + np.repeat(pos - offsets[:-1], lengths)
            data = self.buf[idx]
        else:
            data = np.zeros(0, dtype=np.uint8)
        return offsets.astype(np.int32), data, pos + lengths

    # ------------------------------------------------------------------ nodes
    def value(self, node: Node, pos: np.ndarray, end: np.ndarray) -> tuple[pa.Array, np.ndarray]:
        if node.union is None:
            return self.inner(node, pos, end)
        null_branch, value_branch = node.union
        branch, pos = self.varint(pos, end)
        n = len(pos)
        is_value = branch == value_branch if value_branch is not None else np.zeros(n, dtype=bool)
        is_null = branch == null_branch if null_branch is not None else np.zeros(n, dtype=bool)
        if not (is_value | is_null).all():
            raise _Fallback
        if is_value.all():
            return self.inner(node, pos, end)
        if not is_value.any():
            return pa.nulls(n, node.arrow), pos
        sel = np.flatnonzero(is_value)
        sub, sub_pos = self.inner(node, pos[sel], end[sel])
        pos = pos.copy()
        pos[sel] = sub_pos
        indices = np.full(n, -1, dtype=np.int64)
        indices[sel] = np.arange(len(sel))
        return sub.take(pa.array(indices, mask=~is_value)), pos

    def inner(self, node: Node, pos: np.ndarray, end: np.ndarray) -> tuple[pa.Array, np.ndarray]:
        kind = node.kind
        n = len(pos)
        if kind == "null":
            return pa.nulls(n, node.arrow), pos
        if kind in ("int", "long"):
            values, pos = self.varint(pos, end)
            if kind == "int":
                if n and ((values < -(2**31)) | (values >= 2**31)).any():
                    raise _Fallback
                values = values.astype(np.int32)
            return pa.Array.from_buffers(node.arrow, n, [None, pa.py_buffer(values)]), pos
        if kind == "boolean":
            b = self.buf[pos]
            if n and (b > 1).any():
                raise _Fallback
            new = pos + 1
            if n and (new > end).any():
                raise _Fallback
            return pa.array(b.astype(bool), pa.bool_()), new
        if kind in ("float", "double"):
            width = 4 if kind == "float" else 8
            new = pos + width
            if n and (new > end).any():
                raise _Fallback
            raw = np.ascontiguousarray(self.fixed_bytes(pos, width))
            return pa.Array.from_buffers(node.arrow, n, [None, pa.py_buffer(raw)]), new
        if kind in ("bytes", "string"):
            offsets, data, pos = self.blobs(pos, end)
            physical = pa.Array.from_buffers(node.physical, n, [None, pa.py_buffer(offsets), pa.py_buffer(data)])
            if kind == "string":
                physical.validate(full=True)  # UTF-8
                return physical, pos
            if node.logical == "decimal":
                return decimal_from_bytes(physical, node.arrow, node.where), pos
            return physical, pos
        if kind == "fixed":
            new = pos + node.size
            if n and (new > end).any():
                raise _Fallback
            raw = np.ascontiguousarray(self.fixed_bytes(pos, node.size))
            physical = pa.Array.from_buffers(node.physical, n, [None, pa.py_buffer(raw)])
            if node.logical == "decimal":
                return decimal_from_bytes(physical, node.arrow, node.where), new
            return physical, new
        if kind == "enum":
            index, pos = self.varint(pos, end)
            if n and ((index < 0) | (index >= len(node.symbols))).any():
                raise _Fallback
            return _symbols(node).take(pa.array(index.astype(np.int32))), pos
        if kind == "record":
            children = []
            for f in node.fields:
                child, pos = self.value(f.node, pos, end)
                children.append(child)
            return pa.StructArray.from_arrays(children, fields=list(node.arrow)), pos
        if kind in ("array", "map"):
            return self.collection(node, pos, end)
        raise _Fallback

    def collection(self, node: Node, pos: np.ndarray, end: np.ndarray) -> tuple[pa.Array, np.ndarray]:
        """Arrays and maps: blocks of ``count`` items (negative count: a byte size follows), 0 ends."""
        n = len(pos)
        pos = pos.copy()
        counts = np.zeros(n, dtype=np.int64)
        owners: list[np.ndarray] = []
        seqs: list[np.ndarray] = []
        parts: list[pa.Array] = []
        item_min = max(min_size(node.items) + (1 if node.kind == "map" else 0), 1)
        active = np.arange(n)
        while len(active):
            count, p = self.varint(pos[active], end[active])
            negative = count < 0
            if negative.any():
                count = np.abs(count)
                _, p_size = self.varint(p[negative], end[active][negative])
                p[negative] = p_size
            pos[active] = p
            going = count > 0
            active, count = active[going], count[going]
            if not len(active):
                break
            if (count > (end[active] - pos[active]) // item_min).any():
                raise _Fallback
            steps = int(count.max())
            if steps > MAX_ITEM_STEPS:
                raise _Fallback
            for k in range(steps):
                sel = active[count > k]
                item, p = self.item(node, pos[sel], end[sel])
                pos[sel] = p
                owners.append(sel)
                seqs.append(counts[sel].copy())
                counts[sel] += 1
                parts.append(item)
        offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        item_type = (
            node.arrow.value_type if node.kind == "array" else pa.struct([node.arrow.key_field, node.arrow.item_field])
        )
        if parts:
            owner = np.concatenate(owners)
            seq = np.concatenate(seqs)
            values = pa.concat_arrays(parts) if len(parts) > 1 else parts[0]
            order = np.lexsort((seq, owner))
            if not np.array_equal(order, np.arange(len(order))):
                values = values.take(pa.array(order))
        else:
            values = pa.array([], type=item_type)
        offsets32 = pa.array(offsets.astype(np.int32))
        if node.kind == "map":
            return pa.MapArray.from_arrays(offsets32, values.field(0), values.field(1), type=node.arrow), pos
        return pa.ListArray.from_arrays(offsets32, values, type=node.arrow), pos

    def item(self, node: Node, pos: np.ndarray, end: np.ndarray) -> tuple[pa.Array, np.ndarray]:
        if node.kind == "array":
            return self.value(node.items, pos, end)
        offsets, data, pos = self.blobs(pos, end)
        keys = pa.Array.from_buffers(pa.string(), len(pos), [None, pa.py_buffer(offsets), pa.py_buffer(data)])
        keys.validate(full=True)
        values, pos = self.value(node.items, pos, end)
        return pa.StructArray.from_arrays([keys, values], fields=[node.arrow.key_field, node.arrow.item_field]), pos


def _symbols(node: Node) -> pa.Array:
    cached = node.__dict__.get("_symbols_array")
    if cached is None:
        cached = node.__dict__["_symbols_array"] = pa.array(list(node.symbols), pa.string())
    return cached
