"""Throughput of the value codecs for a 20-field record: ``python -m sparklog.schemas.bench [rows]``.

Prints one JSON object of records/s (best of three runs) for: Avro decode and encode (the columnar
codecs and, for reference, fastavro record by record), Python dicts -> Arrow, projection, and the
Arrow IPC bytes and write speed of all 20 fields against 2 of them.
"""

from __future__ import annotations

import datetime
import decimal
import json
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc

from sparklog.schemas.codec import _layout, decode_avro, encode_avro
from sparklog.schemas.fastavro_codec import decode_bodies_fastavro, encode_fastavro
from sparklog.schemas.projection import project
from sparklog.schemas.value_schema import ValueSchema

SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "Event",
    "namespace": "bench",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "user", "type": "string"},
        {"name": "session", "type": "string"},
        {"name": "page", "type": "string"},
        {"name": "referrer", "type": ["null", "string"], "default": None},
        {"name": "country", "type": {"type": "enum", "name": "Country", "symbols": ["NL", "DE", "FR", "US", "JP"]}},
        {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}},
        {"name": "clicks", "type": "int"},
        {"name": "views", "type": "int"},
        {"name": "errors", "type": "int"},
        {"name": "bytes_in", "type": "long"},
        {"name": "bytes_out", "type": "long"},
        {"name": "latency", "type": "long"},
        {"name": "score", "type": "double"},
        {"name": "lat", "type": "double"},
        {"name": "lon", "type": "double"},
        {"name": "mobile", "type": "boolean"},
        {"name": "premium", "type": "boolean"},
        {"name": "agent", "type": "string"},
    ],
}


def rows(count: int) -> list[dict[str, Any]]:
    t0 = datetime.datetime(2024, 1, 1, tzinfo=datetime.UTC)
    countries = ["NL", "DE", "FR", "US", "JP"]
    return [
        {
            "id": i,
            "user": f"user-{i % 5000}",
            "session": f"s{i:012x}",
            "page": f"/p/{i % 97}",
            "referrer": None if i % 3 else "https://example.com/",
            "country": countries[i % 5],
            "ts": t0 + datetime.timedelta(milliseconds=i),
            "amount": decimal.Decimal(i % 100000).scaleb(-2),
            "clicks": i % 7,
            "views": i % 50,
            "errors": 0,
            "bytes_in": i * 100,
            "bytes_out": i * 300,
            "latency": i % 1000,
            "score": i / 7,
            "lat": 52.37,
            "lon": 4.89,
            "mobile": i % 2 == 0,
            "premium": i % 11 == 0,
            "agent": "Mozilla/5.0",
        }  # fmt: skip
        for i in range(count)
    ]


def _ipc_size(values: pa.Array) -> int:
    """Bytes of one Arrow IPC stream holding ``values`` as its only column (what a broker would send)."""
    batch = pa.RecordBatch.from_arrays([values], names=["value"])
    sink = pa.BufferOutputStream()
    with ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return sink.getvalue().size


def _best(fn: Callable[[], Any], count: int, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return count / best


def measure(count: int = 100_000, repeat: int = 3) -> dict[str, Any]:
    schema = ValueSchema.parse(SCHEMA)
    dicts = rows(count)
    values = schema.from_pylist(dicts)
    payloads = encode_avro(values, schema)
    bodies = encode_avro(values, schema, framing="schemaless")
    starts, ends, data, _ = _layout(bodies)
    small = max(count // 10, 1)  # the record-by-record references are slow: measure them on fewer rows
    small_values = values.slice(0, small)
    out = {
        "records": count,
        "fields": len(schema.arrow_type),
        "avro_bytes_per_record": round(len(bodies.buffers()[2]) / count, 1),
        "decode_records_per_s": _best(lambda: decode_avro(payloads, schema), count, repeat),
        "encode_records_per_s": _best(lambda: encode_avro(values, schema), count, repeat),
        "from_pylist_records_per_s": _best(lambda: schema.from_pylist(dicts), count, repeat),
        "project_2_of_20_records_per_s": _best(lambda: project(values, "id,score"), count, repeat),
        "ipc_bytes_all_20": _ipc_size(values),
        "ipc_bytes_2_of_20": _ipc_size(project(values, "id,score")),
        "ipc_write_all_20_records_per_s": _best(lambda: _ipc_size(values), count, repeat),
        "ipc_write_2_of_20_records_per_s": _best(lambda: _ipc_size(project(values, "id,score")), count, repeat),
        "fastavro_decode_records_per_s": _best(
            lambda: decode_bodies_fastavro(data, starts[:small], ends[:small], schema), small, repeat
        ),
        "fastavro_encode_records_per_s": _best(lambda: encode_fastavro(small_values, schema), small, repeat),
    }
    return {k: (int(v) if isinstance(v, float) and k.endswith("_per_s") else v) for k, v in out.items()}


if __name__ == "__main__":  # pragma: no cover
    np.seterr(all="ignore")
    print(json.dumps(measure(int(sys.argv[1]) if len(sys.argv) > 1 else 100_000), indent=2))
