"""Avro -> Arrow type mapping of typed topics' value schemas, and the schemas refused at declaration."""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
import pytest

from sparklog.errors import InvalidRequest
from sparklog.schemas import SchemaError, ValueSchema, avro_to_arrow
from sparklog.schemas.avro import fingerprint, parse_avro


def record(*fields: dict[str, Any], name: str = "R") -> dict[str, Any]:
    return {"type": "record", "name": name, "fields": list(fields)}


def one(avro_type: Any, **extra: Any) -> dict[str, Any]:
    return record({"name": "v", "type": avro_type, **extra})


UTC = "UTC"
MAPPING = [
    ("null", pa.null(), True),
    ("boolean", pa.bool_(), False),
    ("int", pa.int32(), False),
    ("long", pa.int64(), False),
    ("float", pa.float32(), False),
    ("double", pa.float64(), False),
    ("bytes", pa.binary(), False),
    ("string", pa.string(), False),
    (["null", "string"], pa.string(), True),
    (["string", "null"], pa.string(), True),
    (["long"], pa.int64(), False),
    (["null"], pa.null(), True),
    ({"type": "enum", "name": "E", "symbols": ["A", "B"]}, pa.string(), False),
    ({"type": "fixed", "name": "F", "size": 5}, pa.binary(5), False),
    ({"type": "array", "items": "int"}, pa.list_(pa.field("item", pa.int32(), nullable=False)), False),
    ({"type": "array", "items": ["null", "int"]}, pa.list_(pa.field("item", pa.int32())), False),
    ({"type": "map", "values": "long"}, pa.map_(pa.string(), pa.field("value", pa.int64(), nullable=False)), False),
    (
        record({"name": "zip", "type": "string"}, {"name": "n", "type": ["null", "int"]}, name="A"),
        pa.struct([pa.field("zip", pa.string(), nullable=False), pa.field("n", pa.int32())]),
        False,
    ),
    ({"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}, pa.decimal128(10, 2), False),
    ({"type": "bytes", "logicalType": "decimal", "precision": 40, "scale": 5}, pa.decimal256(40, 5), False),
    (
        {"type": "fixed", "name": "D", "size": 8, "logicalType": "decimal", "precision": 18, "scale": 3},
        pa.decimal128(18, 3),
        False,
    ),
    ({"type": "int", "logicalType": "date"}, pa.date32(), False),
    ({"type": "int", "logicalType": "time-millis"}, pa.time32("ms"), False),
    ({"type": "long", "logicalType": "time-micros"}, pa.time64("us"), False),
    ({"type": "long", "logicalType": "timestamp-millis"}, pa.timestamp("ms", tz=UTC), False),
    ({"type": "long", "logicalType": "timestamp-micros"}, pa.timestamp("us", tz=UTC), False),
    ({"type": "long", "logicalType": "timestamp-nanos"}, pa.timestamp("ns", tz=UTC), False),
    ({"type": "long", "logicalType": "local-timestamp-millis"}, pa.timestamp("ms"), False),
    ({"type": "long", "logicalType": "local-timestamp-micros"}, pa.timestamp("us"), False),
    ({"type": "string", "logicalType": "uuid"}, pa.string(), False),
    ({"type": "fixed", "name": "U", "size": 16, "logicalType": "uuid"}, pa.binary(16), False),
    ({"type": "fixed", "name": "Dur", "size": 12, "logicalType": "duration"}, pa.binary(12), False),
    ({"type": "string", "logicalType": "made-up"}, pa.string(), False),  # unknown logical types are ignored
]


@pytest.mark.parametrize(("avro_type", "arrow_type", "nullable"), MAPPING, ids=[str(m[1]) for m in MAPPING])
def test_each_avro_type_maps_to_its_arrow_type(avro_type: Any, arrow_type: pa.DataType, nullable: bool) -> None:
    mapped = avro_to_arrow(one(avro_type))
    assert mapped.field("v").type == arrow_type
    assert mapped.field("v").nullable is nullable


def test_whole_record_keeps_field_order_names_and_nesting() -> None:
    schema = record(
        {"name": "id", "type": "long"},
        {"name": "address", "type": record({"name": "zip", "type": "string"}, name="Address")},
        {"name": "previous", "type": ["null", "Address"], "default": None},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        name="User",
    )
    t = avro_to_arrow(json.dumps(schema))
    assert t.names == ["id", "address", "previous", "tags"]
    assert t.field("address").type == t.field("previous").type == pa.struct([pa.field("zip", pa.string(), False)])
    assert not t.field("address").nullable and t.field("previous").nullable


def test_schema_accepts_text_bytes_dict_and_parsed() -> None:
    schema = one("int")
    for form in (schema, json.dumps(schema), json.dumps(schema).encode(), parse_avro(schema)):
        assert ValueSchema.parse(form).arrow_type == pa.struct([pa.field("v", pa.int32(), False)])


def test_fingerprint_is_avro_crc64_little_endian() -> None:
    # Avro's reference value: the Rabin fingerprint of "int" is 0x7275d51a3f395c8f (8247732601305521295)
    assert fingerprint(parse_avro('"int"')) == (8247732601305521295).to_bytes(8, "little")
    a = ValueSchema.parse(one("int"))
    b = ValueSchema.parse(json.dumps(one("int"), indent=4))  # formatting does not matter
    c = ValueSchema.parse(one("long"))
    assert a.fingerprint == b.fingerprint != c.fingerprint
    assert len(a.fingerprint) == 8


REFUSED = [
    ("not a record", '"string"', "must be an Avro record"),
    ("array at top", {"type": "array", "items": "int"}, "must be an Avro record"),
    ("union of two types", one(["null", "int", "string"]), "field 'v': union [null, int, string] cannot be mapped"),
    ("union of two non-null types", one(["int", "string"]), "field 'v': union"),
    (
        "recursive record",
        record({"name": "next", "type": ["null", "Node"]}, {"name": "value", "type": "int"}, name="Node"),
        "field 'next': recursive type",
    ),
    ("empty record", one(record(name="Empty")), "field 'v': record 'Empty' has no fields"),
    (
        "duplicate field",
        record({"name": "a", "type": "int"}, {"name": "a", "type": "long"}),
        "field 'a' is declared twice",
    ),
    ("bad field name", record({"name": "a-b", "type": "int"}), "field 'a-b': invalid Avro field name"),
    ("date on string", one({"type": "string", "logicalType": "date"}), "field 'v': logical type 'date' needs int"),
    (
        "timestamp on int",
        one({"type": "int", "logicalType": "timestamp-millis"}),
        "logical type 'timestamp-millis' needs long",
    ),
    ("decimal on int", one({"type": "int", "logicalType": "decimal", "precision": 4}), "decimal' needs bytes or fixed"),
    (
        "decimal too wide",
        one({"type": "bytes", "logicalType": "decimal", "precision": 80, "scale": 0}),
        "precision 80 exceeds the 76 digits",
    ),
    (
        "decimal wider than its fixed",
        one({"type": "fixed", "name": "F", "size": 2, "logicalType": "decimal", "precision": 9}),
        "field 'v': decimal precision of 9 doesn't fit",
    ),
    ("uuid on short fixed", one({"type": "fixed", "name": "F", "size": 4, "logicalType": "uuid"}), "needs size 16"),
    ("nested unmappable", one({"type": "array", "items": ["int", "string"]}), "field 'v[]': union"),
    ("map of unions", one({"type": "map", "values": ["int", "string"]}), "field 'v{}': union"),
    (
        "deep path",
        one(record({"name": "zip", "type": ["int", "string"]}, name="Address")),
        "field 'v.zip': union",
    ),
]


@pytest.mark.parametrize(("case", "schema", "message"), REFUSED, ids=[c[0] for c in REFUSED])
def test_unmappable_schemas_are_refused_at_declaration(case: str, schema: Any, message: str) -> None:
    with pytest.raises(SchemaError) as err:
        ValueSchema.parse(schema)
    assert message in str(err.value)
    assert isinstance(err.value, InvalidRequest)  # SchemaError travels as a request error


MALFORMED = [
    ("not JSON", '{"type": "record", "name": "R", "fields": [', "not valid JSON"),
    ("empty", "   ", "empty"),
    ("unknown type", one("integer"), "unknown type 'integer'"),
    ("missing fields", {"type": "record", "name": "R"}, "record 'R' has no fields"),
    ("fixed without size", one({"type": "fixed", "name": "F"}), "size"),
    ("bad default", record({"name": "a", "type": "int", "default": "x"}), "field 'a': Default value <x>"),
    (
        "enum default not a symbol",
        one({"type": "enum", "name": "E", "symbols": ["A"], "default": "B"}),
        "field 'v': Default value for enum must be in symbols",
    ),
    ("duplicate symbols", one({"type": "enum", "name": "E", "symbols": ["A", "A"]}), "field 'v': All symbols"),
    (
        "decimal scale > precision",
        one(
            record(
                {"name": "d", "type": {"type": "bytes", "logicalType": "decimal", "precision": 2, "scale": 3}},
                name="In",
            )
        ),
        "field 'v.d': decimal scale",
    ),
    ("unknown nested type", one({"type": "array", "items": "Nope"}), "field 'v[]': unknown type 'Nope'"),
    ("not a schema at all", 42, "JSON text or a dict"),
]


@pytest.mark.parametrize(("case", "schema", "message"), MALFORMED, ids=[c[0] for c in MALFORMED])
def test_malformed_schemas_give_clear_errors(case: str, schema: Any, message: str) -> None:
    with pytest.raises(SchemaError) as err:
        ValueSchema.parse(schema)
    assert message in str(err.value)


def test_defaults_are_checked_at_declaration() -> None:
    with pytest.raises(SchemaError, match="field 'v'"):
        ValueSchema.parse(one({"type": "fixed", "name": "F", "size": 2}, default="abc"))
    # valid defaults of every shape are accepted
    ValueSchema.parse(
        record(
            {"name": "b", "type": "bytes", "default": "\u00ff\u0000"},
            {"name": "r", "type": record({"name": "x", "type": "int", "default": 3}, name="X"), "default": {}},
            {"name": "a", "type": {"type": "array", "items": "long"}, "default": [1, 2]},
            {"name": "m", "type": {"type": "map", "values": "string"}, "default": {"k": "v"}},
            {"name": "t", "type": {"type": "long", "logicalType": "timestamp-millis"}, "default": 0},
            {"name": "f", "type": "float", "default": 1},
            {"name": "n", "type": ["string", "null"], "default": "x"},
        )
    )


def test_every_mapped_type_has_a_spark_type() -> None:
    from sparklog.schemas.spark import spark_arrow_type, to_spark_arrow

    types = pytest.importorskip("pyspark.sql.pandas.types")
    fields = [{"name": f"v{i}", "type": t} for i, (t, _, _) in enumerate(MAPPING) if t != ["null"]]
    schema = ValueSchema.parse(record(*fields))
    spark = types.from_arrow_type(spark_arrow_type(schema.arrow_type))
    assert [f.name for f in spark.fields] == schema.arrow_type.names
    millis = ValueSchema.parse(one({"type": "int", "logicalType": "time-millis"}))
    values = millis.from_pylist([{"v": 1000}])
    assert to_spark_arrow(values).type == pa.struct([pa.field("v", pa.time64("us"), nullable=False)])
    plain = ValueSchema.parse(one("long")).from_pylist([{"v": 1}])
    assert to_spark_arrow(plain) is plain
