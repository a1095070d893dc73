"""A real run for the dashboard's picture: a 3-broker cluster (its own ZooKeeper, a lake dir),
steady produce traffic, a consumer group that stalls and catches up, a lake-enabled topic whose
segments roll now and then, and a broker killed with SIGKILL and restarted. Every broker's
metrics are recorded each second throughout (:class:`~sparklog.dashboard.recording.Recorder`).
"""

from __future__ import annotations

import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from sparklog.dashboard.promql import Recording
from sparklog.dashboard.recording import Recorder


@dataclass
class Timeline:
    """When each step happens, in seconds from the start of the recording."""

    consumer_starts: float = 8.0
    consumer_stalls: float = 30.0
    consumer_resumes: float = 42.0
    broker_killed: float = 52.0
    broker_restarted: float = 66.0
    ends: float = 90.0
    events: list[tuple[float, str]] = field(default_factory=list)  # what happened, when (filled as it does)


def run(
    timeline: Timeline | None = None, say: Callable[[str], None] = print
) -> tuple[Recording, list[tuple[float, str]]]:
    """Run the scenario; the recording and its events."""
    from sparklog import Admin
    from sparklog.local_cluster import LocalCluster

    plan = timeline or Timeline()
    with tempfile.TemporaryDirectory(prefix="sparklog-dashboard-") as tmp:
        base = Path(tmp)
        with LocalCluster(base / "cluster", brokers=3, lake_dir=base / "lake") as cluster:
            with Admin(cluster.zookeeper) as admin:
                admin.create_topic("clicks", 6, 3, configs={"min.insync.replicas": 2})
                admin.create_topic(
                    "orders", 2, 2, configs={"lake.enabled": "true", "segment.ms": 15_000, "segment.bytes": 1 << 30}
                )
            recorder = Recorder(
                lambda: {f"broker-{i}": b.metrics_url() or "" for i, b in cluster.brokers.items() if b.alive()}
            ).start()
            began = time.monotonic()

            def at(seconds: float) -> float:
                return began + seconds

            def event(what: str) -> None:
                plan.events.append((time.monotonic() - began, what))
                say(f"{time.monotonic() - began:5.1f} s: {what}")

            stop = threading.Event()
            producing = threading.Thread(target=_produce, args=(cluster.zookeeper, stop), daemon=True)
            producing.start()
            consuming = threading.Thread(target=_consume, args=(cluster.zookeeper, plan, at, stop, event), daemon=True)
            consuming.start()
            _sleep_until(at(plan.broker_killed))
            cluster.brokers[3].kill()
            event("broker 3 killed (SIGKILL)")
            _sleep_until(at(plan.broker_restarted))
            cluster.restart(3)
            event("broker 3 restarted")
            _sleep_until(at(plan.ends))
            stop.set()
            producing.join(30)
            consuming.join(30)
            recording = recorder.stop()
    return recording, plan.events


def _sleep_until(moment: float) -> None:
    time.sleep(max(0.0, moment - time.monotonic()))


def _produce(zookeeper: str, stop: threading.Event) -> None:
    """About 4,000 clicks and 400 orders a second, acks=all."""
    from sparklog import Producer

    with Producer(zookeeper, acks="all", delivery_timeout_s=60.0) as producer:
        n = 0
        while not stop.is_set():
            clicks = producer.send_batch_async("clicks", {"value": [b"click-%d" % (n + i) for i in range(200)]})
            orders = producer.send_batch_async("orders", {"value": [b"order-%d" % (n + i) for i in range(20)]})
            clicks.result()
            orders.result()
            n += 200
            time.sleep(0.05)


def _consume(
    zookeeper: str,
    plan: Timeline,
    at: Callable[[float], float],
    stop: threading.Event,
    event: Callable[[str], None],
) -> None:
    """The "dashboard" group on clicks: starts late, stalls a while, then catches up."""
    from sparklog import Consumer

    _sleep_until(at(plan.consumer_starts))
    with Consumer("clicks", group="dashboard", zookeeper=zookeeper, auto_offset_reset="earliest") as consumer:
        event("group 'dashboard' starts reading")
        stalled = False
        while not stop.is_set():
            now = time.monotonic()
            if at(plan.consumer_stalls) <= now < at(plan.consumer_resumes):
                if not stalled:
                    event("the group stalls")
                    stalled = True
                time.sleep(0.2)
                continue
            if stalled:
                event("the group resumes")
                stalled = False
            consumer.poll_batches(timeout=0.5)
            consumer.commit()
