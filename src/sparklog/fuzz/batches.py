"""Arrow record batches for produce cases: well-formed ones in the wire layout, and mutations.

A batch spec is a dict: ``layout`` (one of :data:`LAYOUTS`), ``rows``, ``seed`` (bulk bytes come from
a numpy generator seeded by it), ``value_size`` (largest value), ``keys`` (0 for no key column,
else the size of the key space: a compacted topic needs keys that repeat), ``headers`` (bool) and
``timestamp`` (one of :data:`TIMESTAMP_MODES`). :func:`build_batch` turns it into a
:class:`BuiltBatch`: the batch, and whether the broker must accept it (True), must refuse it
(False) or may do either (None).

Malformed batches are built with ``pa.Array.from_buffers``, which checks only that buffers are
long enough for the declared lengths (Arrow's *basic* validation): an offsets buffer whose middle
entries point far past the data, a null count that disagrees with the bitmap, invalid UTF-8 all
pass it, serialize (the IPC writer copies buffers as they are) and reach the broker as sent.
Nothing here reads the values of a malformed array, so building and sending one is safe.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa

from sparklog.records import HEADER_TYPE, TIMESTAMP_TYPE, now_ms

MIB = 1 << 20
MAX_BATCH_ROWS = 1 << 20  # the hardened broker's limit of records per batch
BOMB_BYTES = 70 * MIB  # a zstd body that decompresses past 64 MiB


@dataclasses.dataclass
class BuiltBatch:
    """A batch to send, and what the broker must do with it (True accept, False refuse, None either)."""

    batch: pa.RecordBatch
    valid: bool | None
    note: str = ""


# ----------------------------------------------------------------------------------- columns
def _binary(values: list[bytes | None]) -> pa.Array:
    return pa.array(values, pa.binary())


def random_values(rng: np.random.Generator, rows: int, max_size: int, null_fraction: float = 0.0) -> pa.Array:
    """``rows`` binary values of 0..``max_size`` random bytes (one random block, sliced: cheap)."""
    sizes = rng.integers(0, max_size + 1, rows) if max_size > 0 else np.zeros(rows, dtype=np.int64)
    offsets = np.zeros(rows + 1, dtype=np.int32)
    np.cumsum(sizes, out=offsets[1:])
    data = rng.integers(0, 256, int(offsets[-1]), dtype=np.uint8).tobytes()
    validity = None
    nulls = 0
    if null_fraction > 0 and rows:
        mask = rng.random(rows) >= null_fraction  # True = valid
        nulls = int(rows - mask.sum())
        if nulls:
            validity = pa.py_buffer(np.packbits(mask, bitorder="little").tobytes())
    return pa.Array.from_buffers(
        pa.binary(), rows, [validity, pa.py_buffer(offsets.tobytes()), pa.py_buffer(data)], null_count=nulls
    )


def random_keys(rng: np.random.Generator, rows: int, key_space: int) -> pa.Array:
    """Keys ``k-<n>`` from a space of ``key_space`` (a few nulls when the space is small)."""
    picks = rng.integers(0, key_space, rows)
    return _binary([None if key_space <= 4 and p == 0 else b"k-%d" % p for p in picks.tolist()])


def random_headers(rng: np.random.Generator, rows: int) -> pa.Array:
    """Header lists of 0-3 entries (some rows null) of :data:`HEADER_TYPE`."""
    out: list[list[dict[str, Any]] | None] = []
    for n in rng.integers(-1, 4, rows).tolist():
        if n < 0:
            out.append(None)
        else:
            out.append([{"key": f"h{i}", "value": bytes(rng.integers(0, 256, i, dtype=np.uint8))} for i in range(n)])
    return pa.array(out, HEADER_TYPE)


TIMESTAMP_MODES = ("none", "now", "past", "nulls", "int64", "seconds", "nanos", "negative", "year9999", "min", "max")
_DAY_MS = 86_400_000
_YEAR_9999_MS = 253_402_300_799_000  # 9999-12-31T23:59:59Z


def timestamps(mode: str, rows: int, rng: np.random.Generator) -> tuple[pa.Array | None, bool | None]:
    """A timestamp column for ``mode`` and whether the broker must accept it (None: either)."""
    now = now_ms()
    if mode == "none":
        return None, True
    if mode == "now":
        return pa.array(np.full(rows, now, dtype=np.int64), pa.int64()).cast(TIMESTAMP_TYPE), True
    if mode == "past":
        return pa.array(now - rng.integers(0, 30 * _DAY_MS, rows), pa.int64()).cast(TIMESTAMP_TYPE), True
    if mode == "nulls":
        values = [None if i % 3 == 0 else now for i in range(rows)]
        return pa.array(values, pa.int64()).cast(TIMESTAMP_TYPE), True
    if mode == "int64":
        return pa.array(np.full(rows, now, dtype=np.int64), pa.int64()), True
    if mode == "seconds":
        return pa.array(np.full(rows, now // 1000, dtype=np.int64), pa.int64()).cast(pa.timestamp("s", "UTC")), True
    if mode == "nanos":
        return pa.array(np.full(rows, now * 1_000_000, dtype=np.int64), pa.int64()).cast(pa.timestamp("ns")), True
    if mode == "negative":  # before 1970: no bound by default (message.timestamp.before.max.ms)
        return pa.array(-rng.integers(1, 10**12, rows), pa.int64()).cast(TIMESTAMP_TYPE), None
    if mode == "year9999":  # far after the broker's clock: message.timestamp.after.max.ms
        return pa.array(np.full(rows, _YEAR_9999_MS, dtype=np.int64), pa.int64()).cast(TIMESTAMP_TYPE), False
    if mode == "min":
        return pa.array(np.full(rows, -(1 << 63) + 1, dtype=np.int64), pa.int64()).cast(TIMESTAMP_TYPE), None
    if mode == "max":
        return pa.array(np.full(rows, (1 << 63) - 1, dtype=np.int64), pa.int64()).cast(TIMESTAMP_TYPE), False
    raise ValueError(f"unknown timestamp mode {mode!r}")


def _and(*verdicts: bool | None) -> bool | None:
    """Must accept only if every part must; must refuse if any part must; else either."""
    if any(v is False for v in verdicts):
        return False
    if all(v is True for v in verdicts):
        return True
    return None


def wire_columns(spec: dict[str, Any], rng: np.random.Generator) -> tuple[dict[str, pa.Array], bool | None]:
    """The well-formed columns a spec asks for (``value`` always), and the timestamp's verdict."""
    rows = int(spec.get("rows", 1))
    cols: dict[str, pa.Array] = {}
    ts, verdict = timestamps(str(spec.get("timestamp", "none")), rows, rng)
    if ts is not None:
        cols["timestamp"] = ts
    if spec.get("keys"):
        cols["key"] = random_keys(rng, rows, int(spec["keys"]))
    cols["value"] = random_values(rng, rows, int(spec.get("value_size", 16)), float(spec.get("null_values", 0.0)))
    if spec.get("headers"):
        cols["headers"] = random_headers(rng, rows)
    return cols, verdict


