"""A columnar Avro encoder: a struct column -> one Avro body per row, built with numpy.

Every column is encoded on its own into *segments* (per row: where its bytes start in a buffer and
how many there are): varints for ints, longs, enum indexes, lengths and union branches; raw bytes for
floats, doubles, fixed, strings and bytes. A record's segment is its fields' segments one after the
other, an array's is ``count`` + its items' segments + ``0``; the segments are concatenated with one
vectorized scatter per field. The result matches fastavro byte for byte (the shortest varints, one
block per array or map, decimals in their shortest two's complement).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sparklog.schemas._arrays import binary_from_parts, decimal_to_bytes, list_parts
from sparklog.schemas.avro_arrow import Node


@dataclasses.dataclass
class Segments:
    """Per row ``i``: the bytes ``data[starts[i] : starts[i] + lengths[i]]``."""

    data: np.ndarray  # uint8
    starts: np.ndarray  # int64
    lengths: np.ndarray  # int64
    matrix: np.ndarray | None = None  # optional (rows, width) view: row i's bytes are matrix[i, :lengths[i]]


def supported(node: Node) -> bool:
    """The columnar encoder handles every schema that maps to Arrow."""
    return True


def encode(arr: pa.StructArray, tree: Node, prefix: bytes = b"") -> pa.Array:
    """Encode a conformed struct column of ``tree.arrow``; null rows give null payloads."""
    n = len(arr)
    parts = _Encoder().value(arr, tree)
    if prefix:
        head = np.frombuffer(prefix, dtype=np.uint8)
        parts.insert(0, Segments(head, np.zeros(n, dtype=np.int64), np.full(n, len(prefix), dtype=np.int64)))
    if arr.null_count:
        valid = arr.is_valid().to_numpy(zero_copy_only=False)
        parts = _without(parts, valid)
    out = concat(parts, n)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(out.lengths, out=offsets[1:])
    return binary_from_parts(offsets, out.data, arr)


# ---------------------------------------------------------------------------- segment algebra


def concat(parts: list[Segments], n: int) -> Segments:
    """Per row, the bytes of every part one after the other (packed)."""
    lengths = np.zeros(n, dtype=np.int64)
    widths = []
    for p in parts:
        lengths += p.lengths
        widths.append(int(p.lengths.max()) if n else 0)
    total = int(lengths.sum())
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    if n and sum(widths) * n <= 2 * total + 32 * n:
        return Segments(_concat_matrix(parts, n, widths), offsets[:-1], lengths)
    out = np.empty(total, dtype=np.uint8)
    cursor = offsets[:-1].copy()
    for p in parts:
        _copy(out, cursor, p)
        cursor += p.lengths
    return Segments(out, offsets[:-1], lengths)


_CHUNK_BYTES = 1 << 20  # rows are assembled in chunks of about this many bytes (cache-sized)


def _concat_matrix(parts: list[Segments], n: int, widths: list[int]) -> np.ndarray:
    """Rows of (nearly) equal widths: lay the parts side by side in a rows x W matrix, padded, and keep
    the real bytes in row-major order (one boolean gather instead of one scatter per part); done in
    cache-sized chunks of rows."""
    total_width = sum(widths)
    step = max(_CHUNK_BYTES // max(total_width, 1), 1)
    live = [(p, w, int(p.lengths.min()) == w, np.arange(w)) for p, w in zip(parts, widths, strict=True) if w]
    mat = np.empty((min(step, n), total_width), dtype=np.uint8)
    keep = np.empty((min(step, n), total_width), dtype=bool)
    out = []
    for lo in range(0, n, step):
        hi = min(lo + step, n)
        rows = hi - lo
        m, kp = mat[:rows], keep[:rows]
        col = 0
        for p, w, full, k in live:
            block = m[:, col : col + w]
            if p.matrix is not None:
                block[...] = p.matrix[lo:hi, :w]
            elif len(p.data):
                idx = p.starts[lo:hi, None] + k
                np.minimum(idx, len(p.data) - 1, out=idx)
                np.take(p.data, idx, out=block)
            if full:
                kp[:, col : col + w] = True
            else:
                np.less(k, p.lengths[lo:hi, None], out=kp[:, col : col + w])
            col += w
        out.append(m[kp])
    return np.concatenate(out) if len(out) != 1 else out[0]


def _copy(out: np.ndarray, at: np.ndarray, p: Segments) -> None:
    n = len(p.lengths)
    if n == 0:
        return
    lo, hi = int(p.lengths.min()), int(p.lengths.max())
    if hi == 0:
        return
    if lo == hi and hi <= 16:  # fixed width (doubles, one-byte varints): a 2-D scatter
        k = np.arange(hi)
        out[at[:, None] + k] = p.data[p.starts[:, None] + k]
        return
    total = int(p.lengths.sum())
    rel = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(p.lengths) - p.lengths, p.lengths)
    out[np.repeat(at, p.lengths) + rel] = p.data[np.repeat(p.starts, p.lengths) + rel]


def varints(values: np.ndarray) -> Segments:
    """Zigzag varints of int64 values (Avro int and long)."""
    v = values.astype(np.int64, copy=False)
    z = ((v << 1) ^ (v >> 63)).view(np.uint64)
    n = len(z)
    lengths = np.ones(n, dtype=np.int64)
    for k in range(1, 10):
        big = z >= np.uint64(1 << (7 * k))
        if not big.any():
            break
        lengths += big
    width = int(lengths.max()) if n else 1
    if width == 1:
        one = z.astype(np.uint8)
        return Segments(one, np.arange(n, dtype=np.int64), lengths, one.reshape(n, 1))
    mat = np.empty((n, width), dtype=np.uint8)
    for k in range(width):
        byte = ((z >> np.uint64(7 * k)) & np.uint64(0x7F)).astype(np.uint8)
        mat[:, k] = np.where(lengths > k + 1, byte | 0x80, byte)
    return Segments(mat.ravel(), np.arange(n, dtype=np.int64) * width, lengths, mat)


def _numbers(arr: pa.Array, dtype: type) -> np.ndarray:
    """The values buffer of a fixed-width column as numpy (nulls: whatever is in the buffer)."""
    return np.frombuffer(arr.buffers()[1], dtype=dtype, count=len(arr), offset=arr.offset * np.dtype(dtype).itemsize)


def _blobs(arr: pa.Array) -> list[Segments]:
    """Length-prefixed bytes of a binary or string column (two parts: lengths, bytes)."""
    n = len(arr)
    bufs = arr.buffers()
    offsets = np.frombuffer(bufs[1], dtype=np.int32, count=n + 1, offset=arr.offset * 4).astype(np.int64)
    data = np.frombuffer(bufs[2], dtype=np.uint8) if bufs[2] is not None else np.zeros(0, np.uint8)
    lengths = np.diff(offsets)
    if arr.null_count:
        lengths = np.where(arr.is_valid().to_numpy(zero_copy_only=False), lengths, 0)
    return [varints(lengths), Segments(data, offsets[:-1], lengths)]


def _without(parts: list[Segments], valid: np.ndarray) -> list[Segments]:
    """The parts with nothing in the rows that are not ``valid``."""
    return [Segments(p.data, p.starts, np.where(valid, p.lengths, 0), p.matrix) for p in parts]


class _Encoder:
    """Each method returns the parts (segments) whose per-row concatenation is the encoding; they are
    only concatenated where needed (the whole value, array items), to copy bytes as rarely as possible."""

    def value(self, arr: pa.Array, node: Node) -> list[Segments]:
        if node.union is None:
            return self.inner(arr, node)
        null_branch, value_branch = node.union
        n = len(arr)
        if null_branch is None or arr.null_count == 0:
            return [varints(np.full(n, value_branch, dtype=np.int64)), *self.inner(arr, node)]
        valid = arr.is_valid().to_numpy(zero_copy_only=False)
        branch = np.where(valid, value_branch if value_branch is not None else null_branch, null_branch)
        if value_branch is None:
            return [varints(branch)]
        return [varints(branch), *_without(self.inner(arr, node), valid)]

    def inner(self, arr: pa.Array, node: Node) -> list[Segments]:
        kind = node.kind
        n = len(arr)
        if kind == "null":
            return []
        if kind in ("int", "long"):
            dtype = np.int32 if kind == "int" else np.int64
            return [varints(_numbers(arr.cast(node.physical) if node.logical else arr, dtype))]
        if kind == "boolean":
            bits = arr.fill_null(False).to_numpy(zero_copy_only=False).astype(np.uint8)
            return [Segments(bits, np.arange(n, dtype=np.int64), np.ones(n, dtype=np.int64), bits.reshape(n, 1))]
        if kind in ("float", "double"):
            width = 4 if kind == "float" else 8
            raw = _numbers(arr, np.float32 if kind == "float" else np.float64).view(np.uint8)
            starts = np.arange(n, dtype=np.int64) * width
            return [Segments(raw, starts, np.full(n, width, dtype=np.int64), raw.reshape(n, width))]
        if kind in ("bytes", "string"):
            if node.logical == "decimal":
                arr = decimal_to_bytes(arr, None, node.where)
            return _blobs(arr)
        if kind == "fixed":
            if node.logical == "decimal":
                arr = decimal_to_bytes(arr, node.size, node.where)
            size = node.size
            raw = np.frombuffer(arr.buffers()[1], dtype=np.uint8)
            starts = (np.arange(n, dtype=np.int64) + arr.offset) * size
            matrix = raw[arr.offset * size : (arr.offset + n) * size].reshape(n, size)
            return [Segments(raw, starts, np.full(n, size, dtype=np.int64), matrix)]
        if kind == "enum":
            index = pc.index_in(arr, value_set=_symbols(node)).fill_null(0)
            return [varints(index.to_numpy(zero_copy_only=False).astype(np.int64))]
        if kind == "record":
            return [part for i, f in enumerate(node.fields) for part in self.value(arr.field(i), f.node)]
        if kind in ("array", "map"):
            return self.collection(arr, node)
        raise TypeError(f"cannot encode Avro {kind}")

    def collection(self, arr: pa.Array, node: Node) -> list[Segments]:
        n = len(arr)
        offsets, values = list_parts(arr)
        off = offsets.to_numpy().astype(np.int64)
        counts = np.diff(off)
        if arr.null_count:  # null lists under null parents: encode as empty
            counts = np.where(arr.is_valid().to_numpy(zero_copy_only=False), counts, 0)
        m = len(values)
        if node.kind == "map":
            items = concat([*_blobs(values.field(0)), *self.value(values.field(1), node.items)], m)
        else:
            items = concat(self.value(values, node.items), m)
        item_end = np.zeros(m + 1, dtype=np.int64)
        np.cumsum(items.lengths, out=item_end[1:])
        body = Segments(items.data, item_end[off[:-1]], np.where(counts > 0, item_end[off[1:]] - item_end[off[:-1]], 0))
        head = varints(counts)
        head.lengths = np.where(counts > 0, head.lengths, 0)
        end = Segments(np.zeros(1, np.uint8), np.zeros(n, np.int64), np.ones(n, np.int64))
        return [head, body, end]


def _symbols(node: Node) -> pa.Array:
    cached = node.__dict__.get("_symbols_array")
    if cached is None:
        cached = node.__dict__["_symbols_array"] = pa.array(list(node.symbols), pa.string())
    return cached
