"""How long a call must wait to keep its principal within its quotas (Kafka's client quotas,
:mod:`sparklog.security.quotas`): a token bucket per (principal, kind) holding at most one second of
the rate. A call takes its amount (bytes, or 1 for a request) from the bucket; a bucket that goes
below zero refills at the rate, and the call waits until it is back at zero (as Kafka delays the
response of a client over its quota). Pure logic: the clock is injectable, and the broker does the
sleeping (:class:`~sparklog.broker.server.BrokerServer`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Literal

from sparklog.security.quotas import Quota

Kind = Literal["produce", "fetch", "request"]
_RATE_OF: dict[str, str] = {
    "produce": "producer_byte_rate",
    "fetch": "consumer_byte_rate",
    "request": "request_rate",
}


class _Bucket:
    __slots__ = ("rate", "tokens", "at")

    def __init__(self, rate: float, now: float) -> None:
        self.rate = rate
        self.tokens = rate  # a full second of burst to begin with
        self.at = now


class Throttle:
    """``delay(principal, kind, amount)``: the seconds a call must wait. ``quotas(principal)``: the
    principal's :class:`Quota` (a broker's :meth:`QuotaCache.quota_for`, with none for super users)."""

    def __init__(self, quotas: Callable[[str], Quota], clock: Callable[[], float] = time.monotonic) -> None:
        self.quotas = quotas
        self.clock = clock
        self._buckets: dict[tuple[str, str], _Bucket] = {}
        self._lock = threading.Lock()

    def delay(self, principal: str, kind: Kind, amount: float) -> float:
        """Take ``amount`` from the principal's bucket of ``kind``; the seconds until the bucket is
        back within quota (0 when it is, or without a quota of that kind)."""
        rate = getattr(self.quotas(principal), _RATE_OF[kind])
        key = (principal, kind)
        with self._lock:
            if rate is None:
                self._buckets.pop(key, None)
                return 0.0
            now = self.clock()
            bucket = self._buckets.get(key)
            if bucket is None:
                bucket = self._buckets[key] = _Bucket(rate, now)
            elif bucket.rate != rate:  # the quota changed: keep the balance, within the new burst
                bucket.rate = rate
                bucket.tokens = min(bucket.tokens, rate)
            bucket.tokens = min(rate, bucket.tokens + max(0.0, now - bucket.at) * rate)
            bucket.at = now
            bucket.tokens -= amount
            return -bucket.tokens / rate if bucket.tokens < 0 else 0.0
