"""``sparklog bench idle``: what a cluster costs doing nothing. Brokers with a replicated topic of
``partitions`` partitions, nothing produced; once every broker opened its replicas and after a
settling pause, the brokers' CPU time over ``seconds`` (``idle_cpu_s``, summed over the brokers,
from /proc) and the most threads any broker has."""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path
from typing import Any

from sparklog.client.admin import Admin
from sparklog.coordination.cluster import ClusterMetadata
from sparklog.local_cluster import LocalCluster

TOPIC = "idle"
SETTLE_S = 5.0


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _threads(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))


def _replicas_open(cluster: LocalCluster) -> bool:
    """Whether every broker opened the log of every replica it holds (a broker takes its
    partitions one by one after the topic appears; until then it is starting, not idle)."""
    with ClusterMetadata(cluster.zookeeper) as zk:
        replicas = zk.topic(TOPIC).replicas
    for broker_id, broker in cluster.brokers.items():
        held = sum(broker_id in r for r in replicas)
        if len(list(Path(broker.data_dir).glob(f"{TOPIC}-*"))) < held:
            return False
    return True


def run(
    partitions: int = 1000, brokers: int = 3, replication_factor: int = 3, seconds: float = 20.0, **_: Any
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="sparklog-bench-idle-") as tmp:
        cluster = LocalCluster(tmp, brokers=max(brokers, replication_factor)).start()
        try:
            with Admin(cluster.zookeeper) as admin:
                admin.create_topic(TOPIC, partitions, replication_factor)
            started = time.monotonic()
            while not _replicas_open(cluster):
                if time.monotonic() - started > 600:
                    raise RuntimeError("the brokers did not open their replicas within 600 s")
                time.sleep(1)
            ready_s = time.monotonic() - started
            time.sleep(SETTLE_S)
            pids = [b.process.pid for b in cluster.brokers.values() if b.process is not None]
            before = [_cpu_s(pid) for pid in pids]
            threads = max(_threads(pid) for pid in pids)
            time.sleep(seconds)
            after = [_cpu_s(pid) for pid in pids]
            threads = max(threads, *(_threads(pid) for pid in pids))
        finally:
            cluster.stop()
    return {
        "scenario": "idle",
        "partitions": partitions,
        "brokers": len(pids),
        "replication_factor": replication_factor,
        "seconds": seconds,
        "idle_cpu_s": round(sum(a - b for a, b in zip(after, before, strict=True)), 2),
        "threads": threads,
        "replicas_open_s": round(ready_s, 1),  # from the topic's creation until every broker took its replicas
        "load_average": os.getloadavg()[0],
    }