def _batch(cols: dict[str, pa.Array]) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays(list(cols.values()), names=list(cols))


# ----------------------------------------------------------------------------------- malformed arrays
def bad_offsets_binary(rows: int, middle: int, type_: pa.DataType = pa.binary()) -> pa.Array:
    """Finding 1's shape: ``rows`` (>= 2) values whose first and last offsets are valid (0 and
    ``rows + 1`` bytes of data) and whose second offset is ``middle``."""
    rows = max(rows, 2)
    offsets = np.arange(rows + 1, dtype=np.int64)
    offsets[1] = middle
    data = b"x" * int(offsets[-1])
    buf = pa.py_buffer(offsets.astype(np.int32).tobytes())
    return pa.Array.from_buffers(type_, rows, [None, buf, pa.py_buffer(data)])


def decreasing_offsets_binary(rows: int) -> pa.Array:
    """``rows`` (>= 2) values whose second offset is past the third (the offsets go back)."""
    rows = max(rows, 2)
    offsets = np.arange(rows + 1, dtype=np.int32) * 2
    offsets[1] = offsets[2] + 3
    buffers = [None, pa.py_buffer(offsets.tobytes()), pa.py_buffer(b"y" * 2 * rows)]
    return pa.Array.from_buffers(pa.binary(), rows, buffers)


