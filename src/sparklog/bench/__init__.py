"""Benchmark scenarios behind ``sparklog bench``: each returns a flat dict of figures."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sparklog.bench import append, broker_scenarios, idle, spark_lake_scenarios, spark_scenarios, startup, tier


def spark_read(lake: bool = False, **options: Any) -> dict[str, Any]:
    """``spark-read``: the ``sparklog`` source's read; with ``lake``, ``read_topic`` of a tiered
    topic against it (:func:`sparklog.bench.spark_lake_scenarios.spark_read_lake`)."""
    if lake:
        return spark_lake_scenarios.spark_read_lake(**options)
    return spark_scenarios.spark_read(**options)


SCENARIOS: dict[str, Callable[..., dict[str, Any]]] = {
    "append": append.run,
    "produce": broker_scenarios.produce,
    "consume": broker_scenarios.consume,
    "latency": broker_scenarios.latency,
    "failover": broker_scenarios.failover,
    "idle": idle.run,
    "startup": startup.run,
    "consume-fields": broker_scenarios.consume_fields,
    "spark-read": spark_read,
    "spark-write": spark_scenarios.spark_write,
    "tier": tier.tier,
}
