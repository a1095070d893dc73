"""The consumer fetch covering many partitions of one topic on one broker (Kafka's FetchRequest):
one ``do_get`` answered by one stream that stays open, shared by the client and the broker.

Request (``do_get`` ticket, JSON)::

    {"type": "fetch_many", "topic": "events", "partitions": [{"p": 0, "o": 1200}, ...],
     "max_bytes": 8388608, "max_response_bytes": 8388608, "max_wait_ms": 500,
     "compact": true, "fields": ["user"]}

``o`` is where the consumer reads the partition from; ``max_bytes`` bounds what one partition puts
in one response, ``max_response_bytes`` one response in all (partitions take turns at the front).

Response: one stream in the topic's consumer schema, exactly as a single-partition fetch of the
same topic would have it (every partition of a topic has the same schema: a typed topic's values
in the latest version, projected to ``fields``; with ``compact``, columns that carry nothing sent
as Arrow ``null``, :mod:`sparklog.protocol.fetch_columns`), so stored batches go out as they are. Each
message holds records of one partition, with app metadata ``{"p", "hw", "lso"}`` plus the
compact fetch's ``"base"`` / ``"ts"``. A partition the broker cannot serve (not its leader, offset
out of range...) gets one empty message ``{"p", "error": CODE, "message"}`` and leaves the stream;
the others go on.

The broker answers at once if any partition has records below its high watermark (or an error),
else it waits up to ``max_wait_ms`` (then one empty message ``{}`` and the stream ends). After
a first response with records the stream stays open: later records of any of its partitions
follow as they come, an idle partition costing nothing (:mod:`sparklog.broker.multi_fetch_server`),
until nothing new came for ``max_wait_ms``, the topic has a new schema version, or a partition's
records need a column the stream's schema leaves out; then it ends and the client opens the next
one from its positions.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from sparklog.errors import InvalidRequest
from sparklog.names import check_topic_name
from sparklog.protocol import wire

FETCH_MANY = "fetch_many"
MAX_PARTITIONS = 100_000
MAX_BYTES = 64 << 20  # per partition and per response, whatever the request asks
MAX_WAIT_MS = 30_000


@dataclasses.dataclass(frozen=True)
class MultiFetchRequest:
    topic: str
    positions: dict[int, int]  # partition -> offset to read from
    max_bytes: int
    max_response_bytes: int
    max_wait_ms: int
    compact: bool = True
    fields: list[str] | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "type": FETCH_MANY,
            "topic": self.topic,
            "partitions": [{"p": p, "o": o} for p, o in self.positions.items()],
            "max_bytes": self.max_bytes,
            "max_response_bytes": self.max_response_bytes,
            "max_wait_ms": self.max_wait_ms,
            "compact": self.compact,
            **({"fields": self.fields} if self.fields else {}),
        }

    @classmethod
    def parse(cls, request: dict[str, Any]) -> MultiFetchRequest:
        """A request as the broker received it, every name and integer checked."""
        topic = check_topic_name(request.get("topic"))
        numbers = [request.get(k, d) for k, d in (("max_bytes", 8 << 20), ("max_wait_ms", 0))]
        numbers.append(request.get("max_response_bytes", numbers[0]))
        if not all(wire.is_int64(v) for v in numbers):
            raise InvalidRequest("a multi-partition fetch needs integer max_bytes, max_response_bytes, max_wait_ms")
        max_bytes, max_wait_ms, max_response_bytes = numbers
        items = request.get("partitions")
        if not isinstance(items, list) or not 0 < len(items) <= MAX_PARTITIONS:
            raise InvalidRequest(f"a multi-partition fetch needs a list of 1 to {MAX_PARTITIONS} 'partitions'")
        positions: dict[int, int] = {}
        for item in items:
            if not isinstance(item, dict) or not wire.is_int64(item.get("p")) or not wire.is_int64(item.get("o")):
                raise InvalidRequest(f"a fetched partition needs integers p and o: {str(item)[:200]}")
            if item["p"] in positions:
                raise InvalidRequest(f"partition {item['p']} is listed twice")
            positions[item["p"]] = item["o"]
        fields = request.get("fields")
        if fields is not None and (
            not isinstance(fields, list) or not fields or not all(isinstance(f, str) and f for f in fields)
        ):
            raise InvalidRequest(f"'fields' must be a non-empty list of field paths, got {fields!r:.200}")
        return cls(
            topic,
            positions,
            min(max(max_bytes, 1), MAX_BYTES),
            min(max(max_response_bytes, 1), MAX_BYTES),
            min(max(max_wait_ms, 0), MAX_WAIT_MS),
            request.get("compact") is True,
            fields,
        )
