"""Offsets of a sparklog read: the offsets object, partition discovery, where reads start and end,
admission control (``maxOffsetsPerTrigger``, ``minOffsetsPerTrigger``), data-loss checks and splitting
into input partitions (``minPartitions``, ``maxRecordsPerPartition``, ``maxPartitions``).

The offsets object Spark checkpoints is Kafka's: ``{"topic": {"partition": offset}}`` where each
offset is the *next* offset to read (exclusive end of what was read), topics and partitions in sorted
order so that equal positions give equal JSON. All of this runs on the driver side.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

from sparklog.client.cluster_client import ClusterClient
from sparklog.datasource import connections
from sparklog.datasource.options import EARLIEST, LATEST, OffsetSpec, ReadOptions, Subscription
from sparklog.errors import InvalidRequest, OffsetOutOfRange, SparklogError, UnknownTopic

log = logging.getLogger("sparklog.datasource")

TP = tuple[str, int]
Offsets = dict[TP, int]
T = TypeVar("T")


def to_json(offsets: Mapping[TP, int]) -> dict[str, dict[str, int]]:
    """{(topic, partition): offset} -> Kafka's offsets object, sorted (stable JSON for equal positions)."""
    out: dict[str, dict[str, int]] = {}
    for topic, partition in sorted(offsets):
        out.setdefault(topic, {})[str(partition)] = int(offsets[(topic, partition)])
    return out


def from_json(data: Mapping[str, Any] | None) -> Offsets:
    out: Offsets = {}
    for topic, parts in (data or {}).items():
        for partition, offset in parts.items():
            out[(topic, int(partition))] = int(offset)
    return out


def describe(tp: TP) -> str:
    return f"{tp[0]}-{tp[1]}"


# ------------------------------------------------------------------------------------------ discovery
def discover(client: ClusterClient, subscription: Subscription, require_topics: bool = False) -> list[TP]:
    """Every (topic, partition) the subscription covers now (topics read fresh, so new
    topics matching a pattern and new partitions are picked up). Subscribed topics that do not exist
    are skipped, or fail with ``require_topics``."""
    if subscription.assigned:
        return _assigned(client, subscription)
    if subscription.pattern is not None:
        topics = [t for t in client.view.topics() if subscription.matches(t)]
    else:
        topics = list(subscription.topics)
    out: list[TP] = []
    for topic in topics:
        try:
            meta = client.topic(topic, refresh=True)
        except UnknownTopic:
            if require_topics:
                raise UnknownTopic(f"sparklog read: topic {topic!r} does not exist") from None
            continue
        out.extend((topic, p) for p in range(meta.partitions))
    return sorted(out)


def _assigned(client: ClusterClient, subscription: Subscription) -> list[TP]:
    """``assign``: exactly the partitions named, each of which must exist."""
    sizes: dict[str, int] = {}
    for topic, partition in subscription.assigned:
        if topic not in sizes:
            try:
                sizes[topic] = client.topic(topic, refresh=True).partitions
            except UnknownTopic:
                raise UnknownTopic(f"sparklog option 'assign': topic {topic!r} does not exist") from None
        if partition >= sizes[topic]:
            raise UnknownTopic(
                f"sparklog option 'assign': {topic}-{partition} does not exist ({topic} has {sizes[topic]} partitions)"
            )
    return list(subscription.assigned)


# ------------------------------------------------------------------------------------------ lookups
def with_retries(options: ReadOptions, what: str, call: Callable[[], T]) -> T:
    """``call()`` (a driver-side offsets lookup), tried again up to ``fetchOffset.numRetries`` times,
    ``fetchOffset.retryIntervalMs`` apart, when it fails with a retriable error (each attempt itself
    follows leader changes)."""
    attempt = 0
    while True:
        try:
            return call()
        except SparklogError as exc:
            if not exc.retriable:
                raise
            if attempt >= options.fetch_offset_retries:
                attempts = f"{attempt + 1} attempt{'s' if attempt else ''}"
                raise type(exc)(
                    f"sparklog: could not fetch {what} after {attempts} (fetchOffset.numRetries="
                    f"{options.fetch_offset_retries}): {exc}"
                ) from exc
            attempt += 1
            log.info("sparklog: fetching %s failed (%s); retry %d", what, exc, attempt)
            time.sleep(options.fetch_offset_retry_interval_ms / 1000)


