"""The reference Avro codec: fastavro record by record. :mod:`~sparklog.schemas.codec` falls back
to it for schemas the columnar codecs (:mod:`~sparklog.schemas.fast_decode`,
:mod:`~sparklog.schemas.fast_encode`) do not handle, and the columnar decoder hands it damaged
batches, so that errors name the bad row.

Malformed payloads raise :class:`sparklog.errors.InvalidRecord` naming the row.
"""

from __future__ import annotations

import io
from typing import TYPE_CHECKING

import fastavro
import numpy as np
import pyarrow as pa

from sparklog.errors import InvalidRecord
from sparklog.schemas._arrays import binary_from_parts, to_logical, to_physical

if TYPE_CHECKING:
    from sparklog.schemas.schema_view import SchemaView


def decode_bodies_fastavro(
    data: np.ndarray | bytes, starts: np.ndarray, ends: np.ndarray, writer: SchemaView, rows: np.ndarray | None = None
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


def encode_fastavro(arr: pa.StructArray, schema: SchemaView, prefix: bytes = b"") -> pa.Array:
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
