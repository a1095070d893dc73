"""Avro payloads of typed topics' values <-> struct columns of the topic's Arrow type, column by
column (the columnar codecs :mod:`~sparklog.schemas.fast_decode` and
:mod:`~sparklog.schemas.fast_encode`; fastavro, :mod:`~sparklog.schemas.fastavro_codec`, is the
reference and the fallback).

* :func:`decode_avro` — Avro payloads (single-object encoding, or schemaless bytes with the writer's
  version given separately) -> a struct column; payloads of older versions are brought to the
  requested schema (:mod:`sparklog.schemas.evolution`).
* :func:`encode_avro` — a struct column (or anything :func:`~sparklog.schemas.conformance.conform`
  accepts) -> Avro payloads (single-object encoding by default).
* :func:`read_fingerprints`, :func:`as_binary_array` — the single-object framing.

Nulls: a null payload or a ``None`` row is a null value (a tombstone), never an error.
Bad input raises :class:`sparklog.errors.InvalidRecord` naming the row and the field.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import pyarrow as pa

from sparklog.errors import InvalidRecord, UnknownSchema
from sparklog.schemas import fast_decode, fast_encode
from sparklog.schemas.conformance import conform
from sparklog.schemas.evolution import evolve
from sparklog.schemas.fastavro_codec import decode_bodies_fastavro, encode_fastavro

if TYPE_CHECKING:
    from sparklog.schemas.schema_view import SchemaView

SINGLE_OBJECT_MAGIC = b"\xc3\x01"
SINGLE_OBJECT_HEADER = 10  # magic (2) + fingerprint (8)
Framing = Literal["single-object", "schemaless"]
FRAMINGS = ("single-object", "schemaless")
Lookup = Callable[[bytes], "SchemaView"]


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
    schema: SchemaView,
    *,
    framing: Framing = "single-object",
    writer: SchemaView | None = None,
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
            part = evolve(part, group_writer, schema)
        parts.append((rows, part))
    return _scatter(parts, n, schema.arrow_type)


def _group_by_fingerprint(
    fps: np.ndarray, valid: np.ndarray, schema: SchemaView, writer: SchemaView | None, lookup: Lookup | None
) -> list[tuple[SchemaView, np.ndarray]]:
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
    data: np.ndarray | bytes, starts: np.ndarray, ends: np.ndarray, writer: SchemaView, rows: np.ndarray | None = None
) -> pa.StructArray:
    """Decode Avro bodies ``data[starts[i]:ends[i]]`` written with ``writer`` into a column of its type
    (``rows`` only labels error messages)."""
    supported = writer.tree.__dict__.get("_fast_decode")
    if supported is None:
        supported = writer.tree.__dict__["_fast_decode"] = fast_decode.supported(writer.tree)
    if supported:
        return fast_decode.decode(data, starts, ends, writer.tree, rows, writer)
    return decode_bodies_fastavro(data, starts, ends, writer, rows)


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


def encode_avro(values: Any, schema: SchemaView, *, framing: Framing = "single-object") -> pa.Array:
    """A struct column (or anything :func:`conform` accepts) -> Avro payloads, one per row: binary,
    with ``C3 01`` + fingerprint in front of each body for ``framing="single-object"``; null values
    give null payloads."""
    if framing not in FRAMINGS:
        raise InvalidRecord(f"unknown Avro framing {framing!r}; use one of {', '.join(FRAMINGS)}")
    arr = conform(values, schema)
    prefix = SINGLE_OBJECT_MAGIC + schema.fingerprint if framing == "single-object" else b""
    if fast_encode.supported(schema.tree):
        return fast_encode.encode(arr, schema.tree, prefix)
    return encode_fastavro(arr, schema, prefix)
