"""Benchmark scenarios behind ``sparklog bench``: each returns a flat dict of figures."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sparklog.bench import append, broker_scenarios, idle, spark_scenarios, startup

SCENARIOS: dict[str, Callable[..., dict[str, Any]]] = {
    "append": append.run,
    "produce": broker_scenarios.produce,
    "consume": broker_scenarios.consume,
    "latency": broker_scenarios.latency,
    "failover": broker_scenarios.failover,
    "idle": idle.run,
    "startup": startup.run,
    "consume-fields": broker_scenarios.consume_fields,
    "spark-read": spark_scenarios.spark_read,
    "spark-write": spark_scenarios.spark_write,
}
