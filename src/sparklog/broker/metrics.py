"""A broker's metrics, served over HTTP for Prometheus (``--metrics-port``).

One :class:`BrokerMetrics` per broker owns its own ``CollectorRegistry`` (never the process-wide
default: tests run several brokers in one process) and every metric object in it. Names follow
Kafka's as the Prometheus JMX exporter spells them (``kafka_server_brokertopicmetrics_...``), so
Kafka dashboards and alerts mostly apply.

Two kinds of figures, to keep the produce and fetch paths cheap (they are columnar; nothing here is
counted per record):

- **counters** updated once per request or per batch, with the batch's row count and byte size
  (:meth:`BrokerMetrics.produced`, :meth:`BrokerMetrics.fetched`, :meth:`BrokerMetrics.request`,
  :meth:`BrokerMetrics.isr_changed`);
- **state read at scrape time** by :class:`_StateCollector` from :class:`MetricsSource` (partition
  and leader counts, ISR health, log sizes, controller and ZooKeeper state): nothing to update, and
  always current.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Protocol

from prometheus_client import CollectorRegistry, Counter, Histogram, ProcessCollector
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import start_http_server
from prometheus_client.registry import Collector

from sparklog.broker.log.segment import LogSegment
from sparklog.broker.partition import Partition
from sparklog.errors import PortInUse

# request latency buckets, in milliseconds (Kafka's TotalTimeMs is in ms)
LATENCY_BUCKETS_MS = (0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000)


class MetricsSource(Protocol):
    """What the scrape-time collector reads of its broker: the replicas held here, whether this
    broker is the active controller (and how many partitions it found offline), and its ZooKeeper
    connection state."""

    @property
    def partitions(self) -> Mapping[tuple[str, int], Partition]: ...

    def controller_state(self) -> tuple[bool, int]: ...

    def zookeeper_state(self) -> str: ...

    def zookeeper_round_trip_s(self) -> float | None:
        """One ZooKeeper request's round trip, made now (None: no answer in time)."""


