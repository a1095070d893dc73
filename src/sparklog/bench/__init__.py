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
    "faults": ("hosts_scenarios", "faults"),
    "idle": ("idle", "run"),
    "startup": ("startup", "run"),
    "consume-fields": ("broker_scenarios", "consume_fields"),
    "spark-read": ("spark_scenarios", "spark_read"),
    "spark-write": ("spark_scenarios", "spark_write"),
    "tier": ("tier", "tier"),
    "kafka-clients": ("kafka_clients", "run"),
    "kafka-spark-read": ("kafka_clients", "spark_read_run"),
    "metrics-cost": ("metrics_cost", "run"),
}


# scenarios run on several hosts (network namespaces) with --hosts; "faults" runs there always
ON_HOSTS: dict[str, tuple[str, str]] = {
    "failover": ("hosts_scenarios", "failover"),
    "faults": ("hosts_scenarios", "faults"),
}


def scenario(name: str, lake: bool = False, hosts: bool = False) -> Callable[..., dict[str, Any]]:
    """The function of scenario ``name``; ``spark-read`` with ``lake``: ``read_topic`` of a tiered
    topic against the plain source (:func:`sparklog.bench.spark_lake_scenarios.spark_read_lake`);
    with ``hosts``: its run on several hosts (:data:`ON_HOSTS`)."""
    if hosts:
        module, function = ON_HOSTS[name]
    elif lake and name == "spark-read":
        module, function = "spark_lake_scenarios", "spark_read_lake"
    else:
        module, function = SCENARIOS[name]
    return getattr(importlib.import_module(f"{__name__}.{module}"), function)  # type: ignore[no-any-return]
