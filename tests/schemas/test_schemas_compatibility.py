"""The compatibility table: schema changes, and whether each mode accepts them (naming the field if not)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from sparklog.errors import InvalidConfig
from sparklog.schemas import IncompatibleSchema, ValueSchema, assert_compatible, check


def record(*fields: dict[str, Any], name: str = "R", **extra: Any) -> dict[str, Any]:
    return {"type": "record", "name": name, "fields": list(fields), **extra}


ADDRESS = record({"name": "zip", "type": "string"}, {"name": "city", "type": "string"}, name="Address")
BASE = record(
    {"name": "id", "type": "int"},
    {"name": "name", "type": "string"},
    {"name": "address", "type": ADDRESS},
    {"name": "color", "type": {"type": "enum", "name": "Color", "symbols": ["RED", "GREEN", "BLUE"]}},
    {"name": "nums", "type": {"type": "array", "items": "int"}},
    {"name": "attrs", "type": {"type": "map", "values": "int"}},
    {"name": "score", "type": ["null", "double"], "default": None},
    {"name": "f", "type": "float"},
    {"name": "raw", "type": "bytes"},
    {"name": "hash", "type": {"type": "fixed", "name": "Hash", "size": 4}},
    {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}},
    {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "note", "type": "string", "default": ""},
    name="Order",
)


def fields_of(schema: dict[str, Any], path: str) -> list[dict[str, Any]]:
    """The field list of the record at ``path`` ("" = top, "address" = nested)."""
    node = schema
    for part in filter(None, path.split(".")):
        node = next(f for f in node["fields"] if f["name"] == part)["type"]
    return node["fields"]


def changed(path: str, new_type: Any = ..., **field: Any) -> dict[str, Any]:
    """BASE with the field at ``path`` given ``new_type`` (added if absent; removed if None)."""
    schema = copy.deepcopy(BASE)
    parent, _, name = path.rpartition(".")
    fields = fields_of(schema, parent)
    existing = next((f for f in fields if f["name"] == name), None)
    if new_type is None:
        fields.remove(existing)
    elif existing is None:
        fields.append({"name": name, "type": new_type, **field})
    else:
        if new_type is not ...:
            existing["type"] = new_type
        existing.update(field)
        for key in [k for k, v in field.items() if v is ...]:
            del existing[key]
    return schema


def enum(*symbols: str, **extra: Any) -> dict[str, Any]:
    return {"type": "enum", "name": "Color", "symbols": list(symbols)} | extra


OK = None
# (change, new schema, BACKWARD result, FORWARD result): None = compatible, else (field path, message fragment)
TABLE: list[tuple[str, dict[str, Any], Any, Any]] = [
    ("same schema", BASE, OK, OK),
    ("add field with default", changed("extra", "string", default="x"), OK, OK),
    ("add nullable field with null default", changed("extra", ["null", "long"], default=None), OK, OK),
    ("add field without default", changed("extra", "string"), ("extra", "has no default"), OK),
    ("remove field", changed("name", None), OK, ("name", "has no default")),
    ("remove field that has a default", changed("note", None), OK, OK),
    ("add nested field without default", changed("address.country", "string"), ("address.country", "no default"), OK),
    ("add nested field with default", changed("address.country", "string", default="NL"), OK, OK),
    ("remove nested field", changed("address.city", None), OK, ("address.city", "has no default")),
    ("int to long", changed("id", "long"), OK, ("id", "from long in the new schema to int")),
    ("int to float", changed("id", "float"), OK, ("id", "not a promotion")),
    ("int to double", changed("id", "double"), OK, ("id", "not a promotion")),
    ("float to double", changed("f", "double"), OK, ("f", "not a promotion")),
    ("int to string", changed("id", "string"), ("id", "from int"), ("id", "from string")),
    ("string to bytes", changed("name", "bytes"), OK, OK),
    ("bytes to string", changed("raw", "string"), OK, OK),
    ("nested type change", changed("address.zip", "int"), ("address.zip", "from string"), ("address.zip", "from int")),
    ("array items promoted", changed("nums", {"type": "array", "items": "long"}), OK, ("nums[]", "from long")),
    ("array items changed", changed("nums", {"type": "array", "items": "string"}), ("nums[]", "int"), ("nums[]", "")),
    ("map values changed", changed("attrs", {"type": "map", "values": "boolean"}), ("attrs{}", "int"), ("attrs{}", "")),
    ("array to map", changed("nums", {"type": "map", "values": "int"}), ("nums", "array"), ("nums", "map")),
    ("enum symbol added", changed("color", enum("RED", "GREEN", "BLUE", "PINK")), OK, ("color", "['PINK']")),
    ("enum symbol removed", changed("color", enum("RED", "GREEN")), ("color", "['BLUE']"), OK),
    ("enum symbol removed, default", changed("color", enum("RED", "GREEN", default="RED")), OK, OK),
    ("enum renamed", changed("color", enum("RED", "GREEN", "BLUE", name="Hue")), ("color", "renamed"), ("color", "")),
    ("enum renamed with alias", changed("color", enum("RED", "GREEN", "BLUE", name="Hue", aliases=["Color"])), OK,
     ("color", "renamed")),
    ("made nullable", changed("name", ["null", "string"]), OK, ("name", "may be null in the new schema")),
    ("made required", changed("score", "double", default=...), ("score", "may be null in the previous schema"), OK),
    ("nullable narrowed", changed("score", ["null", "float"]), ("score", "matches no branch"), OK),
    ("nested record made nullable", changed("address", ["null", ADDRESS], default=None), OK,
     ("address", "may be null")),
    ("record renamed", {**BASE, "name": "Purchase"}, ("", "renamed"), ("", "renamed")),
    ("record renamed with alias", {**BASE, "name": "Purchase", "aliases": ["Order"]}, OK, ("", "renamed")),
    ("field renamed with alias", changed("name", None) | {"fields": [*changed("name", None)["fields"],
     {"name": "title", "type": "string", "aliases": ["name"]}]}, OK, ("name", "has no default")),
    ("fixed size changed", changed("hash", {"type": "fixed", "name": "Hash", "size": 8}), ("hash", "size"),
     ("hash", "size")),
    ("decimal precision widened", changed("amount", {"type": "bytes", "logicalType": "decimal", "precision": 12,
     "scale": 2}), OK, ("amount", "decimal(12, 2)")),
    ("decimal scale changed", changed("amount", {"type": "bytes", "logicalType": "decimal", "precision": 10,
     "scale": 3}), ("amount", "decimal(10, 3)"), ("amount", "decimal(10, 2)")),
    ("timestamp unit changed", changed("ts", {"type": "long", "logicalType": "timestamp-micros"}),
     ("ts", "timestamp-millis"), ("ts", "timestamp-micros")),
    ("logical type dropped", changed("ts", "long"), ("ts", "to long"), ("ts", "from long")),
]  # fmt: skip


def _matches(problems: list[Any], expected: Any, direction: str) -> None:
    mine = [p for p in problems if p.direction == direction]
    if expected is None:
        assert mine == [], [str(p) for p in mine]
        return
    path, fragment = expected
    assert any(p.path == path and fragment in p.message for p in mine), [str(p) for p in mine]


@pytest.mark.parametrize(("change", "new", "backward", "forward"), TABLE, ids=[t[0] for t in TABLE])
def test_compatibility_table(change: str, new: dict[str, Any], backward: Any, forward: Any) -> None:
    ValueSchema.parse(new)  # every new schema is a valid, mappable one
    _matches(check(BASE, new, "BACKWARD"), backward, "BACKWARD")
    _matches(check(BASE, new, "FORWARD"), forward, "FORWARD")
    full = check(BASE, new, "FULL")
    _matches(full, backward, "BACKWARD")
    _matches(full, forward, "FORWARD")
    assert check(BASE, new, "NONE") == []
    if backward is not None:
        with pytest.raises(IncompatibleSchema) as err:
            assert_compatible(BASE, new, "backward")
        where = f"field '{backward[0]}'" if backward[0] else "the value"
        assert where in str(err.value) and "not BACKWARD compatible" in str(err.value)
    else:
        assert_compatible(BASE, new)


def test_general_unions_follow_avro_rules() -> None:
    """The checker handles any union (even the ones sparklog refuses to map)."""

    def with_v(t: Any) -> dict[str, Any]:
        return record({"name": "v", "type": t})

    assert check(with_v(["null", "int"]), with_v(["null", "long", "string"])) == []
    assert check(with_v("int"), with_v(["string", "long"])) == []  # int is promoted into the long branch
    problems = check(with_v(["int", "string"]), with_v(["null", "int"]))
    assert [p.path for p in problems] == ["v"] and "string" in problems[0].message


def test_problem_messages_read_well() -> None:
    problems = check(BASE, changed("address.zip", "int"), "FULL", old_label="version 3 of topic 'orders'")
    assert [str(p) for p in problems] == [
        "[BACKWARD] field 'address.zip': type changed from string in version 3 of topic 'orders' "
        "to int in the new schema, not a promotion",
        "[FORWARD] field 'address.zip': type changed from int in the new schema "
        "to string in version 3 of topic 'orders', not a promotion",
    ]


def test_bad_mode_is_a_config_error() -> None:
    with pytest.raises(InvalidConfig, match="schema.compatibility must be one of"):
        check(BASE, BASE, "SIDEWAYS")
