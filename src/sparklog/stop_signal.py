"""SIGTERM and SIGINT as a request to stop, for the processes that run until told to (a broker,
``sparklog up``, ``sparklog zookeeper``): the caller then stops what it runs, in order.

The handler only sets a flag. A Python signal handler runs in the main thread between two of its
bytecodes, wherever that thread is, and a second signal runs the handler again inside the first
one: a handler that takes a lock can wait for a lock its own thread holds, forever. Setting a
``threading.Event`` did exactly that: a broker sent SIGTERM twice (``LocalCluster.stop`` signals
each broker, then signals it again while waiting for it) ran the second handler inside the first's
``Event.set()``, which holds the event's lock, and hung until it was killed 15 s later. The main
thread polls the flag instead (:meth:`StopSignal.wait`).
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterable

POLL_S = 0.1  # how often wait() looks at the flag: how late a stop may start


class StopSignal:
    """Installs its handler for ``signals`` at once (restore() puts the previous ones back)."""

    def __init__(self, signals: Iterable[signal.Signals] = (signal.SIGTERM, signal.SIGINT)) -> None:
        self._raised = False
        self._previous = {sig: signal.signal(sig, self._handle) for sig in signals}

    def _handle(self, _signum: int, _frame: object) -> None:
        self._raised = True  # an assignment: nothing to wait for, whatever the main thread holds

    def is_set(self) -> bool:
        return self._raised

    def wait(self, timeout: float) -> bool:
        """Until a signal came or ``timeout`` seconds passed; whether one came."""
        deadline = time.monotonic() + timeout
        while not self._raised:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            time.sleep(min(left, POLL_S))  # a signal's handler runs during it; the sleep then goes on
        return True

    def restore(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
