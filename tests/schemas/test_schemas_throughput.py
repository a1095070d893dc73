"""The value codecs for a 20-field record are columnar, where fastavro's reference path goes record by
record: decoding, encoding and projecting run no Python per record (counted in lines of Python, see
``python_work``), and a projection shares the original's column buffers.

How fast they are is the benchmark's business (``python -m sparklog.schemas.bench``, whose small run
here is printed: run with -s to see the figures), never an assertion: a busy machine slows both sides
of a comparison unevenly."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from python_work import python_lines_per_record
from sparklog.schemas.bench import SCHEMA, measure, rows
from sparklog.schemas.codec import _layout, decode_avro, encode_avro
from sparklog.schemas.fastavro_codec import decode_bodies_fastavro, encode_fastavro
from sparklog.schemas.projection import project
from sparklog.schemas.value_schema import ValueSchema

FEW, MANY = 1_000, 20_000
PER_RECORD = 0.5  # Python lines per record below which a path has no per-record loop (a loop runs >= 1)


def test_the_codec_benchmark_reports_its_figures() -> None:
    figures = measure(2_000, repeat=1)
    print("\nschemas throughput:", json.dumps(figures))
    assert figures["fields"] == 20
    assert all(v > 0 for k, v in figures.items() if k.endswith("_per_s")), figures


def test_the_codecs_of_a_20_field_record_run_no_python_per_record() -> None:
    schema = ValueSchema.parse(SCHEMA)

    def values(n: int) -> Any:
        return schema.from_pylist(rows(n))

    def decode(n: int) -> Callable[[], Any]:
        payloads = encode_avro(values(n), schema)
        return lambda: decode_avro(payloads, schema)

    def encode(n: int) -> Callable[[], Any]:
        batch = values(n)
        return lambda: encode_avro(batch, schema)

    def project_2(n: int) -> Callable[[], Any]:
        batch = values(n)
        return lambda: project(batch, "id,score")

    def fastavro_decode(n: int) -> Callable[[], Any]:
        starts, ends, data, _ = _layout(encode_avro(values(n), schema, framing="schemaless"))
        return lambda: decode_bodies_fastavro(data, starts, ends, schema)

    def fastavro_encode(n: int) -> Callable[[], Any]:
        batch = values(n)
        return lambda: encode_fastavro(batch, schema)

    lines = {
        name: python_lines_per_record(call_on, FEW, MANY)
        for name, call_on in (
            ("decode", decode),
            ("encode", encode),
            ("project 2 of 20", project_2),
            ("fastavro decode", fastavro_decode),
            ("fastavro encode", fastavro_encode),
        )
    }
    print("\nPython lines per record:", lines)
    for name in ("decode", "encode", "project 2 of 20"):
        assert lines[name] < PER_RECORD, f"{name}: {lines[name]:.2f} Python lines per record"
    for name in ("fastavro decode", "fastavro encode"):  # the reference does loop: what the counts tell apart
        assert lines[name] >= 1, f"{name}: {lines[name]:.2f} Python lines per record"


def test_a_projection_shares_the_original_columns() -> None:
    """Projecting 2 of 20 fields copies nothing: the projected columns are the original buffers."""
    schema = ValueSchema.parse(SCHEMA)
    values = schema.from_pylist(rows(1_000))
    projected = project(values, "id,score")
    assert projected.type.names == ["id", "score"]
    for name in ("id", "score"):
        mine = [b.address for b in projected.field(name).buffers() if b is not None]
        theirs = [b.address for b in values.field(name).buffers() if b is not None]
        assert mine == theirs and mine, name
