"""Copying records from one partition to others that the same broker leads (the ``copy_records``
action; the Spark sink publishes its staged slices with it, see
:mod:`sparklog.datasource.publish`).

Each slice names an offset range of the source partition (below its high watermark) and the target
partition it goes to, with the idempotent producer id and first sequence number the client would
have sent it with. The broker reads the range from its own log (memory-mapped, never sent to a
client and back) and appends it to the target as one batch, exactly as a produce with that producer
id and sequence would: a slice the target already stored is answered as a duplicate and not
appended again, so a retried or repeated copy stores every slice once. A typed target takes the
values as the ``schema_version`` they were staged in (evolved to its latest version).

With ``acks=all`` the answer waits until every target's high watermark covers its slices (one wait
per target after all appends, not one per slice).

Bounded work per call: at most ``MAX_SLICES`` slices; a slice is read in chunks of ``READ_BYTES``
and refused (:class:`RecordTooLarge`) as soon as it outgrows its target's ``max.message.bytes`` (it
becomes one batch there); and once the slices copied by a call add up to ``MAX_COPY_BYTES`` the call
stops and answers for those only: the client sends the rest again (a small request cannot make the
broker write without bound).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from sparklog.broker.typed_values import conform_produced
from sparklog.errors import DuplicateSequence, InvalidRequest, OffsetOutOfRange, RecordTooLarge
from sparklog.names import check_topic_name
from sparklog.protocol import wire
from sparklog.records import offsets_of

if TYPE_CHECKING:
    from sparklog.broker.partition import Partition
    from sparklog.broker.produce_request import ProduceTarget

READ_BYTES = 4 << 20
MAX_SLICES = 1024
MAX_COPY_BYTES = 64 << 20  # copied per call; the answer then covers the slices done so far


@dataclasses.dataclass(frozen=True)
class CopySlice:
    """Source offsets ``first..last`` (inclusive) to ``topic``-``partition``."""

    first: int
    last: int
    topic: str
    partition: int
    producer_id: int = -1
    sequence: int = -1
    schema_version: int | None = None

    @classmethod
    def parse(cls, item: Any) -> CopySlice:
        if not isinstance(item, dict):
            raise InvalidRequest(f"a copy slice must be an object, got {item!r}")
        try:
            made = cls(
                first=item["first"],
                last=item["last"],
                topic=item["topic"],
                partition=item["partition"],
                producer_id=item.get("producer_id", -1),
                sequence=item.get("sequence", -1),
                schema_version=item.get("schema_version"),
            )
        except KeyError as exc:
            raise InvalidRequest(f"a copy slice needs {exc.args[0]!r}: {item!r}") from None
        ints = (made.first, made.last, made.partition, made.producer_id, made.sequence)
        if not all(wire.is_int64(v) for v in ints) or not isinstance(made.topic, str):
            raise InvalidRequest(f"a copy slice has a field of the wrong type or out of 64 bits: {str(item)[:200]}")
        check_topic_name(made.topic)
        if made.schema_version is not None and not isinstance(made.schema_version, int):
            raise InvalidRequest(f"'schema_version' must be an integer, got {made.schema_version!r}")
        if made.first < 0 or made.last < made.first:
            raise InvalidRequest(f"a copy slice needs 0 <= first <= last, got {made.first}..{made.last}")
        return made


def read_range(source: Partition, first: int, last: int, max_bytes: int) -> pa.RecordBatch:
    """The source's records ``first..last`` as one batch of the produce layout (no offsets), all
    of them below the high watermark (OffsetOutOfRange otherwise: a gap, or not yet committed),
    read in chunks and refused (:class:`RecordTooLarge`) once they pass ``max_bytes``."""
    plog = source.log
    hw = source.high_watermark
    if last >= hw:
        raise OffsetOutOfRange(
            f"{source.topic}-{source.partition} offsets {first}..{last} are not all below its high watermark {hw}"
        )
    pieces: list[pa.RecordBatch] = []
    size = 0
    offset = first
    while offset <= last:
        stored = plog.read_stored(offset, READ_BYTES, upto=last + 1)
        if not stored:
            break
        before = offset
        for batch, _header in stored:
            offsets = offsets_of(batch)
            lo = int(np.searchsorted(offsets, offset))
            hi = int(np.searchsorted(offsets, last + 1))
            if hi > lo:
                piece = batch.slice(lo, hi - lo)
                size += piece.nbytes
                if size > max_bytes:
                    raise RecordTooLarge(
                        f"{source.topic}-{source.partition} offsets {first}..{last} hold more than "
                        f"{max_bytes} bytes, the target's max.message.bytes: copy them in smaller slices"
                    )
                pieces.append(piece)
            offset = max(offset, int(offsets[-1]) + 1)
        if offset == before:  # only a batch ending below ``offset``: the rest was compacted away
            break
    rows = sum(p.num_rows for p in pieces)
    if rows != last - first + 1:
        raise OffsetOutOfRange(
            f"{source.topic}-{source.partition} holds {rows} of the offsets {first}..{last} (compacted or deleted)"
        )
    data = pieces[0] if len(pieces) == 1 else pa.concat_batches(pieces)
    return data.drop_columns(["offset"]).replace_schema_metadata(None)


def copy_records(
    broker: ProduceTarget, request: dict[str, Any], entering: Callable[[int], object] = lambda _size: None
) -> dict[str, Any]:
    """Run one ``copy_records`` request (see the module docs); the result per slice, in order:
    ``{"base_offset", "last_offset", "count"}``, offsets -1 for a slice stored before. Past
    ``MAX_COPY_BYTES`` the results stop early (fewer results than slices: send the rest again).
    ``entering(size)``: told each slice's bytes before they are appended (the caller's producer
    quota makes it wait there, as for a produce)."""
    source_topic, source_p = request.get("topic"), request.get("partition")
    if not isinstance(source_topic, str) or not wire.is_int64(source_p):
        raise InvalidRequest(
            f"copy_records needs the source 'topic' and 'partition', got {source_topic!r:.100}, {source_p!r:.40}"
        )
    check_topic_name(source_topic)
    acks = str(request.get("acks", "all"))
    if acks not in ("1", "all"):
        raise InvalidRequest(f"copy_records acks must be 1 or all, got {acks!r}")
    items = request.get("slices")
    if not isinstance(items, list) or not items or len(items) > MAX_SLICES:
        raise InvalidRequest(f"copy_records needs a list of 1 to {MAX_SLICES} 'slices'")
    slices = [CopySlice.parse(item) for item in items]
    source = broker.leader_partition(source_topic, source_p)
    targets = {(s.topic, s.partition): broker.leader_partition(s.topic, s.partition, for_write=True) for s in slices}
    results: list[dict[str, int]] = []
    ends: dict[tuple[str, int], tuple[int, int]] = {}  # (end, leader epoch) per target
    copied = 0
    for piece in slices:
        if copied >= MAX_COPY_BYTES:
            break
        target = targets[(piece.topic, piece.partition)]
        data = read_range(source, piece.first, piece.last, target.log.config.max_message_bytes)
        copied += data.nbytes
        entering(data.nbytes)
        value_schemas = broker.value_schemas.get(piece.topic)
        if value_schemas:
            data = conform_produced(data, value_schemas, piece.schema_version)
        min_isr = target.log.config.min_insync_replicas
        try:
            info = target.append_as_leader(data, acks, piece.producer_id, piece.sequence, min_isr, wait=False)
        except DuplicateSequence:
            results.append({"base_offset": -1, "last_offset": -1, "count": data.num_rows})
            continue
        results.append({"base_offset": info.base_offset, "last_offset": info.last_offset, "count": info.count})
        key = (piece.topic, piece.partition)
        end, epoch = ends.get(key, (0, info.leader_epoch))
        # appends in two epochs (leadership lost and won back between them): the older one decides,
        # and the wait answers NotLeader (the earlier append may have been truncated meanwhile)
        ends[key] = (max(end, info.last_offset + 1), min(epoch, info.leader_epoch))
    if acks == "all":
        for key, (end, epoch) in ends.items():
            target = targets[key]
            target.await_high_watermark(end, target.log.config.min_insync_replicas, epoch)
    return {"results": results}
