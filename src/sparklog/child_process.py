"""Helpers for the processes sparklog starts (ZooKeeper, brokers)."""

from __future__ import annotations

import contextlib
import signal
import sys
from collections.abc import Callable

_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """Run in a child before exec (Linux): it gets SIGTERM if its parent dies without stopping it,
    so a ``kill -9`` of ``sparklog up`` or of a test run leaves no ZooKeeper or broker behind."""
    with contextlib.suppress(Exception):  # not Linux: children outlive a killed parent
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def preexec() -> Callable[[], None] | None:
    """The ``preexec_fn`` for ``subprocess.Popen`` (None where it cannot work)."""
    return die_with_parent if sys.platform.startswith("linux") else None