def list_offsets(
    client: ClusterClient, options: ReadOptions, tps: Iterable[TP], timestamps: Mapping[TP, int] | None = None
) -> dict[TP, dict[str, Any]]:
    """list_offsets of every partition (with ``timestamps``: the first offset at or after each one's
    time, ``offset_for_time``), retried as the options say."""
    tps = list(tps)

    def one(tp: TP) -> dict[str, Any]:
        return client.list_offsets(*tp, timestamp=None if timestamps is None else timestamps[tp])

    return with_retries(options, "offsets", lambda: dict(zip(tps, connections.parallel(one, tps), strict=True)))


def _check_all_named(key: str, spec: OffsetSpec, tps: Iterable[TP], hint: str) -> None:
    """Kafka's rule: specific offsets (or timestamps) must name exactly the partitions read."""
    named = {(t, p) for t, parts in spec.items() for p in parts}
    read = set(tps)
    if named == read:
        return
    missing = ", ".join(map(describe, sorted(read - named)))
    extra = ", ".join(map(describe, sorted(named - read)))
    problems = [f"leaves out {missing}" if missing else "", f"names {extra}, which are not read" if extra else ""]
    raise InvalidRequest(
        f"sparklog option '{key}' gives specific offsets, so it must name every partition read; it "
        f"{' and '.join(p for p in problems if p)}. {hint}"
    )


def _spec_timestamps(spec: OffsetSpec, tps: Iterable[TP]) -> dict[TP, int]:
    return {tp: spec[tp[0]][tp[1]] for tp in tps}


# ------------------------------------------------------------------------------------------ positions
def _lookup(spec: Mapping[str, Mapping[int, int]] | None, tp: TP) -> int | None:
    if not spec:
        return None
    return spec.get(tp[0], {}).get(tp[1])


def starting_offsets(
    client: ClusterClient,
    options: ReadOptions,
    listed: Mapping[TP, Mapping[str, Any]],
    streaming: bool,
) -> Offsets:
    """Where a read starts on each partition (``listed``: list_offsets results of those partitions)."""
    mode = options.starting
    if mode == "default":
        mode = "latest" if streaming else "earliest"
    committed: Offsets = {}
    if mode == "group":
        assert options.group is not None
        committed = client.view.committed_offsets(options.group)
    by_time: dict[TP, Mapping[str, Any]] = {}
    if mode == "json":
        _check_all_named("startingOffsets", options.starting_json or {}, listed, "Use -1 for latest, -2 for earliest.")
    elif mode == "timestamp":
        assert options.starting_timestamp is not None
        by_time = list_offsets(client, options, listed, {tp: options.starting_timestamp for tp in listed})
    elif mode == "timestamps":
        spec = options.starting_json or {}
        _check_all_named("startingOffsetsByTimestamp", spec, listed, "Give a timestamp for each partition.")
        by_time = list_offsets(client, options, listed, _spec_timestamps(spec, listed))
    out: Offsets = {}
    for tp, info in listed.items():
        start, end = int(info["log_start_offset"]), int(info["high_watermark"])
        if mode == "earliest":
            out[tp] = start
        elif mode == "latest":
            out[tp] = end
        elif mode == "group":
            out[tp] = committed.get(tp, start)  # nothing committed yet: from the beginning
        elif mode in ("timestamp", "timestamps"):
            found = by_time[tp].get("offset_for_time")
            out[tp] = _no_match(options, tp, end) if found is None else int(found)
        else:  # json
            given = _lookup(options.starting_json, tp)
            if given is None or given == EARLIEST:
                out[tp] = start
            elif given == LATEST:
                out[tp] = end
            else:
                out[tp] = given
    return out