def bad_offsets_headers(rows: int) -> pa.Array:
    """Header lists whose middle list offset points far past the entries."""
    rows = max(rows, 2)
    entries = pa.array([{"key": "a", "value": b"1"}] * rows, HEADER_TYPE.value_type)
    offsets = np.arange(rows + 1, dtype=np.int32)
    offsets[1] = 1 << 30
    return pa.Array.from_buffers(HEADER_TYPE, rows, [None, pa.py_buffer(offsets.tobytes())], children=[entries])


def null_count_lie(rows: int) -> pa.Array:
    """A binary column whose bitmap says every value is set but whose declared null count is 1."""
    offsets = np.arange(rows + 1, dtype=np.int32)
    bitmap = np.packbits(np.ones(rows, dtype=bool), bitorder="little").tobytes()
    buffers = [pa.py_buffer(bitmap), pa.py_buffer(offsets.tobytes()), pa.py_buffer(b"z" * rows)]
    return pa.Array.from_buffers(pa.binary(), rows, buffers, null_count=1)


def invalid_utf8(rows: int) -> pa.Array:
    offsets = np.arange(rows + 1, dtype=np.int32) * 2
    return pa.Array.from_buffers(
        pa.string(), rows, [None, pa.py_buffer(offsets.tobytes()), pa.py_buffer(b"\xff\xfe" * rows)]
    )


def headers_with_invalid_utf8_key(rows: int) -> pa.Array:
    keys = invalid_utf8(rows)
    entries = pa.StructArray.from_arrays(
        [keys, pa.array([b"v"] * rows, pa.binary())], fields=list(HEADER_TYPE.value_type)
    )
    offsets = pa.array(np.arange(rows + 1, dtype=np.int32))
    return pa.ListArray.from_arrays(offsets, entries, type=HEADER_TYPE)


def zstd_bomb(rows: int = 70) -> pa.Array:
    """``rows`` values of 1 MiB of zeros: ~14 KB with zstd, :data:`BOMB_BYTES` decompressed."""
    offsets = np.arange(rows + 1, dtype=np.int64) * MIB
    return pa.Array.from_buffers(
        pa.binary(), rows, [None, pa.py_buffer(offsets.astype(np.int32).tobytes()), pa.py_buffer(bytes(rows * MIB))]
    )


def nested(depth: int, rows: int) -> pa.Array:
    array: pa.Array = pa.array(np.arange(rows, dtype=np.int64))
    for i in range(depth):
        if i % 2:
            array = pa.StructArray.from_arrays([array], names=[f"f{i}"])
        else:
            array = pa.ListArray.from_arrays(pa.array(np.arange(rows + 1, dtype=np.int32)), array)
    return array


# ----------------------------------------------------------------------------------- layouts
Builder = Callable[[dict[str, Any], np.random.Generator], BuiltBatch]


def _valid(spec: dict[str, Any], rng: np.random.Generator) -> BuiltBatch:
    cols, verdict = wire_columns(spec, rng)
    return BuiltBatch(_batch(cols), _and(True, verdict) if int(spec.get("rows", 1)) else None)


def _sliced(spec: dict[str, Any], rng: np.random.Generator) -> BuiltBatch:
    rows = int(spec.get("rows", 1))
    cols, verdict = wire_columns({**spec, "rows": rows + 7}, rng)
    return BuiltBatch(_batch(cols).slice(3, rows), _and(True, verdict) if rows else None, "a slice of a larger batch")


def _replace(column: str, make: Callable[[int], pa.Array], valid: bool | None, note: str) -> Builder:
    def build(spec: dict[str, Any], rng: np.random.Generator) -> BuiltBatch:
        rows = max(int(spec.get("rows", 1)), 2)
        cols, verdict = wire_columns({**spec, "rows": rows}, rng)
        cols[column] = make(rows)
        return BuiltBatch(_batch(cols), _and(valid, verdict), note)

    return build


