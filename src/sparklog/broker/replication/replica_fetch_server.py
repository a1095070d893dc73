"""The leader's side of a replica fetch (:mod:`sparklog.broker.replication.fetch_request`): one
request covers every partition a follower follows on this broker. In a fetch session
(:mod:`sparklog.broker.replication.fetch_session`) the leader looks only at the partitions the
session says are due, and every ``full_look_s`` at all of them.

For each partition the leader does what a single-partition follower fetch did: checks it leads in
the follower's epoch, records the follower's position (which moves the high watermark and may
return the follower to the ISR: :meth:`Partition.fetch_range_end`), and reads what is stored past
it. If no partition has anything to send, it waits for :class:`PartitionChanges` to report a change
to one of them (checking every ``WAIT_SLICE_S`` whether the follower went away or the broker
stops), then looks only at the partitions that changed.

A response is streamed as it is built, and stops taking partitions once it has sent something and
has been built for ``BUILD_BUDGET_S``; the follower asks again at once from its new positions. Each
response starts at a random partition, so the ones it left out come first in another. (A follower
catching up on a thousand partitions of small batches once got responses that took longer to
build than its call's deadline: it received nothing, asked again, and never caught up, while the
leader built the abandoned responses to the end.)
"""

from __future__ import annotations

import dataclasses
import itertools
import random
import time
from collections.abc import Callable, Generator, Iterator
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from sparklog.broker.replication.fetch_request import (
    EMPTY,
    MAX_PARTITIONS,
    MAX_RESPONSE_BYTES,
    FetchPosition,
    frame,
    metadata_frame,
)
from sparklog.broker.replication.fetch_session import FULL_LOOK_S, FetchSessionCache
from sparklog.broker.replication.partition_changes import PartitionChanges
from sparklog.errors import InvalidRequest, SparklogError
from sparklog.names import check_topic_name
from sparklog.protocol import wire

if TYPE_CHECKING:
    from sparklog.broker.partition import Partition

MAX_WAIT_MS = 30_000
BUILD_BUDGET_S = 0.5  # a response that has sent something takes no more partitions after this long
# how often building a response asks whether the follower went away: the call's is_cancelled()
# releases the GIL, and getting it back on a busy broker costs up to a switch interval (5 ms)
CANCEL_CHECK_S = 0.05
TopicPartition = tuple[str, int]
LeaderLookup = Callable[[str, int], "Partition"]  # the partition if this broker leads it (NotLeader, UnknownTopic)


@dataclasses.dataclass(frozen=True)
class ReplicaFetch:
    """A replica fetch request, checked."""

    replica_id: int
    positions: list[FetchPosition]  # every partition (no session or a new one), or those that moved
    max_wait_ms: int
    max_bytes: int  # per partition
    session_id: int = 0  # 0: no fetch session
    session_epoch: int = 0
    forget: list[TopicPartition] = dataclasses.field(default_factory=list)


def parse(request: dict[str, Any]) -> ReplicaFetch:
    replica_id, max_wait, max_bytes = (request.get(k) for k in ("replica_id", "max_wait_ms", "max_bytes"))
    if not all(wire.is_int64(v) for v in (replica_id, max_wait, max_bytes)):
        raise InvalidRequest("a replica fetch needs integer 'replica_id', 'max_wait_ms' and 'max_bytes'")
    session_id, epoch = request.get("session_id", 0), request.get("session_epoch", 0)
    if not (wire.is_int64(session_id) and wire.is_int64(epoch) and session_id >= 0 and epoch >= 0):
        raise InvalidRequest("a replica fetch's 'session_id' and 'session_epoch' must be integers, at least 0")
    items, forget = request.get("partitions"), request.get("forget", [])
    if not isinstance(items, list) or len(items) > MAX_PARTITIONS:
        raise InvalidRequest(f"a replica fetch needs a list of at most {MAX_PARTITIONS} 'partitions'")
    if not isinstance(forget, list) or len(forget) > MAX_PARTITIONS:
        raise InvalidRequest(f"a replica fetch's 'forget' must be a list of at most {MAX_PARTITIONS} partitions")
    positions = [FetchPosition.parse(item) for item in items]
    forgotten = [_forgotten(item) for item in forget]
    for topic in {position.topic for position in positions} | {topic for topic, _p in forgotten}:
        check_topic_name(topic)
    return ReplicaFetch(
        replica_id,
        positions,
        min(max(max_wait, 0), MAX_WAIT_MS),
        min(max(max_bytes, 1), MAX_RESPONSE_BYTES),
        session_id,
        epoch,
        forgotten,
    )


def _forgotten(item: Any) -> TopicPartition:
    if not isinstance(item, dict) or not isinstance(item.get("t"), str) or not wire.is_int64(item.get("p")):
        raise InvalidRequest(f"a replica fetch's 'forget' entry needs t (string) and p (integer): {str(item)[:200]}")
    return item["t"], item["p"]


