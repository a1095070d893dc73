"""Benchmarks on a cluster spread over hosts (network namespaces, root only): how long a partition
takes ``acks=all`` writes again after its leader's host falls off the network (``failover
--hosts``), and a Jepsen-style run through every fault of :mod:`sparklog.hosts.faults` (``faults``)
with the checker's figures."""

from __future__ import annotations

import statistics
import tempfile
from collections.abc import Sequence
from typing import Any

from sparklog.hosts import faults as host_faults
from sparklog.hosts.cluster import HostCluster
from sparklog.hosts.remote_workload import RemoteWorkload
from sparklog.hosts.workload import failover_s

TOPIC = "bench-hosts"
CHECKED = ("lost", "misplaced", "duplicated", "strangers", "out_of_order", "group_missed")


def _figures(report: dict[str, Any]) -> dict[str, Any]:
    return {k: report[k] for k in ("acked", *CHECKED, "unacked_sent", "unacked_stored")}


def run_faults(
    names: Sequence[str], partitions: int = 3, writers: int = 3, members: int = 2
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The faults ``names`` in turn on a fresh cluster on hosts (3 ZooKeeper, 3 brokers) under one
    workload with a probe on partition 0: what each fault did (with ``failover_s`` for those that
    took partition 0's leader away), and the checker's report."""
    with (
        tempfile.TemporaryDirectory(prefix="sparklog-bench-") as tmp,
        HostCluster(tmp, brokers=3) as cluster,
        RemoteWorkload(cluster, TOPIC, partitions, writers, members, probe_partition=0) as work,
    ):
        cluster.wait_settled(TOPIC)
        work.wait_acked(200)
        happened = []
        for name in names:
            happened.append(host_faults.inject(cluster, TOPIC, name))
            work.wait_acked(100)  # writes flow again before the next fault
        report = work.stop()
    for fault in happened:
        if "new_leader_after_s" in fault:
            fault["failover_s"] = failover_s(report["probe"], fault["at"])
        del fault["at"]
    return happened, report


def failover(repeat: int = 3, partitions: int = 3, **_: Any) -> dict[str, Any]:
    """RF=3 on 3 broker hosts, a 3-server ensemble on 3 more, min ISR 2, ``acks=all`` writers and a
    one-at-a-time probe on partition 0: the leader's host is cut off ``repeat`` times (held 12 s,
    then reconnected, the cluster settled); ``failover_s`` is the median time from the cut to the
    probe's first acknowledged write begun after it."""
    happened, report = run_faults(["leader-host-cut-off"] * repeat, partitions, writers=2, members=1)
    return failover_figures(happened, report, partitions)


def failover_figures(happened: list[dict[str, Any]], report: dict[str, Any], partitions: int) -> dict[str, Any]:
    times = [h["failover_s"] for h in happened]
    measured = [t for t in times if t is not None]
    return {
        "scenario": "failover",
        "hosts": True,
        "repeat": len(happened),
        "partitions": partitions,
        "replication_factor": 3,
        "acks": "all",
        "zookeeper_session_timeout_s": 4.0,
        "failover_s": round(statistics.median(measured), 3) if measured else None,
        "failover_max_s": max(measured, default=None),
        "failover_all_s": times,
        "new_leader_after_s": [h["new_leader_after_s"] for h in happened],
        **_figures(report),
    }


def faults(partitions: int = 3, faults: Sequence[str] = tuple(host_faults.FAULTS), **_: Any) -> dict[str, Any]:
    """The ``faults`` (default: every fault of :data:`sparklog.hosts.faults.FAULTS`) in turn under
    one workload (``acks=all`` writers and a consumer group on an RF=3, min ISR 2 topic), then the
    checker's figures."""
    happened, report = run_faults(faults, partitions)
    return faults_figures(happened, report, partitions)


def faults_figures(happened: list[dict[str, Any]], report: dict[str, Any], partitions: int) -> dict[str, Any]:
    return {
        "scenario": "faults",
        "hosts": True,
        "partitions": partitions,
        "replication_factor": 3,
        "min_insync_replicas": 2,
        "acks": "all",
        "faults": happened,
        **_figures(report),
    }
