"""The leader's side of a replica fetch (:mod:`sparklog.broker.replication.fetch_request`): one
request covers every partition a follower follows on this broker.

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

import itertools
import random
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from sparklog import wire
from sparklog.broker.replication.fetch_request import (
    MAX_PARTITIONS,
    MAX_RESPONSE_BYTES,
    FetchPosition,
    empty_envelope,
    envelope,
)
from sparklog.broker.replication.partition_changes import PartitionChanges
from sparklog.errors import InvalidRequest, SparklogError
from sparklog.names import check_topic_name

if TYPE_CHECKING:
    from sparklog.broker.partition import Partition

MAX_WAIT_MS = 30_000
BUILD_BUDGET_S = 0.5  # a response that has sent something takes no more partitions after this long
# how often building a response asks whether the follower went away: the call's is_cancelled()
# releases the GIL, and getting it back on a busy broker costs up to a switch interval (5 ms)
CANCEL_CHECK_S = 0.05
EMPTY_ENVELOPE = empty_envelope()  # immutable: one for every message that carries no batch
LeaderLookup = Callable[[str, int], "Partition"]  # the partition if this broker leads it (NotLeader, UnknownTopic)


def parse(request: dict[str, Any]) -> tuple[int, list[FetchPosition], int, int]:
    """replica id, positions, max wait (ms) and max bytes per partition of a replica fetch request."""
    replica_id, max_wait, max_bytes = (request.get(k) for k in ("replica_id", "max_wait_ms", "max_bytes"))
    if not all(wire.is_int64(v) for v in (replica_id, max_wait, max_bytes)):
        raise InvalidRequest("a replica fetch needs integer 'replica_id', 'max_wait_ms' and 'max_bytes'")
    items = request.get("partitions")
    if not isinstance(items, list) or len(items) > MAX_PARTITIONS:
        raise InvalidRequest(f"a replica fetch needs a list of at most {MAX_PARTITIONS} 'partitions'")
    positions = [FetchPosition.parse(item) for item in items]
    for topic in {position.topic for position in positions}:
        check_topic_name(topic)
    return replica_id, positions, min(max(max_wait, 0), MAX_WAIT_MS), min(max(max_bytes, 1), MAX_RESPONSE_BYTES)


class ReplicaFetchResponse:
    """Builds the answer to one replica fetch."""

    def __init__(
        self,
        lookup: LeaderLookup,
        changes: PartitionChanges,
        stopping: Callable[[], bool],
        cancelled: Callable[[], bool],
    ) -> None:
        self.lookup = lookup
        self.changes = changes
        self.stopping = stopping
        self.cancelled = cancelled

    def messages(self, request: dict[str, Any]) -> Iterator[tuple[pa.RecordBatch, pa.Buffer]]:
        """The response stream: (envelope message, app metadata) pairs (see ``fetch_request``)."""
        replica_id, positions, max_wait_ms, max_bytes = parse(request)
        deadline = time.monotonic() + max_wait_ms / 1000
        by_key = {(p.topic, p.partition): p for p in positions}
        version = self.changes.version
        pending = _from_random_start(positions)
        while True:
            sent = False
            for message in self._collect(pending, replica_id, max_bytes):
                sent = True
                yield message
            if sent or time.monotonic() >= deadline or self._give_up():
                return
            version, changed = self.changes.wait_for(version, by_key, deadline, self._give_up)
            pending = _from_random_start(positions) if changed is None else [by_key[key] for key in changed]

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
        for position in positions:
            now = time.monotonic()
            if sent and now >= build_until:
                return  # the rest in the next response
            if now >= check_at:
                if self._give_up():
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
                    message = envelope(batch)
                    budget -= message.get_total_buffer_size()
                    out.append((message, pa.py_buffer(wire.encode(meta))))
                if not stored and hw != position.high_watermark:
                    out.append((EMPTY_ENVELOPE, pa.py_buffer(wire.encode({**head, "hw": hw, "lso": lso}))))
            except SparklogError as exc:
                error = {**head, "error": exc.code, "message": str(exc)[:500]}
                out = [(EMPTY_ENVELOPE, pa.py_buffer(wire.encode(error)))]
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
