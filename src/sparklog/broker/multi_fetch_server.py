"""The broker's answer to a consumer fetch covering many partitions of one topic
(:mod:`sparklog.protocol.multi_fetch`): one stream that stays open.

Each round looks at the partitions that may have something: all of them in the first round, then
those that sent records last round (they may have more) and those :class:`PartitionChanges`
reports changed (an append, a new high watermark, a new role). When none has anything, the
stream waits on that one wake-up of the broker, as a replica fetch does, so an idle partition
costs nothing. Partitions take turns at the front of a round, so one with a long backlog cannot
keep the others out of ``max_response_bytes``.

The stream's schema is fixed by its first response (the columns a compact fetch leaves out are
those every partition of that response could leave out); later records that need one of those
columns end the stream, as does a new schema version of a typed topic, so that the client's next
fetch gets a schema that fits.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING

import pyarrow as pa

from sparklog.broker.consumer_messages import Stored, consumer_messages
from sparklog.broker.fetch_follower import next_offset
from sparklog.broker.replication.partition_changes import PartitionChanges
from sparklog.broker.typed_values import ConsumerView
from sparklog.errors import InvalidRequest, SparklogError
from sparklog.protocol import fetch_columns, wire
from sparklog.protocol.multi_fetch import MultiFetchRequest
from sparklog.records import versioned_schema

if TYPE_CHECKING:
    from sparklog.broker.partition import Partition
    from sparklog.schemas.value_schema import ValueSchema

LeaderLookup = Callable[[str, int], "Partition"]  # the partition if this broker leads it (NotLeader, UnknownTopic)
SchemasOf = Callable[[str], "Sequence[ValueSchema] | None"]  # a typed topic's schema versions (None: untyped)
# a consumer's read of a partition (offset, max_bytes, upto): its log, or its lake table below the
# local log start (``UnionRead.read``)
ReadStored = Callable[["Partition", int, int, int], Stored]
Message = tuple[pa.RecordBatch, pa.Buffer]


@dataclasses.dataclass
class _Found:
    """What one partition has for a response."""

    partition: int
    stored: Stored
    hw: int
    lso: int


class MultiFetchResponse:
    """Builds the stream answering one multi-partition consumer fetch."""

    def __init__(
        self,
        lookup: LeaderLookup,
        read: ReadStored,
        changes: PartitionChanges,
        schemas_of: SchemasOf,
        stopping: Callable[[], bool],
        cancelled: Callable[[], bool],
    ) -> None:
        self.lookup = lookup
        self.read = read
        self.changes = changes
        self.schemas_of = schemas_of
        self.stopping = stopping
        self.cancelled = cancelled

    def open(self, raw: dict[str, object]) -> tuple[pa.Schema, Iterator[Message]]:
        """The stream's schema and its messages. Waits here (up to ``max_wait_ms``) for the first
        response, which fixes the schema."""
        request = MultiFetchRequest.parse(raw)
        value_schemas = self.schemas_of(request.topic)
        view = ConsumerView(value_schemas, request.fields) if value_schemas else None
        if request.fields and view is None:
            raise InvalidRequest(f"'fields' needs a typed topic; {request.topic!r} has no value schema")
        stream = _Stream(self, request, value_schemas, view)
        return stream.open()

    def give_up(self) -> bool:
        return self.stopping() or self.cancelled()


class _Stream:
    def __init__(
        self,
        response: MultiFetchResponse,
        request: MultiFetchRequest,
        value_schemas: Sequence[ValueSchema] | None,
        view: ConsumerView | None,
    ) -> None:
        self.response = response
        self.request = request
        self.topic = request.topic
        self.positions = dict(request.positions)  # partitions still served, and where each stands
        self.value_schemas = value_schemas
        self.view = view
        self.version = response.changes.version  # taken before the first look: no change is missed
        self.turn = 0
        self.schema: pa.Schema = versioned_schema()
        self.elision = fetch_columns.NOTHING
        self.skipped: list[int] = []  # partitions a round had no room left for

    # ----------------------------------------------------------------- rounds
    def _collect(self, partitions: Sequence[int]) -> tuple[list[_Found], list[dict[str, object]]]:
        """What ``partitions`` have now (records below their high watermark), and the errors of
        those that cannot be served (they leave the stream)."""
        found: list[_Found] = []
        errors: list[dict[str, object]] = []
        self.skipped = []
        budget = self.request.max_response_bytes
        if len(partitions) > 1:  # take turns at the front
            self.turn = (self.turn + 1) % len(partitions)
            partitions = [*partitions[self.turn :], *partitions[: self.turn]]
        for i, p in enumerate(partitions):
            if budget <= 0:  # the rest are looked at first next round
                self.skipped = [p for p in partitions[i:] if p in self.positions]
                break
            offset = self.positions.get(p)
            if offset is None:
                continue
            try:
                partition = self.response.lookup(self.topic, p)
                hw = partition.high_watermark
                stored = self.response.read(partition, offset, min(self.request.max_bytes, budget), hw)
            except SparklogError as exc:
                del self.positions[p]
                errors.append({"p": p, "error": exc.code, "message": str(exc)[:500]})
                continue
            if stored:
                budget -= sum(b.get_total_buffer_size() for b, _ in stored)
                found.append(_Found(p, stored, hw, partition.log.log_start_offset))
        return found, errors

    def _next_round(
        self, pending: list[int] | None, deadline: float
    ) -> tuple[list[_Found], list[dict[str, object]]] | None:
        """The next round with records or errors, looking at ``pending`` first (None: all), then
        at what changes; None once ``deadline`` passed or the stream should end."""
        while True:
            if not self.positions:
                return None
            found, errors = self._collect(list(self.positions) if pending is None else pending)
            if found or errors:
                return found, errors
            if time.monotonic() >= deadline:
                return None
            keys = {(self.topic, p) for p in self.positions}
            self.version, changed = self.response.changes.wait_for(self.version, keys, deadline, self.response.give_up)
            if changed is not None and not changed:
                # the deadline passed or the call is over (giving up is asked only after a quiet
                # slice, so looking again would spin until the deadline)
                return None
            pending = None if changed is None else sorted(p for _, p in changed)

    # ----------------------------------------------------------------- the stream
    def open(self) -> tuple[pa.Schema, Iterator[Message]]:
        deadline = time.monotonic() + self.request.max_wait_ms / 1000
        first = self._next_round(None, deadline)
        found, errors = first if first is not None else ([], [])
        self.schema = self.view.schema if self.view is not None else versioned_schema()
        if not found:  # errors only, or nothing in time: one response, then the stream ends
            messages = [self._error(e) for e in errors] or [(self._empty(), pa.py_buffer(b"{}"))]
            return self.schema, iter(messages)
        plans = [self._plan(f.stored) for f in found]
        names = ("offset", "timestamp", "key", "headers")
        self.elision = fetch_columns.Elision(**{n: all(getattr(p.elision, n) for p in plans) for n in names})
        if self.view is None and self.elision == fetch_columns.NOTHING:
            self.schema = found[0].stored[0][0].schema  # the stored schema: batches go out as they are
        self.schema = fetch_columns.ResponsePlan(self.elision).sent_schema(self.schema)
        return self.schema, self._messages(
            errors, [(f, p.within(self.elision)) for f, p in zip(found, plans, strict=True)]
        )

    def _plan(self, stored: Stored) -> fetch_columns.ResponsePlan:
        if not self.request.compact:
            return fetch_columns.PLAIN
        return fetch_columns.plan([batch for batch, _ in stored])

    def _messages(
        self, errors: list[dict[str, object]], response: list[tuple[_Found, fetch_columns.ResponsePlan | None]]
    ) -> Iterator[Message]:
        while True:
            for error in errors:
                yield self._error(error)
            busy = list(self.skipped)  # partitions left out of the last round or sent only in part
            fits = True
            for found, plan in response:
                if plan is None:  # needs a column this stream leaves out: the next fetch will carry it
                    fits = False
                    continue
                yield from self._partition_messages(found, plan)
                self.positions[found.partition] = position = next_offset(found.stored)
                if position < found.hw:  # max_bytes cut it short (appends since come as changes)
                    busy.append(found.partition)
            if not fits or self.response.schemas_of(self.topic) is not self.value_schemas:
                return  # a new schema version: the next fetch has the new view
            after = self._next_round(busy, time.monotonic() + self.request.max_wait_ms / 1000)
            if after is None:
                return
            found_next, errors = after
            response = [(f, self._plan(f.stored).within(self.elision)) for f in found_next]

    def _partition_messages(self, found: _Found, plan: fetch_columns.ResponsePlan) -> Iterator[Message]:
        positions = {"p": found.partition, "hw": found.hw, "lso": found.lso}
        shared = pa.py_buffer(wire.encode(positions))
        for batch, extra in consumer_messages(found.stored, self.schema, self.view, plan):
            yield batch, pa.py_buffer(wire.encode({**positions, **extra})) if extra else shared

    def _error(self, error: dict[str, object]) -> Message:
        return self._empty(), pa.py_buffer(wire.encode(error))

    def _empty(self) -> pa.RecordBatch:
        return pa.RecordBatch.from_pylist([], schema=self.schema)
