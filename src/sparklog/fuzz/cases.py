"""A fuzz case: what to send, as plain data.

A :class:`Case` holds a kind and JSON-able parameters; everything sent (batches, JSON bodies,
bytes) is built from them deterministically (bulk bytes from a numpy generator seeded by the case),
so a case from a log can be applied again, and a crash report can name its input exactly.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

PRODUCE = "produce"
FETCH = "fetch"
ACTION = "action"
ABANDON = "abandon"
GARBAGE = "garbage"
REPLICA_FETCH = "replica-fetch"  # a replica fetch ticket (the low-privilege mode's cases)
MULTI_FETCH = "fetch-many"  # a consumer fetch of many partitions of one topic
KINDS = (PRODUCE, FETCH, ACTION, ABANDON, GARBAGE, REPLICA_FETCH, MULTI_FETCH)


@dataclasses.dataclass(frozen=True)
class Case:
    """One input to the broker. ``index`` is its position in the run (with the run's seed, what
    reproduces it); ``params`` depend on ``kind`` (see :mod:`sparklog.fuzz.strategies`)."""

    kind: str
    params: dict[str, Any]
    index: int = -1

    def with_index(self, index: int) -> Case:
        return dataclasses.replace(self, index=index)

    def to_json(self) -> dict[str, Any]:
        return {"index": self.index, "kind": self.kind, "params": self.params}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Case:
        return cls(kind=str(data["kind"]), params=dict(data["params"]), index=int(data.get("index", -1)))

    def describe(self, limit: int = 300) -> str:
        """One line: kind and parameters (long values shortened)."""
        text = json.dumps(self.params, default=repr, ensure_ascii=True, separators=(",", ":"))
        if len(text) > limit:
            text = text[: limit - 20] + "..." + text[-17:]
        return f"#{self.index} {self.kind} {text}"
