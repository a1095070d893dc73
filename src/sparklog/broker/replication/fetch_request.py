"""The replica fetch on the wire: one request from a follower broker to a leader broker covering every
partition the follower follows there (Kafka's FetchRequest with a replica id), answered by one stream.

Request (``do_get`` ticket, JSON)::

    {"type": "replica_fetch", "replica_id": 2, "max_wait_ms": 500, "max_bytes": 16777216,
     "partitions": [{"t": "events", "p": 0, "o": 1200, "e": 7, "hw": 1100}, ...]}

``o`` is the follower's log end (where it fetches from: the leader records it as the follower's
position), ``e`` the leader epoch the follower follows, ``hw`` the high watermark it knows. The
leader answers at once if any partition has records past ``o``, a high watermark other than ``hw``,
or an error; otherwise it waits up to ``max_wait_ms`` for one to.

Fetch sessions (Kafka's KIP-227, :mod:`sparklog.broker.replication.fetch_session`): a request with
``"session_id": S`` (a random id the follower picks, not 0) and ``"session_epoch": 0`` lists every
partition and opens session S on the leader, which keeps the positions. The next requests count
``session_epoch`` 1, 2, ... and list only the partitions added or whose position (``o``, ``e`` or
``hw``) changed, plus ``"forget": [{"t", "p"}, ...]``, those no longer fetched. An idle partition
then costs nothing per round on either side. A request without ``session_id`` is a full fetch with
no session.

Response: a stream of schema :data:`ENVELOPE` (partitions of different topics have different
schemas, and a Flight stream has one): each message is one row holding one stored batch as an
Arrow IPC stream (its schema, then the batch), with app metadata ``{"t", "p", "h" (the batch's
stored header), "hw", "lso"}``; a partition with nothing to send but a new high watermark gets an
empty message with ``{"t", "p", "hw", "lso"}``, and a partition the leader cannot serve
``{"t", "p", "error": CODE, "message"}``. At most ``max_bytes`` per partition and
``MAX_RESPONSE_BYTES`` in all go in one response.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc

from sparklog.errors import InvalidRecord, InvalidRequest
from sparklog.protocol import wire

REPLICA_FETCH = "replica_fetch"
ENVELOPE = pa.schema([pa.field("batch", pa.binary(), nullable=False)])
MAX_PARTITIONS = 100_000
MAX_RESPONSE_BYTES = 64 << 20


@dataclasses.dataclass(frozen=True)
class FetchPosition:
    """Where a follower stands in one partition."""

    topic: str
    partition: int
    offset: int
    leader_epoch: int
    high_watermark: int

    def to_json(self) -> dict[str, Any]:
        return {
            "t": self.topic,
            "p": self.partition,
            "o": self.offset,
            "e": self.leader_epoch,
            "hw": self.high_watermark,
        }

    @classmethod
    def parse(cls, item: Any) -> FetchPosition:
        if not isinstance(item, dict):
            raise InvalidRequest("a replica fetch partition must be an object")
        values = (item.get("p"), item.get("o"), item.get("e"), item.get("hw", -1))
        if not isinstance(item.get("t"), str) or not all(wire.is_int64(v) for v in values):
            raise InvalidRequest(f"a replica fetch partition needs t (string), p, o, e (integers): {str(item)[:200]}")
        return cls(item["t"], *values)


@dataclasses.dataclass(frozen=True)
class SessionRef:
    """The fetch session a request belongs to: its id, the request's epoch in it (0 opens it) and
    the partitions it no longer fetches."""

    session_id: int
    epoch: int
    forget: tuple[tuple[str, int], ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "session_id": self.session_id,
            "session_epoch": self.epoch,
            "forget": [{"t": topic, "p": partition} for topic, partition in self.forget],
        }


def request(
    replica_id: int,
    positions: list[FetchPosition],
    max_wait_ms: int,
    max_bytes: int,
    session: SessionRef | None = None,
) -> dict[str, Any]:
    return {
        "type": REPLICA_FETCH,
        "replica_id": replica_id,
        "max_wait_ms": max_wait_ms,
        "max_bytes": max_bytes,
        "partitions": [p.to_json() for p in positions],
        **(session.to_json() if session is not None else {}),
    }


def envelope(batch: pa.RecordBatch) -> pa.RecordBatch:
    """One stored batch as a message of the response stream."""
    sink = pa.BufferOutputStream()
    with ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    data = sink.getvalue()
    offsets = pa.py_buffer(np.array([0, data.size], dtype=np.int32).tobytes())
    column = pa.Array.from_buffers(pa.binary(), 1, [None, offsets, data])  # no copy of the bytes
    return pa.RecordBatch.from_arrays([column], schema=ENVELOPE)


def empty_envelope() -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist([], schema=ENVELOPE)


def unwrap(message: pa.RecordBatch) -> pa.RecordBatch:
    """The stored batch a response message carries (zero-copy over the received buffer);
    :class:`InvalidRecord` if it is not one IPC stream of one batch."""
    if message.num_rows != 1 or not message.schema.equals(ENVELOPE):
        raise InvalidRecord("a replica fetch message must carry exactly one batch")
    try:
        reader = ipc.open_stream(message.column(0)[0].as_buffer())
        batch = reader.read_next_batch()
    except (pa.ArrowException, StopIteration, OSError) as exc:
        raise InvalidRecord(f"unreadable replicated batch: {exc}") from None
    return batch
