"""Offsets of a sparklog read: the offsets object, partition discovery, where reads start and end,
admission control (``maxRecordsPerTrigger``), data-loss checks and splitting into input partitions.

The offsets object Spark checkpoints is Kafka's: ``{"topic": {"partition": offset}}`` where each
offset is the *next* offset to read (exclusive end of what was read), topics and partitions in sorted
order so that equal positions give equal JSON. All of this runs on the driver side.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Iterable, Mapping
from typing import Any

from sparklog.client.cluster_client import ClusterClient
from sparklog.datasource.options import EARLIEST, LATEST, ReadOptions, Subscription
from sparklog.errors import InvalidRequest, OffsetOutOfRange, UnknownTopic

log = logging.getLogger("sparklog.datasource")

TP = tuple[str, int]
Offsets = dict[TP, int]


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
    if mode == "timestamp":
        from sparklog.datasource.connections import list_offsets

        by_time = list_offsets(client, listed, timestamp=options.starting_timestamp)
    out: Offsets = {}
    for tp, info in listed.items():
        start, end = int(info["log_start_offset"]), int(info["high_watermark"])
        if mode == "earliest":
            out[tp] = start
        elif mode == "latest":
            out[tp] = end
        elif mode == "group":
            out[tp] = committed.get(tp, start)  # nothing committed yet: from the beginning
        elif mode == "timestamp":
            found = by_time[tp].get("offset_for_time")
            out[tp] = end if found is None else int(found)
        else:  # json
            given = _lookup(options.starting_json, tp)
            if given is None or given == EARLIEST:
                out[tp] = start
            elif given == LATEST:
                out[tp] = end
            else:
                out[tp] = given
    return out


def ending_offsets(client: ClusterClient, options: ReadOptions, listed: Mapping[TP, Mapping[str, Any]]) -> Offsets:
    """Where a batch read ends on each partition (exclusive)."""
    by_time: dict[TP, Mapping[str, Any]] = {}
    if options.ending == "timestamp":
        from sparklog.datasource.connections import list_offsets

        by_time = list_offsets(client, listed, timestamp=options.ending_timestamp)
    out: Offsets = {}
    for tp, info in listed.items():
        end = int(info["high_watermark"])
        if options.ending == "timestamp":
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


def split_ranges(ranges: Iterable[Range], min_partitions: int | None) -> list[Range]:
    """One range per topic partition; with ``minPartitions`` above that count, large ranges are cut
    into pieces in proportion to their size (like Spark's Kafka source)."""
    ranges = [r for r in ranges if r.size > 0]
    if not min_partitions or min_partitions <= len(ranges):
        return ranges
    total = sum(r.size for r in ranges)
    out: list[Range] = []
    for r in ranges:
        pieces = max(1, min(r.size, round(min_partitions * r.size / total)))
        step = r.size / pieces
        bounds = [r.start + round(i * step) for i in range(pieces)] + [r.end]
        out.extend(Range(r.topic, r.partition, a, b) for a, b in zip(bounds, bounds[1:], strict=False) if b > a)
    return out
