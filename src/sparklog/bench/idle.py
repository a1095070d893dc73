"""``sparklog bench idle``: what a cluster costs doing nothing. Brokers with a replicated topic of
``partitions`` partitions, nothing produced; once every broker opened its replicas and after a
settling pause, the brokers' CPU time over ``seconds`` (``idle_cpu_s``, summed over the brokers,
from /proc) and the most threads any broker has. ``--against kafka`` measures a KRaft cluster of
as many Kafka nodes the same way (:func:`kafka_run`)."""

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
SETTLE_S = 90.0  # Kafka keeps busy for about a minute after its replicas are in sync (JIT, controller work)


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def thread_count(pid: int) -> int:
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
            pids = [b.process.pid for b in cluster.brokers.values() if b.process is not None]
            idle_cpu_s, threads = measure_idle(pids, seconds)
        finally:
            cluster.stop()
    return _result(partitions, len(pids), replication_factor, seconds, idle_cpu_s, threads, ready_s)


def measure_idle(pids: list[int], seconds: float) -> tuple[float, int]:
    """After ``SETTLE_S``: the processes' CPU seconds summed over ``seconds``, and the most threads
    any of them had."""
    time.sleep(SETTLE_S)
    before = [cpu_seconds(pid) for pid in pids]
    threads = max(thread_count(pid) for pid in pids)
    time.sleep(seconds)
    after = [cpu_seconds(pid) for pid in pids]
    threads = max(threads, *(thread_count(pid) for pid in pids))
    return round(sum(a - b for a, b in zip(after, before, strict=True)), 2), threads


def kafka_run(
    partitions: int = 1000, brokers: int = 3, replication_factor: int = 3, seconds: float = 20.0, **_: Any
) -> dict[str, Any]:
    """The same measure of Apache Kafka: KRaft nodes (broker and controller each), the topic
    created with ``kafka-topics``, measured once no partition is under-replicated or leaderless."""
    from sparklog.bench.kafka_peer import KafkaCluster

    nodes = max(brokers, replication_factor)
    with tempfile.TemporaryDirectory(prefix="sparklog-bench-idle-kafka-") as tmp:
        kafka = KafkaCluster(brokers=nodes, data_dir=tmp).start()
        try:
            started = time.monotonic()
            kafka.create_topic(TOPIC, partitions, replication_factor)
            while kafka.under_replicated(TOPIC):  # every replica created and in sync, as for sparklog
                if time.monotonic() - started > 600:
                    raise RuntimeError("Kafka did not bring every replica in sync within 600 s")
                time.sleep(1)
            ready_s = time.monotonic() - started
            pids = [process.pid for process in kafka.processes.values()]
            idle_cpu_s, threads = measure_idle(pids, seconds)
        finally:
            kafka.stop()
    return _result(partitions, nodes, replication_factor, seconds, idle_cpu_s, threads, ready_s)


def _result(
    partitions: int,
    brokers: int,
    replication_factor: int,
    seconds: float,
    idle_cpu_s: float,
    threads: int,
    ready_s: float,
) -> dict[str, Any]:
    return {
        "scenario": "idle",
        "partitions": partitions,
        "brokers": brokers,
        "replication_factor": replication_factor,
        "seconds": seconds,
        "idle_cpu_s": idle_cpu_s,
        "threads": threads,
        "replicas_open_s": round(ready_s, 1),  # from the topic's creation until every replica is ready
        "load_average": os.getloadavg()[0],
    }
