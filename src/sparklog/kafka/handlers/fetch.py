"""Fetch: committed records (below the high watermark) of each partition as Kafka record batches,
one per stored batch, encoded from its Arrow columns by the record batch codec. A fetch with
nothing to send waits (``max_wait_ms``) for ``min_bytes``, woken by the broker's change counter
for the partitions asked, not by polling; it gives up as soon as its client closed the connection
(a long poll left by its client would hold a thread and a ``max.connections.per.ip`` slot for up
to ``max_wait_ms``, 24 days at most). ``partition_max_bytes`` bounds each partition and
``max_bytes`` the response, except that the first batch found always goes out (as Kafka does, so
that a batch larger than the limits still makes progress). Errors are per partition: out of
range, not the leader, a fenced or unknown leader epoch; a follower's log that diverged from
``last_fetched_epoch`` gets the epoch's end (``diverging_epoch``) instead of records.

Fetch sessions (KIP-227) are not kept: the answer's ``session_id`` is 0, and clients send full
fetch requests. Only read_uncommitted exists (no transactions), so the last stable offset is the
high watermark."""

from __future__ import annotations

import time

import pyarrow as pa
from kafka.protocol.consumer import FetchRequest, FetchResponse

from sparklog.errors import InvalidRequest, SparklogError
from sparklog.kafka import error_codes
from sparklog.kafka.api import ApiSpec, Message, RequestContext
from sparklog.kafka.broker_access import PartitionRead, StoredBatch
from sparklog.kafka.record_batch import BatchFields, encode_batch

API = ApiSpec(FetchRequest, FetchResponse, 4, 12)  # 13 names topics by id only

Data = FetchResponse.FetchableTopicResponse.PartitionData


def encode_stored(batches: list[StoredBatch] | tuple[StoredBatch, ...], log_append_time: bool) -> list[bytes]:
    """Stored batches as Kafka record batches (base offset: each batch's first offset)."""
    out = []
    for stored in batches:
        records = stored.records
        if records.num_rows == 0:
            continue
        if not pa.types.is_binary(records.schema.field("value").type):
            raise InvalidRequest("typed topics are not served to Kafka clients yet")
        first = records.column("offset")[0].as_py()
        fields = BatchFields(first, stored.leader_epoch, log_append_time)
        out.append(encode_batch(records, fields))
    return out


class _PartitionFetch:
    __slots__ = ("topic", "partition", "request", "data", "size", "done")

    def __init__(self, topic: str, partition: int, request: Message) -> None:
        self.topic = topic
        self.partition = partition
        self.request = request
        self.data: Message | None = None
        self.size = 0
        self.done = False  # answered with an error or a divergence: not read again

    def answer(self, **fields: object) -> None:
        base = {
            "partition_index": self.partition,
            "error_code": error_codes.NONE,
            "high_watermark": -1,
            "last_stable_offset": -1,
            "log_start_offset": -1,
            "aborted_transactions": None,
            "preferred_read_replica": -1,
            "records": b"",
        }
        base.update(fields)
        self.data = Data(**base)


def _read_one(ctx: RequestContext, item: _PartitionFetch, budget: int, first: bool) -> None:
    """Read ``item`` (at most ``budget`` bytes, unless it is the response's first data)."""
    part = item.request
    try:
        if part.last_fetched_epoch >= 0:
            epoch, end = ctx.broker.epoch_end(item.topic, item.partition, part.last_fetched_epoch)
            if epoch < part.last_fetched_epoch or end < part.fetch_offset:
                offsets = ctx.broker.offsets(item.topic, item.partition, part.current_leader_epoch)
                diverging = Data.EpochEndOffset(epoch=epoch, end_offset=end)
                item.answer(
                    high_watermark=offsets.high_watermark,
                    last_stable_offset=offsets.high_watermark,
                    log_start_offset=offsets.log_start_offset,
                    diverging_epoch=diverging,
                )
                item.done = True
                return
        limit = max(0, min(part.partition_max_bytes, budget))
        read: PartitionRead = ctx.broker.read(
            item.topic, item.partition, part.fetch_offset, limit, part.current_leader_epoch
        )
        encoded = encode_stored(list(read.batches), read.log_append_time)
        kept: list[bytes] = []
        size = 0
        for batch in encoded:  # the read's size is Arrow's; the limits count Kafka's bytes
            if size + len(batch) > limit and (kept or not first):
                break
            kept.append(batch)
            size += len(batch)
        item.size = size
        item.answer(
            high_watermark=read.high_watermark,
            last_stable_offset=read.high_watermark,
            log_start_offset=read.log_start_offset,
            records=b"".join(kept),
        )
    except SparklogError as exc:
        item.answer(error_code=error_codes.error_code(exc))
        item.done = True


def handle(request: Message, ctx: RequestContext) -> Message:
    items = [_PartitionFetch(t.topic, p.partition, p) for t in request.topics for p in t.partitions]
    keys = [(i.topic, i.partition) for i in items]
    deadline = time.monotonic() + max(0, request.max_wait_ms) / 1000
    min_bytes = max(0, request.min_bytes)
    max_bytes = request.max_bytes if ctx.api_version >= 3 else 2**31 - 1

    def give_up() -> bool:  # the broker stops, or the client left: nobody waits for the answer
        return ctx.stopping() or ctx.client_gone()

    while True:
        version = ctx.broker.change_version  # before looking: a change after it wakes the wait
        budget = max_bytes
        total = 0
        errors = False
        for item in items:
            if item.done:
                errors = True
                continue
            _read_one(ctx, item, budget, first=total == 0)
            total += item.size
            budget -= item.size
            errors = errors or item.done
        if total >= max(min_bytes, 1) or errors or give_up() or time.monotonic() >= deadline:
            break
        ctx.broker.wait_for_change(version, keys, deadline, give_up)
    by_topic: dict[str, list[Message]] = {}
    for item in items:
        by_topic.setdefault(item.topic, []).append(item.data)
    return ctx.response(
        API,
        throttle_time_ms=0,
        error_code=error_codes.NONE,
        session_id=0,
        responses=[FetchResponse.FetchableTopicResponse(topic=t, partitions=p) for t, p in by_topic.items()],
    )