def _retyped(column: str, type_: pa.DataType, valid: bool | None) -> Builder:
    """The spec's batch with ``column`` of another type."""

    def build(spec: dict[str, Any], rng: np.random.Generator) -> BuiltBatch:
        rows = int(spec.get("rows", 1)) or 1
        cols, verdict = wire_columns({**spec, "rows": rows, "keys": spec.get("keys") or 5}, rng)
        if column == "timestamp":
            verdict = True
        if pa.types.is_string(type_) or pa.types.is_large_string(type_) or pa.types.is_string_view(type_):
            if column == "key":
                text = pa.array([None if k is None else k.decode() for k in cols["key"].to_pylist()], pa.string())
            else:
                text = pa.array([f"s{i}-{'é' * (i % 3)}" for i in range(rows)], pa.string())
            cols[column] = text.cast(type_)
        elif pa.types.is_large_binary(type_) or pa.types.is_binary_view(type_):
            cols[column] = cols[column].cast(type_)
        elif pa.types.is_dictionary(type_):
            cols[column] = pa.array([b"a", b"b"] * rows, pa.binary()).slice(0, rows).dictionary_encode()
        elif pa.types.is_fixed_size_binary(type_):
            cols[column] = pa.array([b"ab"] * rows, type_)
        elif pa.types.is_large_list(type_):
            cols[column] = random_headers(rng, rows).cast(type_)
        else:
            cols[column] = pa.array(np.arange(rows, dtype=np.int64)).cast(type_, safe=False)
        return BuiltBatch(_batch(cols), _and(valid, verdict), f"{column} as {type_}")

    return build


def _null_typed(huge: bool) -> Builder:
    """Every column of Arrow type ``null`` (no buffers: the IPC message is ~200 bytes whatever the
    rows it declares). A few rows are tombstones without keys (valid); millions must be refused
    before anything is allocated for them (finding 2)."""

    def build(spec: dict[str, Any], rng: np.random.Generator) -> BuiltBatch:
        rows = int(spec.get("rows", 1))
        if huge:
            rows = max(rows, MAX_BATCH_ROWS + 1)
        wanted = {"key": bool(spec.get("keys")), "headers": bool(spec.get("headers")), "timestamp": False}
        wanted["timestamp"] = spec.get("timestamp", "none") != "none"
        names = ["value"] + [c for c, on in wanted.items() if on]
        batch = pa.RecordBatch.from_arrays([pa.nulls(rows) for _ in names], names=names)
        return BuiltBatch(batch, False if huge else None, f"{len(names)} null-typed columns, {rows} rows")

    return build


def _empty(spec: dict[str, Any], rng: np.random.Generator) -> BuiltBatch:
    cols, _ = wire_columns({**spec, "rows": 0}, rng)
    return BuiltBatch(_batch(cols), None, "no records")


def _extra(name: str, valid: bool | None) -> Builder:
    def build(spec: dict[str, Any], rng: np.random.Generator) -> BuiltBatch:
        rows = int(spec.get("rows", 1)) or 1
        cols, verdict = wire_columns({**spec, "rows": rows}, rng)
        cols[name] = pa.array(np.arange(rows, dtype=np.int64))
        return BuiltBatch(_batch(cols), _and(valid, verdict), f"extra column {name!r}")

    return build


def _duplicate(spec: dict[str, Any], rng: np.random.Generator) -> BuiltBatch:
    rows = int(spec.get("rows", 1)) or 1
    cols, _ = wire_columns({**spec, "rows": rows}, rng)
    batch = pa.RecordBatch.from_arrays([*cols.values(), cols["value"]], names=[*cols, "value"])
    return BuiltBatch(batch, False, "column 'value' twice")


def _missing_value(spec: dict[str, Any], rng: np.random.Generator) -> BuiltBatch:
    rows = int(spec.get("rows", 1)) or 1
    cols, _ = wire_columns({**spec, "rows": rows, "keys": spec.get("keys") or 3}, rng)
    del cols["value"]
    return BuiltBatch(_batch(cols), False, "no 'value' column")


