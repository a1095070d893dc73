"""The values of the latency scenarios, on both sides (``broker_scenarios.latency``,
``kafka_peer.confluent_latency``): each carries its send time (8 bytes, little-endian
``time.perf_counter_ns``: CLOCK_MONOTONIC, comparable across processes on Linux), then a byte that
is 1 for warm-up records (not measured) and 0 for measured ones, then padding."""

from __future__ import annotations

import time
from collections.abc import Iterator

WARMUP_FLAG_AT = 8  # the byte after the send time


def paced_values(rate: int, warm: int, total: int, value_bytes: int) -> Iterator[bytes]:
    """``warm`` warm-up values then ``total`` measured ones, each yielded when it is due at ``rate``
    per second and stamped with that moment (the caller sends it at once). A too small
    ``value_bytes`` is refused here, before anything is sent."""
    if value_bytes < WARMUP_FLAG_AT + 1:
        raise ValueError("latency values need at least 9 bytes (send time + warm-up flag)")
    return _paced(rate, warm, total, value_bytes)


def _paced(rate: int, warm: int, total: int, value_bytes: int) -> Iterator[bytes]:
    tails = (b"\1" + b"\0" * (value_bytes - 9), b"\0" * (value_bytes - 8))
    next_at = time.perf_counter()
    for i in range(warm + total):
        delay = next_at - time.perf_counter()
        if delay > 0:
            time.sleep(delay)  # sleep, not spin: a spinning thread holds the GIL
        yield time.perf_counter_ns().to_bytes(8, "little", signed=True) + tails[i >= warm]
        next_at += 1.0 / rate
