"""Schema compatibility of a new version with the previous one, by Avro's schema resolution rules.

Modes (the topic config ``schema.compatibility``; checked against the latest version only):

* ``BACKWARD`` (default): consumers using the new schema can read data written with the previous one
  (the new schema reads, the old one wrote).
* ``FORWARD``: data written with the new schema can be read with the previous one.
* ``FULL``: both. ``NONE``: no check.

:func:`can_read` is the whole rule set, one small recursive function over parsed schemas:

* unions: every branch the writer may write must be readable by the reader; a non-union writer must
  match some branch of a reader union (so ``T -> [null, T]`` reads, ``[null, T] -> T`` does not);
* promotions: int -> long, float, double; long -> float, double; float -> double; string <-> bytes;
* records: same unqualified name (or a reader alias); each reader field is read from the writer
  field of that name (or a reader field alias), else it needs a default; writer-only fields are skipped;
* enums: same name; every writer symbol must be a reader symbol unless the reader has a default symbol;
* fixed: same name and size; arrays: items; maps: values (recursively);
* logical types (stricter than Avro, which ignores them, because they change the Arrow type and the
  meaning): a known logical type must not be added, removed or changed, except that a decimal may
  gain precision at the same scale.

Problems name the field by path: ``address.zip``, ``tags[]`` (array items), ``attrs{}`` (map values).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from sparklog.config import SCHEMA_COMPATIBILITIES
from sparklog.errors import IncompatibleSchema, InvalidConfig
from sparklog.schemas.avro import PRIMITIVES, describe, named_types, parse_avro, resolve, short_name, type_name
from sparklog.schemas.value_schema import ValueSchema

PROMOTIONS = {
    ("int", "long"),
    ("int", "float"),
    ("int", "double"),
    ("long", "float"),
    ("long", "double"),
    ("float", "double"),
    ("string", "bytes"),
    ("bytes", "string"),
}
_KNOWN_LOGICAL = {
    "decimal", "date", "time-millis", "time-micros", "timestamp-millis", "timestamp-micros", "timestamp-nanos",
    "local-timestamp-millis", "local-timestamp-micros", "local-timestamp-nanos", "uuid", "duration",
}  # fmt: skip


@dataclasses.dataclass(frozen=True)
class Problem:
    """One incompatibility: where (a field path, "" for the value itself) and why."""

    path: str
    message: str
    direction: str = ""  # "BACKWARD" (new reads old) or "FORWARD" (old reads new)

    def __str__(self) -> str:
        where = f"field '{self.path}'" if self.path else "the value"
        prefix = f"[{self.direction}] " if self.direction else ""
        return f"{prefix}{where}: {self.message}"


@dataclasses.dataclass(frozen=True)
class _Side:
    schema: Any
    named: dict[str, Any]
    label: str  # "the new schema", "version 3"


def normalize_mode(mode: str | None) -> str:
    mode = (mode or "BACKWARD").strip().upper()
    if mode not in SCHEMA_COMPATIBILITIES:
        raise InvalidConfig(f"schema.compatibility must be one of {', '.join(SCHEMA_COMPATIBILITIES)}; got '{mode}'")
    return mode


def check(old: Any, new: Any, mode: str = "BACKWARD", old_label: str = "the previous schema") -> list[Problem]:
    """The problems that make ``new`` incompatible with ``old`` under ``mode`` (empty: compatible).

    ``old``/``new``: JSON text, JSON objects, fastavro-parsed schemas or :class:`ValueSchema`.
    """
    mode = normalize_mode(mode)
    if mode == "NONE":
        return []
    old_p, new_p = _parsed(old), _parsed(new)
    old_side = _Side(old_p, named_types(old_p), old_label)
    new_side = _Side(new_p, named_types(new_p), "the new schema")
    problems: list[Problem] = []
    if mode in ("BACKWARD", "FULL"):
        problems += [dataclasses.replace(p, direction="BACKWARD") for p in can_read(new_side, old_side)]
    if mode in ("FORWARD", "FULL"):
        problems += [dataclasses.replace(p, direction="FORWARD") for p in can_read(old_side, new_side)]
    return problems


def assert_compatible(old: Any, new: Any, mode: str = "BACKWARD", old_label: str = "the previous schema") -> None:
    """Raise :class:`IncompatibleSchema` (listing every problem) unless ``new`` is compatible."""
    problems = check(old, new, mode, old_label)
    if problems:
        mode = normalize_mode(mode)
        raise IncompatibleSchema(
            f"the new schema is not {mode} compatible with {old_label}: " + "; ".join(map(str, problems)), problems
        )


def _parsed(schema: Any) -> Any:
    return schema.avro if isinstance(schema, ValueSchema) else parse_avro(schema)


def _logical(schema: Any) -> tuple[Any, ...] | None:
    if isinstance(schema, dict) and schema.get("logicalType") in _KNOWN_LOGICAL:
        lt = schema["logicalType"]
        return (lt, schema.get("precision"), schema.get("scale", 0)) if lt == "decimal" else (lt,)
    return None


def can_read(reader: _Side, writer: _Side, path: str = "") -> list[Problem]:
    """Why ``reader.schema`` cannot read data written with ``writer.schema`` (Avro resolution)."""
    r, w = resolve(reader.schema, reader.named), resolve(writer.schema, writer.named)
    rt, wt = type_name(r), type_name(w)
    R, W = reader.label, writer.label  # noqa: N806
    sub = dataclasses.replace

    if wt == "union":  # every branch the writer may have written must be readable
        return [p for branch in w for p in can_read(reader, sub(writer, schema=branch), path)]
    if rt == "union":  # the writer's type must match one of the reader's branches
        if any(not can_read(sub(reader, schema=branch), writer, path) for branch in r):
            return []
        return [Problem(path, f"{describe(w)} in {W} matches no branch of {describe(r)} in {R}")]

    if wt == "null" and rt != "null":
        return [Problem(path, f"may be null in {W} but not in {R}")]
    lr, lw = _logical(r), _logical(w)
    if lr != lw:
        widened = lr and lw and lr[0] == lw[0] == "decimal" and lr[2] == lw[2] and lr[1] >= lw[1]
        if not widened:
            return [Problem(path, f"type changed from {describe(w)} in {W} to {describe(r)} in {R}")]
    if rt != wt:
        if (wt, rt) in PROMOTIONS:
            return []
        if rt == "null" or wt == "null":
            return [Problem(path, f"type changed from {describe(w)} in {W} to {describe(r)} in {R}")]
        return [Problem(path, f"type changed from {describe(w)} in {W} to {describe(r)} in {R}, not a promotion")]
    if rt in PRIMITIVES:
        return []
    if not _same_name(r, w):
        return [Problem(path, f"{rt} {w.get('name')} in {W} is renamed to {r.get('name')} in {R} without an alias")]
    if rt == "record":
        problems = []
        w_fields = {f["name"]: f for f in w["fields"]}
        for rf in r["fields"]:
            fpath = f"{path}.{rf['name']}" if path else rf["name"]
            wf = next((w_fields[n] for n in (rf["name"], *rf.get("aliases", ())) if n in w_fields), None)
            if wf is not None:
                problems += can_read(sub(reader, schema=rf["type"]), sub(writer, schema=wf["type"]), fpath)
            elif "default" not in rf:
                problems.append(Problem(fpath, f"is in {R} but not in {W}, and has no default"))
        return problems
    if rt == "enum":
        missing = [s for s in w["symbols"] if s not in r["symbols"]]
        if missing and "default" not in r:
            return [Problem(path, f"enum symbols {missing} of {W} are not in {R}, which has no default symbol")]
        return []
    if rt == "fixed":
        if r["size"] != w["size"]:
            return [Problem(path, f"fixed size changed from {w['size']} in {W} to {r['size']} in {R}")]
        return []
    if rt == "array":
        return can_read(sub(reader, schema=r["items"]), sub(writer, schema=w["items"]), path + "[]")
    if rt == "map":
        return can_read(sub(reader, schema=r["values"]), sub(writer, schema=w["values"]), path + "{}")
    return [Problem(path, f"unsupported Avro type {rt!r}")]


def _same_name(r: dict[str, Any], w: dict[str, Any]) -> bool:
    wn = short_name(w.get("name", ""))
    return short_name(r.get("name", "")) == wn or wn in {short_name(a) for a in r.get("aliases", ())}
