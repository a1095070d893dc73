"""Fetch: committed records (below the high watermark) of each partition as Kafka record batches,
one per stored batch, encoded from its Arrow columns by the record batch codec and compressed with
the listener's fetch codec (lz4 by default, as most producers send them: a consumer's queue limits
and a fetch's byte limits then hold as many records as Kafka's compressed log would give). A fetch with
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
from sparklog.kafka.authorization import TOPIC
from sparklog.kafka.broker_access import PartitionRead, StoredBatch
from sparklog.kafka.record_batch import BatchFields, encode_batch

API = ApiSpec(FetchRequest, FetchResponse, 4, 12)  # 13 names topics by id only

Data = FetchResponse.FetchableTopicResponse.PartitionData
MAX_READS = 16  # reads of the log a partition's answer may take (compressed answers hold more)


def encode_stored(
    batches: list[StoredBatch] | tuple[StoredBatch, ...], log_append_time: bool, codec: int = 0
) -> list[bytes]:
    """Stored batches as Kafka record batches (base offset: each batch's first offset), their
    records compressed with ``codec``."""
    out = []
    for stored in batches:
        records = stored.records
        if records.num_rows == 0:
            continue
        if not pa.types.is_binary(records.schema.field("value").type):  # the broker's part, not done
            raise InvalidRequest("a stored batch's values reached the Kafka listener as columns, not bytes")
        first = records.column("offset")[0].as_py()
        fields = BatchFields(first, stored.leader_epoch, log_append_time, compression=codec)
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


def _read_encoded(
    ctx: RequestContext, item: _PartitionFetch, limit: int, first: bool
) -> tuple[list[bytes], PartitionRead]:
    """The partition's batches from the fetch offset as Kafka batches, about ``limit`` bytes of
    them as they go out (at least one if ``first``). The log is read ``limit`` bytes of Arrow data at
    a time: compressed batches are smaller than what they hold, so reading goes on (up to
    ``MAX_READS`` times) until the encoded batches fill the limit."""
    part = item.request
    offset = part.fetch_offset
    kept: list[bytes] = []
    size = 0
    read: PartitionRead | None = None
    for _ in range(MAX_READS):
        read = ctx.broker.read(item.topic, item.partition, offset, limit, part.current_leader_epoch)
        batches = list(read.batches)
        encoded = encode_stored(batches, read.log_append_time, ctx.listener.fetch_compression)
        for stored, batch in zip(batches, encoded, strict=True):
            if size + len(batch) > limit and (kept or not first):
                return kept, read
            kept.append(batch)
            size += len(batch)
            offset = stored.records.column("offset")[-1].as_py() + 1
        if not batches or offset >= read.high_watermark:
            break
    assert read is not None
    return kept, read


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
        kept, read = _read_encoded(ctx, item, limit, first)
        item.size = sum(len(batch) for batch in kept)
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

    refused = {t.topic for t in request.topics if not ctx.may.allowed(TOPIC, t.topic)}
    for item in items:
        if item.topic in refused:
            item.answer(error_code=error_codes.TOPIC_AUTHORIZATION_FAILED)
            item.done = True

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
