"""How many calls each client address may have open on a broker at once (``max.connections.per.ip``).

Arrow Flight multiplexes calls over gRPC connections, and each open call (a produce stream, a fetch
that long-polls or follows, an action) holds one of the broker's server threads until it ends. A
client that opens calls and never finishes them (never reads a following fetch, never closes a
produce stream) would otherwise hold threads without bound. So, like Kafka's
``max.connections.per.ip``, each client address gets at most ``max_per_ip`` open calls; one more is
refused at once with :class:`TooManyRequests` (retriable) and costs nothing.

A Flight middleware sees every call end (``call_completed``), even one cancelled by its client, so a
slot is always given back; the handler takes it, because only the handler knows the peer's address.
"""

from __future__ import annotations

import threading
from collections import Counter

import pyarrow.flight as flight

from sparklog.errors import TooManyRequests

MIDDLEWARE_KEY = "sparklog-call-limits"
DEFAULT_MAX_CALLS_PER_IP = 4096  # every client on one host shares an address: loopback clusters open many


def peer_address(peer: str | bytes) -> str:
    """The address part of a gRPC peer string (``ipv4:127.0.0.1:5000`` -> ``127.0.0.1``,
    ``ipv6:[::1]:5000`` -> ``::1``); the whole string when it has no port (a Unix socket)."""
    text = peer.decode() if isinstance(peer, bytes) else peer
    kind, _, rest = text.partition(":")
    if kind == "ipv6" and rest.startswith("["):
        return rest[1 : rest.find("]")]
    if kind == "ipv4":
        return rest.rpartition(":")[0]
    return text


class CallLimits(flight.ServerMiddlewareFactory):
    """Open calls per client address, and the limit on them."""

    def __init__(self, max_per_ip: int = DEFAULT_MAX_CALLS_PER_IP) -> None:
        self.max_per_ip = max_per_ip
        self._open: Counter[str] = Counter()
        self._lock = threading.Lock()

    def start_call(self, info: flight.CallInfo, headers: dict[str, list[str]]) -> _CallSlot:
        return _CallSlot(self)

    def open_calls(self, address: str) -> int:
        with self._lock:
            return self._open[address]

    def _acquire(self, address: str) -> None:
        with self._lock:
            if self._open[address] >= self.max_per_ip:
                raise TooManyRequests(
                    f"client {address} has {self._open[address]} calls open on this broker, "
                    f"the limit (max.connections.per.ip) is {self.max_per_ip}; retry when some have ended"
                )
            self._open[address] += 1

    def _release(self, address: str) -> None:
        with self._lock:
            self._open[address] -= 1
            if self._open[address] <= 0:
                del self._open[address]


class _CallSlot(flight.ServerMiddleware):
    """One call's place in its client's count, given back when the call ends."""

    def __init__(self, limits: CallLimits) -> None:
        self.limits = limits
        self.address: str | None = None

    def take(self, context: flight.ServerCallContext) -> None:
        """Count this call for its client's address (:class:`TooManyRequests` past the limit)."""
        if self.address is not None:
            return
        address = peer_address(context.peer())
        self.limits._acquire(address)
        self.address = address

    def call_completed(self, exception: BaseException | None) -> None:
        if self.address is not None:
            self.limits._release(self.address)
            self.address = None


def admit(context: flight.ServerCallContext) -> None:
    """Count the call of ``context`` against its client's limit (no-op on a server without limits)."""
    slot = context.get_middleware(MIDDLEWARE_KEY)
    if isinstance(slot, _CallSlot):
        slot.take(context)