def _nested(spec: dict[str, Any], rng: np.random.Generator) -> BuiltBatch:
    rows = int(spec.get("rows", 1)) or 1
    depth = 1 + int(spec.get("seed", 0)) % 40
    cols, _ = wire_columns({**spec, "rows": rows}, rng)
    cols["value"] = nested(depth, rows)
    return BuiltBatch(_batch(cols), False, f"value nested {depth} deep")


def _bomb(spec: dict[str, Any], rng: np.random.Generator) -> BuiltBatch:
    return BuiltBatch(pa.RecordBatch.from_arrays([zstd_bomb()], names=["value"]), False, "70 MiB of zeros")


def _big(spec: dict[str, Any], rng: np.random.Generator) -> BuiltBatch:
    """A valid batch of 1-8 MiB (below every max.message.bytes default)."""
    size = int(spec.get("value_size", MIB))
    rows = max(1, min(int(spec.get("rows", 1)), (8 * MIB) // max(size, 1)))
    cols = {"value": random_values(rng, rows, size)}
    if spec.get("keys"):
        cols["key"] = random_keys(rng, rows, int(spec["keys"]))
    return BuiltBatch(_batch(cols), True, f"{rows} values up to {size} bytes")


LAYOUTS: dict[str, Builder] = {
    # well-formed
    "valid": _valid,
    "sliced": _sliced,
    "big": _big,
    "string_key": _retyped("key", pa.string(), True),
    "string_value": _retyped("value", pa.string(), True),
    "null_typed": _null_typed(huge=False),
    "empty": _empty,
    "offset_column": _extra("offset", None),
    # malformed: Arrow's full validation refuses them
    "offsets_huge_middle_key": _replace(
        "key", lambda n: bad_offsets_binary(n, 1 << 30), False, "key offsets [0, 2^30, ...]"
    ),
    "offsets_huge_middle_value": _replace(
        "value", lambda n: bad_offsets_binary(n, (1 << 31) - 1), False, "value offsets"
    ),
    "offsets_negative_middle": _replace("value", lambda n: bad_offsets_binary(n, -(1 << 30)), False, "negative offset"),
    "offsets_decreasing": _replace("value", decreasing_offsets_binary, False, "decreasing value offsets"),
    "headers_offsets_huge_middle": _replace(
        "headers", bad_offsets_headers, False, "header list offsets [0, 2^30, ...]"
    ),
    "null_count_lie": _replace("value", null_count_lie, False, "null_count 1, bitmap all set"),
    "utf8_invalid_key": _replace("key", invalid_utf8, False, "string key with invalid UTF-8"),
    "utf8_invalid_header_key": _replace("headers", headers_with_invalid_utf8_key, False, "header key invalid UTF-8"),
    # other types and shapes: refused (or, for a few, converted)
    "large_binary_value": _retyped("value", pa.large_binary(), False),
    "large_binary_key": _retyped("key", pa.large_binary(), False),
    "large_string_key": _retyped("key", pa.large_string(), False),
    "large_list_headers": _retyped("headers", pa.large_list(HEADER_TYPE.value_type), False),
    "string_view_value": _retyped("value", pa.string_view(), False),
    "binary_view_key": _retyped("key", pa.binary_view(), False),
    "dictionary_value": _retyped("value", pa.dictionary(pa.int32(), pa.binary()), False),
    "fixed_binary_value": _retyped("value", pa.binary(2), False),
    "int_value": _retyped("value", pa.int64(), False),
    "float_key": _retyped("key", pa.float64(), False),
    "string_timestamp": _retyped("timestamp", pa.string(), False),
    "float_timestamp": _retyped("timestamp", pa.float64(), False),
    "extra_column": _extra("surprise", False),
    "duplicate_column": _duplicate,
    "missing_value": _missing_value,
    "nested_value": _nested,
    "null_typed_huge": _null_typed(huge=True),
    "zstd_bomb": _bomb,
}
VALID_LAYOUTS = ("valid", "sliced", "big", "string_key", "string_value")


def build_batch(spec: dict[str, Any]) -> BuiltBatch:
    """The batch a spec describes (see the module docs)."""
    rng = np.random.default_rng(int(spec.get("seed", 0)) & 0xFFFFFFFF)
    return LAYOUTS[str(spec.get("layout", "valid"))](spec, rng)
