"""Projection of typed values to some fields (the data source's ``fields``): exactly those columns,
the same rows, and no copy of any column buffer."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.ipc as ipc
import pytest

from sparklog.errors import InvalidRequest
from sparklog.schemas import ValueSchema, parse_fields, project, project_batch, projected_type

TYPES = ["long", "string", "double", "int", "boolean"]


def wide_schema() -> ValueSchema:
    fields: list[dict[str, Any]] = [{"name": f"f{i}", "type": TYPES[i % 5]} for i in range(18)]
    fields.append({"name": "address", "type": {"type": "record", "name": "Address", "fields": [
        {"name": "zip", "type": "string"}, {"name": "city", "type": ["null", "string"]},
        {"name": "geo", "type": {"type": "record", "name": "Geo", "fields": [
            {"name": "lat", "type": "double"}, {"name": "lon", "type": "double"}]}}]}})  # fmt: skip
    fields.append({"name": "tags", "type": {"type": "array", "items": "string"}})
    return ValueSchema.parse({"type": "record", "name": "Wide", "fields": fields})


def wide_values(schema: ValueSchema, rows: int = 1000) -> pa.StructArray:
    def value(t: str, j: int) -> Any:
        return {"long": j, "string": f"s{j}", "double": j / 2, "int": j % 100, "boolean": j % 2 == 0}[t]

    def row(j: int) -> dict[str, Any] | None:
        if j % 10 == 9:
            return None  # a tombstone
        out: dict[str, Any] = {f"f{i}": value(TYPES[i % 5], j) for i in range(18)}
        out["address"] = {"zip": f"{j:05}", "city": None if j % 3 else "x", "geo": {"lat": j / 3, "lon": -j / 3}}
        out["tags"] = [f"t{j}"] * (j % 3)
        return out

    return schema.from_pylist([row(j) for j in range(rows)])


def _addresses(arr: pa.Array) -> set[int]:
    out = set()
    for buf in arr.buffers():
        if buf is not None:
            out.add(buf.address)
    return out


def test_twenty_fields_to_two_zero_copy() -> None:
    schema = wide_schema()
    assert len(schema.arrow_type) == 20
    values = wide_values(schema)
    projected = project(values, "f3, f10")
    assert projected.type.names == ["f3", "f10"]
    assert projected.type == projected_type(schema.arrow_type, ["f10", "f3"])  # schema order, not request order
    assert len(projected) == len(values) and projected.null_count == values.null_count
    full = values.to_pylist()
    assert projected.to_pylist() == [None if r is None else {"f3": r["f3"], "f10": r["f10"]} for r in full]
    # zero-copy: every buffer of the projection is a buffer of the original
    assert _addresses(projected) <= _addresses(values)
    assert projected.field(0).buffers()[1].address == values.field(3).buffers()[1].address


def test_projected_batch_sends_only_those_buffers() -> None:
    schema = wide_schema()
    values = wide_values(schema, rows=5000)
    batch = pa.RecordBatch.from_arrays([pa.array(range(len(values)), pa.int64()), values], names=["offset", "value"])
    small = project_batch(batch, ["f3", "f10"])
    assert small.schema.field("value").type == projected_type(schema.arrow_type, "f3,f10")
    assert small.column(0) is batch.column(0) or small.column(0).equals(batch.column(0))

    def ipc_size(b: pa.RecordBatch) -> int:
        sink = pa.BufferOutputStream()
        with ipc.new_stream(sink, b.schema) as writer:
            writer.write_batch(b)
        return sink.getvalue().size

    assert ipc_size(small) * 5 < ipc_size(batch)


def test_nested_paths() -> None:
    schema = wide_schema()
    values = wide_values(schema, rows=50)
    projected = project(values, ["address.geo.lat", "f0", "address.zip"])
    assert str(projected.type) == "struct<f0: int64 not null, address: struct<zip: string not null, geo: " \
        "struct<lat: double not null> not null> not null>"  # fmt: skip
    row = values.to_pylist()[4]
    assert projected.to_pylist()[4] == {"f0": 4, "address": {"zip": row["address"]["zip"], "geo": {"lat": 4 / 3}}}
    # a record asked for whole, and one of its fields: the whole record
    whole = project(values, "address.zip, address")
    assert whole.field(0).equals(values.field(18))
    assert project(values, "tags").field(0).equals(values.field(19))


def test_sliced_and_chunked_inputs() -> None:
    schema = wide_schema()
    values = wide_values(schema, rows=100)
    for start in (1, 8, 13):
        part = values.slice(start, 40)
        projected = project(part, "f1,address.city")
        expected = [None if r is None else {"f1": r["f1"], "address": {"city": r["address"]["city"]}}
                    for r in part.to_pylist()]  # fmt: skip
        assert projected.to_pylist() == expected
    chunked = pa.chunked_array([values.slice(0, 30), values.slice(30)])
    assert project(chunked, "f2").combine_chunks().equals(project(values, "f2"))


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ("f3, nope", "unknown field 'nope' in fields; the value has: f0, f1"),
        ("address.zpi", "unknown field 'address.zpi' in fields; record 'address' has: zip, city, geo"),
        ("tags.x", "cannot select 'tags.x': field 'tags' is list<item: string not null>"),
        ("f1.x", "cannot select 'f1.x': field 'f1' is string, not a record"),
        (" , ", "fields needs at least one field path"),
        ("address..zip", "invalid field path 'address..zip'"),
    ],
)
def test_bad_field_paths_are_refused(fields: str, message: str) -> None:
    schema = wide_schema()
    with pytest.raises(InvalidRequest) as err:
        projected_type(schema.arrow_type, fields)
    assert message in str(err.value)


def test_parse_fields() -> None:
    assert parse_fields(" a , b.c ,a,") == ["a", "b.c"]
    assert parse_fields(["x"]) == ["x"]
    with pytest.raises(InvalidRequest):
        project(pa.array([1, 2]), "a")
