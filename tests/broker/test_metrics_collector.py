"""The scrape-time collector of :mod:`sparklog.broker.metrics`, in process: a scrape measures a
log without loading its lazily opened segments (a restarted broker keeps them unread until used)."""

from __future__ import annotations

import random
from collections.abc import Mapping
from pathlib import Path

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from log_helpers import config
from sparklog.broker.log import PartitionLog
from sparklog.broker.metrics import BrokerMetrics
from sparklog.broker.partition import Partition
from sparklog.coordination.cluster import PartitionState


class Held:
    """A :class:`~sparklog.broker.metrics.MetricsSource`: the partitions given, no controller."""

    def __init__(self, partitions: Mapping[tuple[str, int], Partition]) -> None:
        self.partitions = partitions

    def controller_state(self) -> tuple[bool, int]:
        return False, 0

    def zookeeper_state(self) -> str:
        return "CONNECTED"

    def zookeeper_round_trip_s(self) -> float | None:
        return 0.004


def samples(metrics: BrokerMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = generate_latest(metrics.registry).decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_a_scrape_measures_lazily_opened_segments_without_loading_them(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    log = PartitionLog(directory, config(segment_bytes=1024))
    rng = random.Random(3)
    for _ in range(20):
        log.append({"key": [b"k"], "value": [rng.randbytes(700)]})
    log.close()
    log = PartitionLog(directory, config(segment_bytes=1024))  # a clean open: old segments lazy
    try:
        old = log.segments[:-1]
        assert len(old) >= 10 and not any(s.loaded for s in old)
        partition = Partition("t", 0, 1, log, lambda _p, _isr: False)
        partition.apply_state(PartitionState(1, 0, [1]), 0, [1, 2])
        metrics = BrokerMetrics(1, Held({("t", 0): partition}))
        got = samples(metrics)
        on_disk = sum(p.stat().st_size for p in directory.glob("*.arrows"))
        labels = (("partition", "0"), ("topic", "t"))
        assert got[("kafka_log_log_size", labels)] == on_disk
        assert got[("kafka_log_log_numlogsegments", labels)] == len(log.segments)
        assert got[("sparklog_zookeeper_round_trip_ms", ())] == 4.0
        assert not any(s.loaded for s in old)  # measured on disk, never opened
        assert got[("kafka_server_replicamanager_leadercount", ())] == 1
        assert got[("kafka_server_replicamanager_underreplicatedpartitions", ())] == 1  # ISR [1] of [1, 2]
        assert got[("kafka_server_sessionexpirelistener_sessionstate", (("state", "CONNECTED"),))] == 1
        metrics.produced("t", 5, 100)
        metrics.isr_changed(1, 0)
        got = samples(metrics)
        assert got[("kafka_server_brokertopicmetrics_messagesin_total", (("topic", "t"),))] == 5
        assert got[("kafka_server_replicamanager_isrshrinks_total", ())] == 1
    finally:
        log.close()
