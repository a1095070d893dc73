"""JSON request bodies for the broker (produce descriptors, fetch tickets, action bodies), well-formed
or mutated.

A request is described by a base dict (what :mod:`sparklog.protocol.wire` expects) plus a list of edits,
each ``[op, field, value]``: ``set`` a field to a value (of any JSON type), ``del`` it, or ``raw``
to replace the whole body by bytes (``value`` then names one of :data:`RAW_BODIES` or is a hex
string). The strategies draw the edits; :func:`render` applies them, so a case stays JSON-able
and its exact body can be rebuilt.
"""

from __future__ import annotations

import json
from typing import Any

# values that break type, range or naming assumptions (JSON-able: tuples would become lists)
WEIRD_VALUES: tuple[Any, ...] = (
    None,
    True,
    False,
    0,
    -1,
    -(1 << 31),
    (1 << 31) - 1,
    (1 << 63) - 1,
    -(1 << 63),
    1 << 64,
    1 << 200,
    1.5,
    -0.0,
    1e308,
    "",
    "0",
    "1",
    "all",
    " ",
    "\u0000",
    "é",
    "🙂",
    "x" * 300,
    [],
    [0],
    {},
    {"a": 1},
)

WEIRD_TOPICS: tuple[str, ...] = (
    "",
    ".",
    "..",
    "../..",
    "t1/partitions",
    "fz-plain/partitions",
    "fz-plain/partitions/0/state",
    "/",
    "brokers/ids",
    "controller",
    "zookeeper",
    "__sparklog_staging",
    "__sparklog_staging.fz.v1.x",
    "a" * 249,
    "a" * 250,
    "a" * 5000,
    "tópico",
    "t\u0000",
    "t\n",
    " fz-plain",
    "fz-plain ",
    "FZ-PLAIN",
    "no-such-topic",
)

# bodies that are not a JSON object (or barely one)
RAW_BODIES: dict[str, bytes] = {
    "empty": b"",
    "null": b"null",
    "array": b"[1, 2, 3]",
    "string": b'"topic"',
    "number": b"12345678901234567890",
    "truncated": b'{"topic": "fz-plain", "partition": 0, "off',
    "not-utf8": b'{"topic": "\xff\xfe"}',
    "nan": b'{"topic": "fz-plain", "partition": NaN, "offset": Infinity}',
    "duplicate-keys": b'{"topic": "fz-plain", "topic": "fz-compact", "partition": 0, "partition": 1, "offset": 0}',
    "deep-array": b"[" * 100_000 + b"]" * 100_000,
    "deep-object": b'{"a":' * 50_000 + b"1" + b"}" * 50_000,
    "big-string": b'{"topic": "' + b"a" * (4 << 20) + b'"}',
    "many-keys": json.dumps({f"k{i}": i for i in range(100_000)}).encode(),
    "huge-number": b'{"topic": "fz-plain", "partition": 0, "offset": 1' + b"0" * 5000 + b"}",
    "bom": b'\xef\xbb\xbf{"topic": "fz-plain", "partition": 0, "offset": 0}',
}

Edit = list[Any]  # [op, field, value]


def render(base: dict[str, Any], edits: list[Edit]) -> bytes:
    """The body: ``base`` with ``edits`` applied, as JSON (or the raw bytes an edit names)."""
    body = dict(base)
    for op, field, value in edits:
        if op == "raw":
            return RAW_BODIES[value] if value in RAW_BODIES else bytes.fromhex(str(value))
        if op == "del":
            body.pop(field, None)
        elif op == "set":
            body[field] = value
    return json.dumps(body, ensure_ascii=False, allow_nan=True).encode("utf-8", "surrogatepass")


def is_mutated(edits: list[Edit]) -> bool:
    return bool(edits)
