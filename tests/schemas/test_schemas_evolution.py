"""Batches of older schema versions brought to the latest Arrow type, checked against fastavro's own
schema resolution (the reference for what a reader with the new schema sees)."""

from __future__ import annotations

import io
from typing import Any

import fastavro
import pyarrow as pa
import pytest

from sparklog.errors import InvalidRecord
from sparklog.schemas import IncompatibleSchema, ValueSchema, check, decode_avro, encode_avro, evolve, needs_evolution


def record(*fields: dict[str, Any], name: str = "R", **extra: Any) -> dict[str, Any]:
    return {"type": "record", "name": name, "fields": list(fields), **extra}


V1 = record(
    {"name": "id", "type": "int"},
    {"name": "name", "type": "string"},
    {"name": "blob", "type": "bytes"},
    {"name": "label", "type": "string"},
    {"name": "ratio", "type": "float"},
    {"name": "color", "type": {"type": "enum", "name": "Color", "symbols": ["RED", "GREEN", "BLUE"]}},
    {
        "name": "address",
        "type": record({"name": "zip", "type": "string"}, {"name": "old", "type": "int"}, name="Address"),
    },
    {"name": "nums", "type": {"type": "array", "items": "int"}},
    {"name": "attrs", "type": {"type": "map", "values": "float"}},
    {"name": "title", "type": "string"},
    {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 8, "scale": 2}},
    {"name": "dropped", "type": "string"},
    name="Order",
)
V2 = record(
    {"name": "id", "type": "long"},  # promoted
    {"name": "name", "type": "bytes"},  # string -> bytes
    {"name": "blob", "type": "string"},  # bytes -> string
    {"name": "label", "type": ["null", "string"], "default": None},  # made nullable
    {"name": "ratio", "type": "double"},  # float -> double
    {"name": "color", "type": {"type": "enum", "name": "Color", "symbols": ["RED", "GREEN"], "default": "RED"}},
    {
        "name": "address",
        "type": record(
            {"name": "zip", "type": "string"},
            {"name": "country", "type": "string", "default": "NL"},  # added nested
            name="Address",
        ),
    },
    {"name": "nums", "type": {"type": "array", "items": "double"}},  # items promoted
    {"name": "attrs", "type": {"type": "map", "values": "double"}},  # values promoted
    {"name": "headline", "type": "string", "aliases": ["title"]},  # renamed
    {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 2}},  # widened
    {"name": "extra", "type": ["null", "long"], "default": None},  # added nullable
    {"name": "tags", "type": {"type": "array", "items": "string"}, "default": ["a", "b"]},  # added with default
    {"name": "meta", "type": record({"name": "k", "type": "int", "default": 7}, name="Meta"), "default": {}},
    name="Order",
)


def rows_v1() -> list[dict[str, Any] | None]:
    import decimal

    def row(i: int) -> dict[str, Any]:
        return {
            "id": i, "name": f"n{i}", "blob": f"b{i}".encode(), "label": "l", "ratio": 0.5,
            "color": ["RED", "GREEN", "BLUE"][i % 3], "address": {"zip": f"{i:04}", "old": i},
            "nums": list(range(i % 4)), "attrs": {"a": 1.5} if i % 2 else {}, "title": f"t{i}",
            "amount": decimal.Decimal(i).scaleb(-2), "dropped": "x",
        }  # fmt: skip

    return [row(i) for i in range(5)] + [None, row(7)]


def test_evolve_matches_avro_schema_resolution() -> None:
    assert check(V1, V2, "BACKWARD") == []
    s1, s2 = ValueSchema.parse(V1, version=1), ValueSchema.parse(V2, version=2)
    rows = rows_v1()
    old = s1.from_pylist(rows)
    new = evolve(old, s1, s2)
    assert new.type == s2.arrow_type
    # the reference: fastavro reading the v1 bytes with v2 as the reader schema
    payloads = encode_avro(old, s1, framing="schemaless").to_pylist()
    expected = [None if p is None else fastavro.schemaless_reader(io.BytesIO(p), s1.avro, s2.avro) for p in payloads]
    assert new.equals(s2.from_pylist(expected))
    first = new.to_pylist()[0]
    assert first["address"] == {"zip": "0000", "country": "NL"} and first["tags"] == ["a", "b"]
    assert first["meta"] == {"k": 7} and first["headline"] == "t0" and "dropped" not in first
    assert [r and r["color"] for r in new.to_pylist()] == ["RED", "GREEN", "RED", "RED", "GREEN", None, "GREEN"]