def _no_match(options: ReadOptions, tp: TP, end: int) -> int:
    """A starting timestamp after every record of ``tp``: fail (Kafka's default), or start at the
    latest offset with ``startingOffsetsByTimestampStrategy=latest``."""
    if options.starting_strategy == "latest":
        return end
    if options.starting == "timestamp":
        when, key = options.starting_timestamp, "startingTimestamp"
    else:
        when, key = _lookup(options.starting_json, tp), "startingOffsetsByTimestamp"
    raise InvalidRequest(
        f"sparklog: no offset matched from request of topic-partition {describe(tp)} and timestamp {when} "
        f"(option '{key}': no record is that recent); set startingOffsetsByTimestampStrategy=latest to "
        "start at the latest offset instead"
    )


def ending_offsets(client: ClusterClient, options: ReadOptions, listed: Mapping[TP, Mapping[str, Any]]) -> Offsets:
    """Where a batch read ends on each partition (exclusive); a time after every record is the latest
    offset (Kafka's rule for ending timestamps)."""
    by_time: dict[TP, Mapping[str, Any]] = {}
    if options.ending == "timestamp":
        assert options.ending_timestamp is not None
        by_time = list_offsets(client, options, listed, {tp: options.ending_timestamp for tp in listed})
    elif options.ending == "timestamps":
        spec = options.ending_json or {}
        _check_all_named("endingOffsetsByTimestamp", spec, listed, "Give a timestamp for each partition.")
        by_time = list_offsets(client, options, listed, _spec_timestamps(spec, listed))
    elif options.ending == "json":
        _check_all_named("endingOffsets", options.ending_json or {}, listed, "Use -1 for latest.")
    out: Offsets = {}
    for tp, info in listed.items():
        end = int(info["high_watermark"])
        if options.ending in ("timestamp", "timestamps"):
            found = by_time[tp].get("offset_for_time")
            out[tp] = end if found is None else int(found)
        elif options.ending == "json":
            given = _lookup(options.ending_json, tp)
            if given is None or given == LATEST:
                out[tp] = end
            elif given > end:
                raise InvalidRequest(
                    f"sparklog option 'endingOffsets': {describe(tp)} ends at offset {end}, "
                    f"so it cannot be read up to {given}"
                )
            else:
                out[tp] = given
        else:
            out[tp] = end
    return out


# ------------------------------------------------------------------------------------------ data loss
def check_data_loss(
    begin: Offsets,
    listed: Mapping[TP, Mapping[str, Any]],
    fail_on_data_loss: bool,
) -> Offsets:
    """Move starts that retention deleted (start < log start) to the log start, or fail.

    Gaps left by compaction are not data loss: offsets that no longer exist inside the log are simply
    not returned by the broker. A start past the log end means the log was truncated (or the topic
    recreated); the read then restarts from the new end."""
    out = dict(begin)
    for tp, offset in begin.items():
        info = listed.get(tp)
        if info is None:
            continue
        log_start, end = int(info["log_start_offset"]), int(info["high_watermark"])
        if offset < log_start:
            message = (
                f"sparklog: {describe(tp)} offsets {offset}..{log_start - 1} were deleted (retention moved the log "
                f"start to {log_start}) before they were read"
            )
            if fail_on_data_loss:
                raise OffsetOutOfRange(message + "; set failOnDataLoss=false to skip them and go on from the log start")
            log.warning("%s; skipping ahead (failOnDataLoss=false)", message)
            out[tp] = log_start
        elif offset > end:
            message = f"sparklog: {describe(tp)} was at offset {offset} but its log now ends at {end}"
            if fail_on_data_loss:
                raise OffsetOutOfRange(
                    message + " (truncated or recreated); set failOnDataLoss=false to go on from the new end"
                )
            log.warning("%s; going on from there (failOnDataLoss=false)", message)
            out[tp] = end
    return out


