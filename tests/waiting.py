"""Waiting in tests: the one polling helper every test uses.

Standard library only, so that unit tests which start no broker can import it cheaply (the broker
helpers import pyarrow and Flight). The timeout is a hang guard, never the thing a test checks: pick
it generously (a slow, shared machine must not fail a correct test), and assert on what happened.
"""

from __future__ import annotations

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
