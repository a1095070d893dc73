"""Consumer group lag, exported by the active controller's metrics endpoint.

Per group, topic and partition: the committed offset, the partition's high watermark (the end a
consumer can read to) and their difference, under the names of the Kafka exporter Grafana's Kafka
dashboards are built on (``kafka_consumergroup_lag``, ``kafka_consumergroup_current_offset``,
``kafka_consumergroup_lag_sum``, ``kafka_topic_partition_current_offset``). Every group whose
offsets ZooKeeper holds is measured: sparklog consumers, Kafka clients' groups and Spark queries
reading with ``group`` (their micro-batches commit there) alike.

Only the active controller exports lag (one place to scrape, like a lag exporter; the figures do
not appear once per broker), read at scrape time so they are never stale: committed offsets from
ZooKeeper (one pipelined round per group's topic), the partitions' leaders from their states (one
round per topic), high watermarks from each leader (this broker's own partitions directly, one
``list_offsets`` action per other leader). A partition whose leader does not answer is left out of
that scrape: an absent lag, never a false 0.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator
from typing import Protocol

from kazoo.exceptions import KazooException
from kazoo.protocol.states import WatchedEvent
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from sparklog.coordination.cluster import PartitionState
from sparklog.errors import SparklogError

log = logging.getLogger("sparklog.broker.group_lag")

TopicPartition = tuple[str, int]


class GroupOffsetStore(Protocol):
    """Where groups' committed offsets and partitions' states are (ZooKeeper)."""

    def groups(self) -> list[str]: ...

    def committed_offsets(self, group: str, topic: str | None = None) -> dict[TopicPartition, int]: ...

    def partition_states(
        self, topic: str, partitions: Iterable[int], watch: Callable[[WatchedEvent], None] | None = None
    ) -> dict[int, tuple[PartitionState, int]]: ...


# a leader's high watermarks of some of its partitions (those it could not answer left out)
HighWatermarks = Callable[[int, list[TopicPartition]], dict[TopicPartition, int]]


class GroupLagCollector(Collector):
    """Collects nothing unless ``is_controller()``."""

    def __init__(self, store: GroupOffsetStore, high_watermarks: HighWatermarks, is_controller: Callable[[], bool]):
        self._store = store
        self._high_watermarks = high_watermarks
        self._is_controller = is_controller

    def describe(self) -> list[GaugeMetricFamily]:
        return []  # collected at each scrape

    def collect(self) -> Iterator[GaugeMetricFamily]:
        if not self._is_controller():
            return
        try:
            committed = {group: self._store.committed_offsets(group) for group in self._store.groups()}
            ends = self._ends({tp for offsets in committed.values() for tp in offsets})
        except (SparklogError, KazooException) as exc:  # ZooKeeper away: no lag (the broker's own figures stay)
            log.warning("no consumer group lag this scrape: %s", exc)
            return
        labels = ["consumergroup", "topic", "partition"]
        current = GaugeMetricFamily(
            "kafka_consumergroup_current_offset", "A group's committed offset (the next it reads)", labels=labels
        )
        lag = GaugeMetricFamily(
            "kafka_consumergroup_lag", "High watermark minus the group's committed offset, in records", labels=labels
        )
        lag_sum = GaugeMetricFamily(
            "kafka_consumergroup_lag_sum", "A group's lag summed over a topic's partitions", labels=labels[:2]
        )
        end = GaugeMetricFamily(
            "kafka_topic_partition_current_offset",
            "A partition's high watermark (of partitions some group has committed offsets for)",
            labels=labels[1:],
        )
        for tp, offset in sorted(ends.items()):
            end.add_metric([tp[0], str(tp[1])], offset)
        for group, offsets in sorted(committed.items()):
            sums: dict[str, int] = {}
            for (topic, p), offset in sorted(offsets.items()):
                current.add_metric([group, topic, str(p)], offset)
                high = ends.get((topic, p))
                if high is None:
                    continue  # its leader did not answer: unknown, not 0
                behind = max(0, high - offset)
                lag.add_metric([group, topic, str(p)], behind)
                sums[topic] = sums.get(topic, 0) + behind
            for topic, behind in sums.items():
                lag_sum.add_metric([group, topic], behind)
        yield current
        yield lag
        yield lag_sum
        yield end

    def _ends(self, partitions: set[TopicPartition]) -> dict[TopicPartition, int]:
        """High watermarks of ``partitions``, asked of each leader once."""
        by_leader: dict[int, list[TopicPartition]] = {}
        topics: dict[str, list[int]] = {}
        for topic, p in partitions:
            topics.setdefault(topic, []).append(p)
        for topic, numbers in topics.items():
            for p, (state, _version) in self._store.partition_states(topic, numbers).items():
                if state.leader >= 0:
                    by_leader.setdefault(state.leader, []).append((topic, p))
        out: dict[TopicPartition, int] = {}
        for leader, tps in by_leader.items():
            try:
                out.update(self._high_watermarks(leader, tps))
            except SparklogError as exc:  # that leader is away or moving: its partitions are left out
                log.info("no high watermarks from broker %s this scrape: %s", leader, exc)
        return out
