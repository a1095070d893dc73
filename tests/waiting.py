"""Waiting in tests: :func:`wait_for` polls a condition until it holds, :func:`finishes` runs a call
that must end (one home for both, instead of a copy per test file).

Standard library only, so that unit tests which start no broker can import it cheaply (the broker
helpers import pyarrow and Flight). The timeout is a hang guard, never the thing a test checks: pick
it generously (a slow, shared machine must not fail a correct test), and assert on what happened.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any


def wait_for(
    predicate: Callable[[], Any], timeout: float, what: str | Callable[[], str], interval: float = 0.05
) -> Any:
    """Poll ``predicate`` until it returns something truthy (returned), or fail with an
    ``AssertionError`` after ``timeout`` seconds naming ``what`` was waited for (a string, or a
    callable giving one when the wait fails, to show the state at that moment)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            described = what() if callable(what) else what
            raise AssertionError(f"timed out after {timeout}s waiting for {described}")
        time.sleep(interval)


def finishes(call: Callable[[], Any], timeout: float, what: str) -> Any:
    """Run ``call`` on a daemon thread and return what it returns (or raise what it raises); fail
    with an ``AssertionError`` if it is still running after ``timeout`` seconds.

    For a call that must end on an event (data arriving, a wakeup, a shutdown) although its own
    limit is much longer: give it that long limit, and a ``timeout`` far below it (and far above
    how long the event takes), so that a call waiting out its limit fails here instead of passing
    slowly."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["value"] = call()
        except BaseException as exc:  # re-raised in the caller's thread
            outcome["error"] = exc

    thread = threading.Thread(target=run, name=f"finishes: {what}", daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        raise AssertionError(f"{what}: still running after {timeout}s")
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]