class BrokerMetrics:
    """The registry and metric objects of one broker, and its HTTP endpoint once :meth:`serve`d."""

    def __init__(self, broker_id: int, source: MetricsSource) -> None:
        self.broker_id = broker_id
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self._messages_in = Counter(
            "kafka_server_brokertopicmetrics_messagesin",
            "Records appended to partitions this broker leads (produced, any protocol), by topic",
            ["topic"],
            registry=r,
        )
        self._bytes_in = Counter(
            "kafka_server_brokertopicmetrics_bytesin",
            "Bytes (Arrow buffers) of the batches appended as leader, by topic",
            ["topic"],
            registry=r,
        )
        self._bytes_out = Counter(
            "kafka_server_brokertopicmetrics_bytesout",
            "Bytes (Arrow buffers) of batches sent to consumers (Kafka protocol: as read), not to followers, by topic",
            ["topic"],
            registry=r,
        )
        self._messages_out = Counter(
            "kafka_server_brokertopicmetrics_messagesout",
            "Records sent to consumers (Kafka protocol: as read for the response), not to followers, by topic",
            ["topic"],
            registry=r,
        )
        self._requests = Counter(
            "kafka_network_requestmetrics_requests",
            "Requests served, by listener (flight or kafka), request name and (Kafka protocol) API version",
            ["listener", "request", "version"],
            registry=r,
        )
        self._total_time = Histogram(
            "kafka_network_requestmetrics_totaltimems",
            "Request time in MILLISECONDS, by listener and request: a Kafka-protocol request from its frame "
            "read to its response made, and its connection's quota mute after it; a Flight fetch until its "
            "response stream is ready (the first batches read); a Flight action in full; a produce request "
            "(each of a Flight produce stream's) from its first batch read to its answer made",
            ["listener", "request"],
            buckets=LATENCY_BUCKETS_MS,
            registry=r,
        )
        parts = (
            ("localtimems", "appending its batches here (decoding, checks, the log append)"),
            ("remotetimems", "waiting for the followers (acks=all: until the high watermark covers its batches)"),
            ("throttletimems", "held back because its principal was over a produce quota"),
        )
        self._produce_parts = [
            Histogram(
                f"kafka_network_requestmetrics_{name}",
                f"Produce request time in MILLISECONDS spent {what}, by listener and request",
                ["listener", "request"],
                buckets=LATENCY_BUCKETS_MS,
                registry=r,
            )
            for name, what in parts
        ]
        self._throttled = Counter(
            "sparklog_quota_throttle_seconds",
            "Seconds calls were held (Flight) or connections muted (Kafka protocol) because their principal was "
            "over a client quota, by listener and user",
            ["listener", "user"],
            registry=r,
        )
        self._flush_time = Histogram(
            "kafka_log_logflushstats_logflushrateandtimems",
            "Log flushes (fsync of a partition's unsynced segments, flush.ms / flush.messages) and their time "
            "in MILLISECONDS",
            buckets=LATENCY_BUCKETS_MS,
            registry=r,
        )
        self._isr_shrinks = Counter(
            "kafka_server_replicamanager_isrshrinks",
            "Replicas dropped from the ISR of a partition led here (by this leader: lagging; by the controller: "
            "broker gone)",
            registry=r,
        )
        self._isr_expands = Counter(
            "kafka_server_replicamanager_isrexpands",
            "Replicas taken (back) into the ISR of a partition led here",
            registry=r,
        )
        ProcessCollector(registry=r)  # process_open_fds, memory, CPU (Linux)
        r.register(_StateCollector(source))
        self._server = None
        self._thread: threading.Thread | None = None
        self.port: int | None = None

    # ----------------------------------------------------------------- per request or batch
    def produced(self, topic: str, records: int, size: int) -> None:
        """One batch appended as leader: ``records`` rows of ``size`` bytes."""
        self._messages_in.labels(topic).inc(records)
        self._bytes_in.labels(topic).inc(size)

    def fetched(self, topic: str, records: int, size: int) -> None:
        """One batch sent to a consumer."""
        self._messages_out.labels(topic).inc(records)
        self._bytes_out.labels(topic).inc(size)

    def request(self, listener: str, name: str, version: str = "", elapsed_s: float | None = None) -> None:
        """One request served; ``elapsed_s``: how long it took (None: not timed)."""
        self._requests.labels(listener, name, version).inc()
        if elapsed_s is not None:
            self._total_time.labels(listener, name).observe(elapsed_s * 1000)

    def produce_request(
        self, listener: str, local_s: float, remote_s: float, throttle_s: float, total_s: float, version: int = -1
    ) -> None:
        """One produce request answered (of a Flight produce stream, or a Kafka Produce of API
        ``version``): counted, its total time and Kafka's breakdown of it (local append, waiting
        for replicas, quota)."""
        self._requests.labels(listener, "Produce", str(version) if version >= 0 else "").inc()
        self._total_time.labels(listener, "Produce").observe(total_s * 1000)
        for histogram, seconds in zip(self._produce_parts, (local_s, remote_s, throttle_s), strict=True):
            histogram.labels(listener, "Produce").observe(seconds * 1000)

    def throttled(self, listener: str, user: str, seconds: float) -> None:
        """A call held, or a connection muted, ``seconds`` for ``user``'s quota (a principal
        ``User:name`` is labelled by its name, as Kafka's quota metrics are)."""
        self._throttled.labels(listener, user.removeprefix("User:")).inc(seconds)

    def log_flushed(self, seconds: float) -> None:
        self._flush_time.observe(seconds * 1000)

    def isr_changed(self, shrinks: int, expands: int) -> None:
        """An ISR written to ZooKeeper by this broker lost ``shrinks`` and gained ``expands`` replicas."""
        if shrinks:
            self._isr_shrinks.inc(shrinks)
        if expands:
            self._isr_expands.inc(expands)

    # ----------------------------------------------------------------- the endpoint
    def serve(self, host: str, port: int) -> int:
        """Serve ``/metrics`` on ``host``:``port`` (0: any free port) from a daemon thread; the port."""
        try:
            self._server, self._thread = start_http_server(port, host, registry=self.registry)
        except OSError as exc:
            raise PortInUse(f"cannot serve metrics on {host}:{port} ({exc.strerror or exc})") from None
        self.port = int(self._server.server_port)
        return self.port

    def url(self, host: str) -> str | None:
        """Where Prometheus scrapes this broker (None: no endpoint)."""
        return None if self.port is None else f"http://{host}:{self.port}/metrics"

    def close(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()


def _segment_size(segment: LogSegment) -> int:
    """A segment's bytes without loading it: a lazily opened segment nobody used yet (after a
    restart, most of them) is measured on disk, so a scrape never opens a log's old segments."""
    if segment.loaded:
        return int(segment.size)
    try:
        return segment.path.stat().st_size
    except OSError:  # deleted meanwhile (retention)
        return 0


def _thread_count() -> int:
    """The process's threads, native ones included (Linux), else Python's."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Threads:"):
                return int(line.split()[1])
    except OSError:
        pass
    return threading.active_count()


class _StateCollector(Collector):
    """Figures read from the broker's state at each scrape (nothing on the hot path)."""

    def __init__(self, source: MetricsSource) -> None:
        self._source = source

    def describe(self) -> list[GaugeMetricFamily]:
        return []  # no fixed description: collected at each scrape

    def collect(self) -> Iterator[GaugeMetricFamily]:
        started = time.monotonic()
        held = list(self._source.partitions.values())
        leaders = under = under_min = 0
        size = GaugeMetricFamily(
            "kafka_log_log_size", "Bytes in a partition replica's log on this broker", labels=["topic", "partition"]
        )
        segments = GaugeMetricFamily(
            "kafka_log_log_numlogsegments", "Segments of a partition replica's log", labels=["topic", "partition"]
        )
        for partition in held:
            labels = [partition.topic, str(partition.partition)]
            plog = partition.log
            if not plog.closed:
                held_segments = list(plog.segments)
                size.add_metric(labels, sum(_segment_size(s) for s in held_segments))
                segments.add_metric(labels, len(held_segments))
            state = partition.state
            if state is None or state.leader != partition.broker_id:
                continue
            leaders += 1
            if len(state.isr) < len(partition.replicas):
                under += 1
            if len(state.isr) < plog.config.min_insync_replicas:
                under_min += 1
        yield size
        yield segments
        prefix = "kafka_server_replicamanager_"
        yield GaugeMetricFamily(f"{prefix}partitioncount", "Partition replicas held here", value=len(held))
        yield GaugeMetricFamily(f"{prefix}leadercount", "Partitions led here", value=leaders)
        yield GaugeMetricFamily(
            f"{prefix}underreplicatedpartitions",
            "Partitions led here whose ISR is smaller than their replica list",
            value=under,
        )
        yield GaugeMetricFamily(
            f"{prefix}underminisrpartitioncount",
            "Partitions led here with fewer in-sync replicas than min.insync.replicas (acks=all refused)",
            value=under_min,
        )
        active, offline = self._source.controller_state()
        yield GaugeMetricFamily(
            "kafka_controller_kafkacontroller_activecontrollercount",
            "1 if this broker is the cluster's active controller, else 0 (summed over brokers: 1)",
            value=int(active),
        )
        yield GaugeMetricFamily(
            "kafka_controller_kafkacontroller_offlinepartitionscount",
            "Partitions without a leader, as the controller last found them (0 on other brokers)",
            value=offline if active else 0,
        )
        zk = GaugeMetricFamily(
            "kafka_server_sessionexpirelistener_sessionstate",
            "The broker's ZooKeeper session: 1 on its current state (CONNECTED, SUSPENDED or LOST)",
            labels=["state"],
        )
        current = self._source.zookeeper_state()
        for name in ("CONNECTED", "SUSPENDED", "LOST"):
            zk.add_metric([name], int(name == current))
        yield zk
        round_trip = self._source.zookeeper_round_trip_s()
        if round_trip is not None:
            yield GaugeMetricFamily(
                "sparklog_zookeeper_round_trip_ms",
                "The round trip of one ZooKeeper read the broker made at this scrape, in milliseconds",
                round_trip * 1000,
            )
        yield GaugeMetricFamily("process_threads", "Threads of the broker process (native ones too)", _thread_count())
        yield GaugeMetricFamily(
            "sparklog_metrics_collect_seconds",
            "Time this scrape took to read the broker's state",
            time.monotonic() - started,
        )
