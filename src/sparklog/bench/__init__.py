"""Benchmark scenarios behind ``sparklog bench``: each returns a flat dict of figures."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sparklog.bench import append

SCENARIOS: dict[str, Callable[..., dict[str, Any]]] = {"append": append.run}
