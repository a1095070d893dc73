"""Produce requests as the fuzzer sends them: frames (:mod:`sparklog.protocol.record_frames`),
well-formed or mutated, the records' schema the descriptor names, and what the broker must make
of a frame it was sent.

A frame is one encapsulated Arrow IPC record batch message (compressed when the case says so)
followed by the batch's JSON metadata. A case may mutate one frame of its stream
(:data:`MUTATIONS`, applied by :func:`mutate` from a seed) and name the records' schema in
another way than the batches' own (:data:`SCHEMA_MODES`). What the broker must then do is
predicted by :func:`predict`, which reads the frame exactly as the broker does (its declared
rows and decoded bytes against the limits first, then the decode with the named schema, then
Arrow's full validation): a frame it cannot read, or declaring too much, must be refused; one it
can read must, if acknowledged, read back as the batch decoded from it (what the ledger then
expects instead of the batch the case built).
"""

from __future__ import annotations

import base64
import dataclasses
import struct
from typing import Any

import numpy as np
import pyarrow as pa

from sparklog.protocol.record_frames import SCHEMA_FIELD, read_frame, schema_of, schema_text
from sparklog.records import wire_schema

# how a frame may be mutated (``None``: sent as built)
MUTATIONS = (
    "metadata",  # the JSON metadata replaced by broken JSON, or its bytes changed
    "flip",  # bytes of the IPC message changed anywhere
    "flip_metadata",  # bytes of the message's FlatBuffer metadata changed (what the broker reads first)
    "flip_body",  # bytes of the message's body changed (its buffers)
    "truncate",  # the message cut short (the JSON metadata still follows)
    "declared_size",  # the first buffer's length prefix (its decompressed size, if compressed) changed
    "schema_message",  # the schema's IPC message instead of the batch's
    "end_marker",  # Arrow's end-of-stream marker instead of a message
    "garbage",  # random bytes
    "no_frame",  # a Flight message without app metadata (a record batch of the empty schema)
)
# how the descriptor names the records' schema
SCHEMA_MODES = ("named", "missing", "garbage", "other")
GARBAGE_SCHEMAS: tuple[Any, ...] = (
    7,
    "",
    None,
    ["a"],
    "not base64!",
    "QUJD",  # "ABC"
    base64.b64encode(b"\xff\xff\xff\xff\x00\x00\x00\x00").decode(),  # the end-of-stream marker
)
_END_MARKER = b"\xff\xff\xff\xff\x00\x00\x00\x00"
_BROKEN_METADATA = (b"not json", b"[]", b'"text"', b"{", b'{"sequence": "x"}', b"\xff\xfe", b"null", b"{}}")


def message_bytes(batch: pa.RecordBatch, compression: str | None) -> bytes:
    """The batch's encapsulated record batch message, compressed with ``compression`` if given (as
    Arrow's IPC stream writer makes it)."""
    if not compression:
        return batch.serialize().to_pybytes()
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema, options=pa.ipc.IpcWriteOptions(compression=compression)) as writer:
        writer.write_batch(batch)
    messages = pa.ipc.MessageReader.open_stream(sink.getvalue())
    messages.read_next_message()  # the schema's
    return messages.read_next_message().serialize().to_pybytes()


@dataclasses.dataclass
class Frame:
    """A frame to send (``data`` None: a Flight message without one) and whether it was mutated."""

    data: bytes | None
    mutated: str | None = None


def build(
    batch: pa.RecordBatch, metadata: bytes | None, compression: str | None, mutation: dict[str, Any] | None = None
) -> Frame:
    """One frame of ``batch`` and its JSON ``metadata`` (None: none, ``{}``), with ``mutation``
    (``{"kind": one of MUTATIONS, "seed": n}``) applied."""
    message = message_bytes(batch, compression)
    meta = metadata if metadata is not None else b""
    if not mutation:
        return Frame(message + meta)
    kind = str(mutation.get("kind"))
    rng = np.random.default_rng(int(mutation.get("seed", 0)) & 0xFFFFFFFF)
    if kind == "no_frame":
        return Frame(None, kind)
    return Frame(mutate(kind, message, meta, batch, rng), kind)


def _flip(data: bytes, start: int, stop: int, rng: np.random.Generator) -> bytes:
    out = bytearray(data)
    if stop <= start:
        return bytes(out)
    for _ in range(int(rng.integers(1, 9))):
        out[int(rng.integers(start, stop))] = int(rng.integers(0, 256))
    return bytes(out)


