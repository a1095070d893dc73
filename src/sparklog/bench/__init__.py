"""Benchmark scenarios behind ``sparklog bench``: each returns a flat dict of figures.

A scenario's module is imported when it runs, not before: a benchmark process then holds only what
its scenario uses (the consume benchmark counts its process's threads; the lake scenarios' Delta
package alone would add one).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

# scenario -> (module under sparklog.bench, function)
SCENARIOS: dict[str, tuple[str, str]] = {
    "append": ("append", "run"),
    "produce": ("broker_scenarios", "produce"),
    "consume": ("broker_scenarios", "consume"),
    "latency": ("broker_scenarios", "latency"),
    "failover": ("broker_scenarios", "failover"),
    "idle": ("idle", "run"),
    "startup": ("startup", "run"),
    "consume-fields": ("broker_scenarios", "consume_fields"),
    "spark-read": ("spark_scenarios", "spark_read"),
    "spark-write": ("spark_scenarios", "spark_write"),
    "tier": ("tier", "tier"),
    "kafka-clients": ("kafka_clients", "run"),
    "kafka-spark-read": ("kafka_clients", "spark_read_run"),
}


def scenario(name: str, lake: bool = False) -> Callable[..., dict[str, Any]]:
    """The function of scenario ``name``; ``spark-read`` with ``lake``: ``read_topic`` of a tiered
    topic against the plain source (:func:`sparklog.bench.spark_lake_scenarios.spark_read_lake`)."""
    module, function = ("spark_lake_scenarios", "spark_read_lake") if lake and name == "spark-read" else SCENARIOS[name]
    return getattr(importlib.import_module(f"{__name__}.{module}"), function)  # type: ignore[no-any-return]