class ReplicaFetchResponse:
    """Builds the answer to one replica fetch."""

    def __init__(
        self,
        lookup: LeaderLookup,
        changes: PartitionChanges,
        stopping: Callable[[], bool],
        cancelled: Callable[[], bool],
        sessions: FetchSessionCache | None = None,
        full_look_s: float = FULL_LOOK_S,
    ) -> None:
        self.lookup = lookup
        self.changes = changes
        self.stopping = stopping
        self.cancelled = cancelled
        self.sessions = sessions if sessions is not None else FetchSessionCache()
        self.full_look_s = full_look_s
        self._left_out: list[FetchPosition] = []  # what the last look did not reach (time budget)

    def messages(self, request: dict[str, Any]) -> Iterator[tuple[pa.RecordBatch, pa.Buffer]]:
        """The response stream: (envelope message, app metadata) pairs (see ``fetch_request``)."""
        fetch = parse(request)
        if not fetch.session_id:
            by_key = {(p.topic, p.partition): p for p in fetch.positions}
            yield from self._respond(fetch, by_key, self.changes.version, fetch.positions)
            return
        session = self.sessions.acquire(fetch.replica_id, fetch.session_id, fetch.session_epoch)
        version = session.version
        try:
            listed = session.update(fetch.positions, fetch.forget)
            version, changed = self.changes.changed_since(session.version)
            due = session.due(listed, changed, time.monotonic(), self.full_look_s)
            version = yield from self._respond(fetch, session.positions, version, due)
            session.unseen = {(p.topic, p.partition) for p in self._left_out}
        finally:
            session.version = version
            self.sessions.release(session)

    def _respond(
        self,
        fetch: ReplicaFetch,
        by_key: dict[TopicPartition, FetchPosition],
        version: int,
        due: list[FetchPosition],
    ) -> Generator[tuple[pa.RecordBatch, pa.Buffer], None, int]:
        """Look at ``due`` (the partitions of ``by_key`` changed up to ``version`` among them),
        then, until something was sent, at those that change; returns the version up to which
        changes were looked at."""
        deadline = time.monotonic() + fetch.max_wait_ms / 1000
        pending = _from_random_start(due)
        while True:
            sent = False
            for message in self._collect(pending, fetch.replica_id, fetch.max_bytes):
                sent = True
                yield message
            if sent or time.monotonic() >= deadline or self._give_up():
                return version
            version, changed = self.changes.wait_for(version, by_key, deadline, self._give_up)
            pending = _from_random_start(list(by_key.values()) if changed is None else [by_key[k] for k in changed])

    def _give_up(self) -> bool:
        return self.stopping() or self.cancelled()

    def _collect(
        self, positions: list[FetchPosition], replica_id: int, max_bytes: int
    ) -> Iterator[tuple[pa.RecordBatch, pa.Buffer]]:
        """The messages of ``positions`` (in order), until the bytes or the time budget runs out
        or the follower goes away."""
        budget = MAX_RESPONSE_BYTES
        started = time.monotonic()
        build_until, check_at = started + BUILD_BUDGET_S, started + CANCEL_CHECK_S
        sent = False
        self._left_out = []
        for i, position in enumerate(positions):
            now = time.monotonic()
            if sent and now >= build_until:
                self._left_out = positions[i:]  # the rest in the next response
                return
            if now >= check_at:
                if self._give_up():
                    self._left_out = positions[i:]
                    return
                check_at = now + CANCEL_CHECK_S
            head = {"t": position.topic, "p": position.partition}
            try:
                partition = self.lookup(position.topic, position.partition)
                end = partition.fetch_range_end(replica_id, position.offset, position.leader_epoch)
                stored = []
                if end > position.offset and budget > 0:
                    stored = partition.log.read_stored(position.offset, min(max_bytes, budget), upto=end)
                    if stored:  # one schema per partition and response: a new version comes next round
                        stored = _one_schema(stored)
                hw, lso = partition.high_watermark, partition.log.log_start_offset
                out = []
                for batch, header in stored:
                    meta = {**head, "h": header.encode(crc=b"00000000"), "hw": hw, "lso": lso}
                    message = frame(batch, meta)
                    budget -= message.size
                    out.append((EMPTY, message))
                if not stored and hw != position.high_watermark:
                    out.append((EMPTY, metadata_frame({**head, "hw": hw, "lso": lso})))
            except SparklogError as exc:
                error = {**head, "error": exc.code, "message": str(exc)[:500]}
                out = [(EMPTY, metadata_frame(error))]
            sent = sent or bool(out)
            yield from out  # outside the try: an error sending is not this partition's


def _from_random_start(positions: list[FetchPosition]) -> list[FetchPosition]:
    """``positions`` rotated to start at a random one (the partitions a response leaves out for
    its time budget are not always the same)."""
    start = random.randrange(len(positions)) if positions else 0
    return positions[start:] + positions[:start]


def _one_schema(stored: list[tuple[pa.RecordBatch, Any]]) -> list[tuple[pa.RecordBatch, Any]]:
    """The leading batches of the first one's schema (a follower appends one schema per round)."""
    schema = stored[0][0].schema
    return list(itertools.takewhile(lambda item: item[0].schema.equals(schema, True), stored))
