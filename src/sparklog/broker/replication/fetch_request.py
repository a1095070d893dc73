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

Response: a stream that declares no columns (:data:`FRAMED`; partitions of different topics have
different schemas, and a Flight stream has one), each message carrying its content in its app
metadata as a frame. A frame holding a stored batch is one Arrow IPC stream (the batch's schema,
the batch, the end marker) followed by JSON ``{"t", "p", "h" (the batch's stored header), "hw",
"lso"}``; a partition with nothing to send but a new high watermark gets JSON alone, ``{"t", "p",
"hw", "lso"}``, and a partition the leader cannot serve ``{"t", "p", "error": CODE, "message"}``.
At most ``max_bytes`` per partition and ``MAX_RESPONSE_BYTES`` in all go in one response.

Why frames: Arrow Flight decodes (and decompresses) a message's record batch before the receiver's
code sees it, so a batch in the message body could make a follower allocate without bound. A frame
is read by the follower first as bytes: :func:`read_frame` checks what the batch's own metadata
declares (:mod:`sparklog.protocol.ipc_metadata`) and decodes it only if it decodes to at most
``MAX_RESPONSE_BYTES`` or the frame's own size (a leader sends stored batches uncompressed: their
decoded size is what was received).
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import pyarrow as pa
import pyarrow.ipc as ipc

from sparklog.errors import InvalidRecord, InvalidRequest
from sparklog.protocol import wire
from sparklog.protocol.ipc_metadata import declared_batch

REPLICA_FETCH = "replica_fetch"
FRAMED = pa.schema([])  # what a response stream declares: its content travels as frames
EMPTY = pa.RecordBatch.from_arrays([], schema=FRAMED)  # the (empty) body of every response message
MAX_PARTITIONS = 100_000
MAX_RESPONSE_BYTES = 64 << 20
OFFSET_BYTES = 8  # a stored record's offset (an int64 column every stored batch has)


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


def frame(batch: pa.RecordBatch, metadata: dict[str, Any]) -> pa.Buffer:
    """One stored batch and its metadata as a response message's app metadata (one copy of the
    batch's buffers)."""
    sink = pa.BufferOutputStream()
    with ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    sink.write(wire.encode(metadata))
    return sink.getvalue()


def metadata_frame(metadata: dict[str, Any]) -> pa.Buffer:
    """A response message without a batch (a new high watermark, an error)."""
    return pa.py_buffer(wire.encode(metadata))


class ReplicaFrame(NamedTuple):
    """A received response message: its metadata, and the stored batch's messages (not decoded)."""

    metadata: dict[str, Any]
    schema: ipc.Message | None
    message: ipc.Message | None
    size: int  # the frame's bytes as received

    def batch(self) -> pa.RecordBatch | None:
        """The stored batch (zero-copy over the received bytes), decoded only if it declares at most
        ``MAX_RESPONSE_BYTES`` decoded bytes (or the frame's own size) and no more records than those
        bytes can hold; :class:`InvalidRecord` if it declares more or does not decode."""
        if self.schema is None or self.message is None:
            return None
        declared = declared_batch(self.message)
        limit = max(MAX_RESPONSE_BYTES, self.size)
        if declared.decoded_bytes > limit:
            raise InvalidRecord(
                f"a replicated batch declares {declared.decoded_bytes} decoded bytes, more than the {limit} "
                "a frame may decode to"
            )
        if declared.rows * OFFSET_BYTES > declared.decoded_bytes:  # every stored record has its offset
            raise InvalidRecord(
                f"a replicated batch declares {declared.rows} records in {declared.decoded_bytes} bytes "
                f"(a stored record takes at least {OFFSET_BYTES})"
            )
        try:
            return ipc.read_record_batch(self.message, ipc.read_schema(self.schema))
        except (pa.ArrowException, OSError, ValueError) as exc:
            raise InvalidRecord(f"unreadable replicated batch: {exc}") from None


def read_frame(data: pa.Buffer) -> ReplicaFrame:
    """A response message's app metadata, split into its parts (nothing decoded yet);
    :class:`InvalidRequest` if it is not a frame."""
    schema = message = None
    rest = data
    if data.size and data[0] != ord("{"):
        source = pa.BufferReader(data)
        try:
            schema = ipc.read_message(source)
            message = ipc.read_message(source)
            end = ipc.read_message(source)
        except EOFError:  # the stream's end marker: what follows is the metadata
            end = None
        except (pa.ArrowException, OSError, ValueError) as exc:
            raise InvalidRequest(f"a replica fetch frame is not an Arrow IPC stream: {exc}") from None
        if end is not None or message is None or schema.type != "schema":
            raise InvalidRequest("a replica fetch frame must hold one schema and one record batch")
        rest = data.slice(source.tell())
    metadata = wire.decode_object(rest, "a replica fetch message's metadata")
    return ReplicaFrame(metadata, schema, message, data.size)
