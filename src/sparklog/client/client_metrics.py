"""A producer's and a consumer's own figures: what they sent, received, retried and how long
requests took, by Kafka clients' metric names (``record-send-total``, ``request-latency-avg``,
``records-consumed-total``, ``records-lag-max``...), from ``metrics()``, and for Prometheus when
the client is given a registry (``kafka_producer_producer_metrics_...``,
``kafka_consumer_consumer_fetch_manager_metrics_...``, as the JMX exporter names Kafka clients').

Counted once per request or batch on the client's own thread, never per record: a producer's
sender thread updates :class:`ProducerMetrics`, a consumer's ``poll`` updates
:class:`ConsumerMetrics`. Plain attributes, no lock: one thread writes, a reader from another
thread may see one request's figures half-counted, never torn numbers.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping
from typing import Protocol

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

_client_numbers = itertools.count(1)


def default_client_id(kind: str) -> str:
    """``producer-1``, ``consumer-2``, ...: a name per client object of this process, as Kafka's."""
    return f"{kind}-{next(_client_numbers)}"


class ProducerMetrics:
    """Updated by a producer's sender thread."""

    __slots__ = (
        "records_sent",
        "records_failed",
        "records_retried",
        "bytes_sent",
        "batches",
        "batch_bytes_max",
        "requests",
        "answers",
        "latency_s_total",
        "latency_s_max",
    )

    def __init__(self) -> None:
        self.records_sent = 0  # acknowledged
        self.records_failed = 0
        self.records_retried = 0
        self.bytes_sent = 0
        self.batches = 0
        self.batch_bytes_max = 0
        self.requests = 0
        self.answers = 0  # requests answered (acknowledged or refused by the broker)
        self.latency_s_total = 0.0
        self.latency_s_max = 0.0

    def request_sent(self, batch_bytes: list[int]) -> None:
        """A request carrying batches of these sizes left."""
        self.requests += 1
        self.batches += len(batch_bytes)
        self.bytes_sent += sum(batch_bytes)
        self.batch_bytes_max = max(self.batch_bytes_max, *batch_bytes)

    def request_answered(self, latency_s: float) -> None:
        self.answers += 1
        self.latency_s_total += latency_s
        self.latency_s_max = max(self.latency_s_max, latency_s)

    def snapshot(self) -> dict[str, float]:
        """Kafka's producer metric names (sizes in bytes, latencies in ms) -> values."""
        return {
            "record-send-total": self.records_sent,
            "record-error-total": self.records_failed,
            "record-retry-total": self.records_retried,
            "request-total": self.requests,
            "outgoing-byte-total": self.bytes_sent,
            "batch-total": self.batches,
            "batch-size-avg": self.bytes_sent / self.batches if self.batches else 0.0,
            "batch-size-max": self.batch_bytes_max,
            "records-per-request-avg": (self.records_sent + self.records_failed) / self.requests
            if self.requests
            else 0.0,
            "request-latency-avg": 1000 * self.latency_s_total / self.answers if self.answers else 0.0,
            "request-latency-max": 1000 * self.latency_s_max,
        }


class ConsumerMetrics:
    """Updated by a consumer's ``poll``."""

    __slots__ = ("records", "bytes", "batches", "polls", "lags")

    def __init__(self) -> None:
        self.records = 0
        self.bytes = 0
        self.batches = 0
        self.polls = 0
        self.lags: dict[tuple[str, int], int] = {}  # partition -> high watermark - position, when last read

    def consumed(self, tp: tuple[str, int], rows: int, size: int, lag: int | None) -> None:
        """One batch handed to the application; ``lag``: its partition's records still to read."""
        self.records += rows
        self.bytes += size
        self.batches += 1
        if lag is not None:
            self.lags[tp] = max(0, lag)

    def forget(self, partitions: set[tuple[str, int]]) -> None:
        """Partitions no longer read here have no lag of ours."""
        for tp in [tp for tp in self.lags if tp not in partitions]:
            del self.lags[tp]

    def snapshot(self) -> dict[str, float]:
        """Kafka's consumer fetch-manager metric names -> values."""
        return {
            "records-consumed-total": self.records,
            "bytes-consumed-total": self.bytes,
            "fetch-total": self.batches,
            "poll-total": self.polls,
            "records-lag-max": max(self.lags.values(), default=0),
        }


class _Snapshot(Protocol):
    def snapshot(self) -> Mapping[str, float]: ...


class ClientCollector(Collector):
    """One client's figures for a Prometheus registry: ``*-total`` as counters, the rest as gauges,
    labelled with the client's id."""

    def __init__(self, prefix: str, client_id: str, metrics: _Snapshot) -> None:
        self._prefix = prefix
        self._client_id = client_id
        self._metrics = metrics

    def describe(self) -> list[GaugeMetricFamily]:
        return []

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        for name, value in self._metrics.snapshot().items():
            flat = f"{self._prefix}_{name.replace('-', '_')}"
            if name.endswith("-total"):
                family: CounterMetricFamily | GaugeMetricFamily = CounterMetricFamily(
                    flat.removesuffix("_total"), name, labels=["client_id"]
                )
            else:
                family = GaugeMetricFamily(flat, name, labels=["client_id"])
            family.add_metric([self._client_id], value)
            yield family


PRODUCER_PREFIX = "kafka_producer_producer_metrics"
CONSUMER_PREFIX = "kafka_consumer_consumer_fetch_manager_metrics"


def register(registry: CollectorRegistry | None, prefix: str, client_id: str, metrics: _Snapshot) -> Collector | None:
    """Put a client's figures into ``registry`` (None: nowhere); what to unregister at close."""
    if registry is None:
        return None
    collector = ClientCollector(prefix, client_id, metrics)
    registry.register(collector)
    return collector
