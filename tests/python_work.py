"""How much Python a call runs, counted (not timed): the lines of Python source it executes.

A columnar path (numpy, Arrow compute) runs the same few Python lines whatever the number of records;
a per-record Python loop runs at least one more line per record. Counting lines tells the two apart
on any machine, however slow or busy, where a stopwatch cannot. Standard library only.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from types import FrameType
from typing import Any


def python_lines(call: Callable[[], Any]) -> int:
    """The number of Python source lines ``call()`` executes (in every function it calls)."""
    count = 0

    def trace(frame: FrameType, event: str, arg: Any) -> Callable[..., Any]:
        nonlocal count
        if event == "line":
            count += 1
        return trace

    previous = sys.gettrace()
    sys.settrace(trace)
    try:
        call()
    finally:
        sys.settrace(previous)
    return count


def python_lines_per_record(call_on: Callable[[int], Callable[[], Any]], few: int, many: int) -> float:
    """The Python lines each record beyond ``few`` adds: ``call_on(n)`` is a call processing ``n``
    records (built outside the count); each is run once untraced first (caches, lazy imports)."""
    runs = {}
    for n in (few, many):
        call = call_on(n)
        call()
        runs[n] = python_lines(call)
    return (runs[many] - runs[few]) / (many - few)