# ------------------------------------------------------------------------------------------ limits
def limit_rows(begin: Offsets, end: Offsets, max_rows: int) -> Offsets:
    """End offsets admitting at most ``max_rows`` offsets in all, shared in proportion to what each
    partition has waiting (largest remainders get the leftovers, so the sum is exact and every
    call admits something while anything is waiting)."""
    lag = {tp: max(0, end[tp] - begin.get(tp, end[tp])) for tp in end}
    total = sum(lag.values())
    if total <= max_rows:
        return dict(end)
    shares = {tp: max_rows * n / total for tp, n in lag.items()}
    take = {tp: min(lag[tp], math.floor(s)) for tp, s in shares.items()}
    left = max_rows - sum(take.values())
    for tp in sorted(lag, key=lambda t: (-(shares[t] - take[t]), -lag[t], t)):
        if left <= 0:
            break
        if take[tp] < lag[tp]:
            take[tp] += 1
            left -= 1
    return {tp: (begin.get(tp, end[tp]) + take[tp]) if tp in begin else end[tp] for tp in end}


def waiting(begin: Offsets, end: Offsets) -> int:
    """How many offsets wait between ``begin`` and ``end`` (partitions new in ``end`` count from 0)."""
    return sum(max(0, off - begin.get(tp, 0)) for tp, off in end.items())


# ------------------------------------------------------------------------------------------ splitting
@dataclasses.dataclass(frozen=True)
class Range:
    topic: str
    partition: int
    start: int
    end: int

    @property
    def size(self) -> int:
        return self.end - self.start


def _divide(r: Range, pieces: int) -> list[Range]:
    step = r.size / pieces
    bounds = [r.start + round(i * step) for i in range(pieces)] + [r.end]
    return [Range(r.topic, r.partition, a, b) for a, b in zip(bounds, bounds[1:], strict=False) if b > a]


def split_ranges(
    ranges: Iterable[Range], min_partitions: int | None, max_records_per_partition: int | None = None
) -> list[Range]:
    """One range per topic partition. ``maxRecordsPerPartition`` cuts every range into pieces of at
    most that many offsets; then, if that leaves fewer than ``minPartitions``, large ranges are cut
    into pieces in proportion to their size (the order of Spark's Kafka source)."""
    ranges = [r for r in ranges if r.size > 0]
    if max_records_per_partition:
        ranges = [piece for r in ranges for piece in _divide(r, math.ceil(r.size / max_records_per_partition))]
    if not min_partitions or min_partitions <= len(ranges):
        return ranges
    total = sum(r.size for r in ranges)
    out: list[Range] = []
    for r in ranges:
        out.extend(_divide(r, max(1, min(r.size, round(min_partitions * r.size / total)))))
    return out


def pack_ranges(ranges: Sequence[Range], max_partitions: int | None) -> list[list[Range]]:
    """The ranges (in (topic, partition, start) order) grouped into at most ``max_partitions``
    input partitions (each range alone when there are not more than that). Groups are runs of
    consecutive ranges holding about an even share of the offsets each (a range goes to the share
    its middle falls in), so reading the groups in turn still reads every partition in offset
    order. Spark's Python data source costs a task (a Python worker round) per input partition,
    tens of milliseconds each, which many small ranges (a short tail, a quiet topic of many
    partitions) would spend for nothing; Spark's file sources pack small files likewise."""
    if not max_partitions or len(ranges) <= max_partitions:
        return [[r] for r in ranges]
    ordered = sorted(ranges, key=lambda r: (r.topic, r.partition, r.start))
    total = sum(r.size for r in ordered) or 1
    groups: list[list[Range]] = [[] for _ in range(max_partitions)]
    before = 0
    for r in ordered:
        share = min(max_partitions - 1, int((before + r.size / 2) * max_partitions / total))
        groups[share].append(r)
        before += r.size
    return [group for group in groups if group]