def mutate(kind: str, message: bytes, meta: bytes, batch: pa.RecordBatch, rng: np.random.Generator) -> bytes:
    """The frame ``message`` + ``meta`` mutated as ``kind`` says."""
    (length,) = struct.unpack_from("<i", message, 4)  # after the continuation marker
    body = 8 + max(0, length)  # where the body starts
    if kind == "metadata":
        if meta and rng.integers(0, 2):
            return message + _flip(meta, 0, len(meta), rng)
        return message + _BROKEN_METADATA[int(rng.integers(0, len(_BROKEN_METADATA)))]
    if kind == "flip":
        return _flip(message, 0, len(message), rng) + meta
    if kind == "flip_metadata":
        return _flip(message, 0, min(body, len(message)), rng) + meta
    if kind == "flip_body":
        return _flip(message, min(body, len(message)), len(message), rng) + meta
    if kind == "truncate":
        return message[: int(rng.integers(0, len(message)))] + meta
    if kind == "declared_size":
        if len(message) < body + 8:
            return _flip(message, 0, len(message), rng) + meta
        (now,) = struct.unpack_from("<q", message, body)
        choices = [-1, 0, 1, now // 2, now * 2 + 1, 1 << 40, (1 << 63) - 1, -5]
        value = (choices[int(rng.integers(0, len(choices)))] + (1 << 63)) % (1 << 64) - (1 << 63)  # an int64
        out = bytearray(message)
        struct.pack_into("<q", out, body, value)
        return bytes(out) + meta
    if kind == "schema_message":
        return batch.schema.serialize().to_pybytes() + meta
    if kind == "end_marker":
        return _END_MARKER + meta
    if kind == "garbage":
        return rng.integers(0, 256, int(rng.integers(0, 300)), dtype=np.uint8).tobytes()
    raise ValueError(f"unknown frame mutation {kind!r}")


def named_schema(mode: str, schema: pa.Schema, seed: int) -> tuple[bool, Any]:
    """What the descriptor's ``"schema"`` holds: (False, None) to leave it out, else (True, value):
    ``named`` the records' own schema, ``garbage`` something that is not a schema message, ``other``
    another schema (fields dropped, reordered, retyped, or the full wire schema)."""
    rng = np.random.default_rng(seed & 0xFFFFFFFF)
    if mode == "missing":
        return False, None
    if mode == "garbage":
        pick = int(rng.integers(0, len(GARBAGE_SCHEMAS) + 2))
        if pick == len(GARBAGE_SCHEMAS):  # random bytes, base64
            return True, base64.b64encode(rng.integers(0, 256, 40, dtype=np.uint8).tobytes()).decode()
        if pick == len(GARBAGE_SCHEMAS) + 1:  # a record batch message, not a schema one
            batch = pa.RecordBatch.from_arrays([pa.array([b"x"])], names=["value"])
            return True, base64.b64encode(batch.serialize().to_pybytes()).decode()
        return True, GARBAGE_SCHEMAS[pick]
    if mode == "other":
        return True, schema_text(other_schema(schema, rng))
    return True, schema_text(schema)


def other_schema(schema: pa.Schema, rng: np.random.Generator) -> pa.Schema:
    """A schema like ``schema`` but not it: a field dropped, the fields reversed, a binary field
    typed ``string`` (or a string one ``binary``), or the full wire schema."""
    fields = list(schema)
    way = int(rng.integers(0, 4))
    if way == 0 and len(fields) > 1:
        del fields[int(rng.integers(0, len(fields)))]
    elif way == 1 and len(fields) > 1:
        fields.reverse()
    elif way == 2:
        swapped = {pa.binary(): pa.string(), pa.string(): pa.binary()}
        fields = [f.with_type(swapped.get(f.type, f.type)) for f in fields]
    else:
        return wire_schema() if not schema.equals(wire_schema()) else pa.schema(fields[::-1])
    return pa.schema(fields)


def descriptor_schema(body: bytes) -> pa.Schema | None:
    """The records' schema a produce descriptor names, as the broker reads it (None: it refuses)."""
    import json

    try:
        parsed = json.loads(body)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None
    if not isinstance(parsed, dict) or SCHEMA_FIELD not in parsed:
        return None
    try:
        return schema_of(parsed)
    except Exception:  # SparklogError, or what escapes the broker's reading too
        return None


@dataclasses.dataclass
class Prediction:
    """What the broker must make of a frame: ``batch`` the batch it decodes (None: it must refuse
    the frame), ``metadata`` the frame's metadata as it reads it (None: unreadable)."""

    batch: pa.RecordBatch | None
    metadata: dict[str, Any] | None
    why: str


def predict(data: bytes | None, schema: pa.Schema, max_bytes: int, max_rows: int) -> Prediction:
    """Read ``data`` as the broker does. Nothing is decoded before its declared size passed
    ``max_bytes`` and ``max_rows`` (the fuzzer holds at most what the broker would)."""
    if data is None:
        return Prediction(None, None, "a Flight message without a frame")
    try:
        received = read_frame(pa.py_buffer(data))
    except Exception as exc:  # not only sparklog's: what escapes the broker's reader here escapes it there too
        return Prediction(None, None, f"unreadable frame: {type(exc).__name__}: {str(exc)[:200]}")
    declared = received.declared
    try:
        batch = received.decode(schema, max_bytes, max_rows)
    except Exception as exc:
        why = f"declares {declared.rows} rows, {declared.decoded_bytes} bytes: {type(exc).__name__}: {str(exc)[:200]}"
        return Prediction(None, received.metadata, why)
    try:
        batch.validate(full=True)
    except (pa.ArrowException, ValueError, OSError) as exc:
        return Prediction(None, received.metadata, f"decodes to a batch failing Arrow's full validation: {exc}")
    return Prediction(batch, received.metadata, "decodes")