def test_decode_mixed_versions_gives_one_type() -> None:
    s1, s2 = ValueSchema.parse(V1, version=1), ValueSchema.parse(V2, version=2)
    old = s1.from_pylist(rows_v1())
    new = evolve(old, s1, s2)
    payloads = pa.concat_arrays([encode_avro(old, s1), encode_avro(new, s2), encode_avro(old.slice(2, 2), s1)])
    versions = {s.fingerprint: s for s in (s1, s2)}
    decoded = decode_avro(payloads, s2, lookup=versions.__getitem__)
    assert decoded.type == s2.arrow_type
    assert decoded.equals(pa.concat_arrays([new, new, new.slice(2, 2)]))
    # schemaless bodies with the writer's version given separately
    bodies = encode_avro(old, s1, framing="schemaless")
    assert decode_avro(bodies, s2, framing="schemaless", writer=s1).equals(new)


def test_unchanged_columns_are_not_copied() -> None:
    s1 = ValueSchema.parse(record({"name": "a", "type": "long"}, {"name": "b", "type": "string"}), version=1)
    s2 = ValueSchema.parse(
        record(
            {"name": "a", "type": "long"}, {"name": "b", "type": "string"}, {"name": "c", "type": "int", "default": 1}
        ),
        version=2,
    )
    old = s1.from_pylist([{"a": 1, "b": "x"}, {"a": 2, "b": "y"}])
    assert evolve(old, s1, s1) is old
    assert evolve(old, s1, ValueSchema.parse(s1.json, version=9)) is old  # same text, another version
    new = evolve(old, s1, s2)
    assert new.field("a").buffers()[1].address == old.field("a").buffers()[1].address
    assert new.field("b").buffers()[2].address == old.field("b").buffers()[2].address
    assert new.field("c").to_pylist() == [1, 1]
    assert needs_evolution(s1, s2) and not needs_evolution(s1, s1)


def test_values_that_cannot_be_read_name_row_and_field() -> None:
    nullable = ValueSchema.parse(record({"name": "a", "type": ["null", "string"]}), version=1)
    required = ValueSchema.parse(record({"name": "a", "type": "string"}), version=2)
    with pytest.raises(
        InvalidRecord, match=r"row 1: field 'a' is null in schema version 1 but required in schema version 2"
    ):
        evolve(nullable.from_pylist([{"a": "x"}, {"a": None}]), nullable, required)
    assert evolve(nullable.from_pylist([{"a": "x"}]), nullable, required).to_pylist() == [{"a": "x"}]

    rgb = ValueSchema.parse(record({"name": "c", "type": {"type": "enum", "name": "C", "symbols": ["R", "G", "B"]}}))
    rg = ValueSchema.parse(record({"name": "c", "type": {"type": "enum", "name": "C", "symbols": ["R", "G"]}}))
    with pytest.raises(InvalidRecord, match=r"row 1: field 'c' has symbol 'B'"):
        evolve(rgb.from_pylist([{"c": "R"}, {"c": "B"}]), rgb, rg)

    text = ValueSchema.parse(record({"name": "a", "type": "string"}))
    number = ValueSchema.parse(record({"name": "a", "type": "int"}))
    with pytest.raises(IncompatibleSchema, match=r"field 'a': .* string is not readable as int"):
        evolve(text.from_pylist([{"a": "1"}]), text, number)

    added = ValueSchema.parse(record({"name": "a", "type": "string"}, {"name": "b", "type": "int"}))
    with pytest.raises(IncompatibleSchema, match=r"field 'b': .*has no default"):
        evolve(text.from_pylist([{"a": "1"}]), text, added)


def test_tombstones_are_not_checked_for_required_fields() -> None:
    def nested(t: Any) -> dict[str, Any]:
        return record({"name": "inner", "type": record({"name": "a", "type": t}, name="Inner")})

    loose, strict = ValueSchema.parse(nested(["null", "string"])), ValueSchema.parse(nested("string"))
    values = loose.from_pylist([{"inner": {"a": "x"}}, None])
    assert evolve(values, loose, strict).to_pylist() == [{"inner": {"a": "x"}}, None]
