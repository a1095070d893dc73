"""Cluster access shared by the data source's driver-side and executor-side code.

Spark runs the data source in several Python processes (driver-side planners, executor workers that
Spark reuses between tasks); none of them can receive a connection from another, so each process keeps
its own :class:`ClusterClient` and Flight clients here, keyed by connect string / location, created on
first use and dropped if the process was forked after creating them.
"""

from __future__ import annotations

import concurrent.futures
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

import pyarrow as pa
import pyarrow.flight as flight

from sparklog import wire
from sparklog.client.cluster_client import ClusterClient
from sparklog.coordination.cluster import BrokerInfo
from sparklog.errors import BrokerNotAvailable, NotLeader, SparklogError
from sparklog.records import wire_schema

log = logging.getLogger("sparklog.datasource")

T = TypeVar("T")
_lock = threading.Lock()
_clients: dict[str, ClusterClient] = {}
_flights: dict[str, flight.FlightClient] = {}
_pid = os.getpid()


def _check_fork() -> None:
    global _pid
    if os.getpid() != _pid:  # a forked child must not use its parent's sockets or ZooKeeper session
        _clients.clear()
        _flights.clear()
        _pid = os.getpid()


def cluster_client(zookeeper: str) -> ClusterClient:
    """This process's ClusterClient for ``zookeeper`` (one ZooKeeper session per process)."""
    with _lock:
        _check_fork()
        client = _clients.get(zookeeper)
        if client is None:
            client = _clients[zookeeper] = ClusterClient(zookeeper, retries=20, retry_backoff_s=0.1)
        return client


def close_cluster_client(zookeeper: str) -> None:
    with _lock:
        client = _clients.pop(zookeeper, None)
    if client is not None:
        client.close()


def flight_client(location: str) -> flight.FlightClient:
    with _lock:
        _check_fork()
        client = _flights.get(location)
        if client is None:
            client = _flights[location] = flight.FlightClient(location)
        return client


def forget_flight(location: str) -> None:
    with _lock:
        client = _flights.pop(location, None)
    if client is not None:
        client.close()


def typed(exc: BaseException, where: str) -> SparklogError:
    if isinstance(exc, SparklogError):
        return exc
    if isinstance(exc, flight.FlightError):
        return wire.from_flight_error(exc, where)
    if isinstance(exc, OSError | pa.ArrowException):
        return BrokerNotAvailable(f"{where}: {exc}")
    raise exc


def parallel(fn: Callable[[Any], T], items: Iterable[Any], threads: int = 16) -> list[T]:
    """``[fn(x) for x in items]`` with up to ``threads`` calls in flight (Flight calls release the GIL)."""
    items = list(items)
    if len(items) <= 1:
        return [fn(x) for x in items]
    with concurrent.futures.ThreadPoolExecutor(max_workers=min(threads, len(items))) as pool:
        return list(pool.map(fn, items))


def list_offsets(
    client: ClusterClient, partitions: Iterable[tuple[str, int]], timestamp: int | None = None
) -> dict[tuple[str, int], dict[str, Any]]:
    """``list_offsets`` of many partitions at once: {(topic, partition): {log_start_offset, high_watermark, ...}}."""
    tps = list(partitions)
    results = parallel(lambda tp: client.list_offsets(tp[0], tp[1], timestamp=timestamp), tps)
    return dict(zip(tps, results, strict=True))


def leader_location(client: ClusterClient, topic: str, partition: int) -> str | None:
    try:
        return client.leader(topic, partition).location
    except SparklogError:
        return None


# ----------------------------------------------------------------------------------------- fetching
def fetch(
    zookeeper: str,
    topic: str,
    partition: int,
    offset: int,
    max_bytes: int,
    leader_hint: str | None = None,
) -> Iterator[pa.RecordBatch]:
    """Stored record batches of a partition from the batch holding ``offset`` on (about ``max_bytes``
    of them; the first may start before ``offset``), from its leader: first the ``leader_hint``
    location (no ZooKeeper needed), then whatever ZooKeeper says, following NotLeader and unreachable
    brokers like :meth:`ClusterClient.call_leader`. Errors before the first batch are retried here;
    a stream that breaks later raises (the caller resumes from the offset it reached)."""
    ticket = flight.Ticket(
        wire.encode({"topic": topic, "partition": partition, "offset": offset, "max_bytes": max_bytes, "max_wait_ms": 0})
    )

    def open_stream(client: flight.FlightClient) -> tuple[flight.FlightStreamReader, pa.RecordBatch | None]:
        reader = client.do_get(ticket)
        try:
            first = reader.read_chunk().data
        except StopIteration:
            first = None
        return reader, first

    opened = None
    if leader_hint is not None:
        try:
            opened = open_stream(flight_client(leader_hint))
        except (flight.FlightError, OSError, pa.ArrowException) as exc:
            error = typed(exc, f"broker {leader_hint}")
            if not error.retriable:
                raise error from None
            if isinstance(error, BrokerNotAvailable):
                forget_flight(leader_hint)
    if opened is None:
        client = cluster_client(zookeeper)
        opened = client.call_leader(topic, partition, lambda c, _b: open_stream(c))
    reader, first = opened
    if first is None:
        return
    yield first
    while True:
        try:
            chunk = reader.read_chunk()
        except StopIteration:
            return
        if chunk.data is not None:
            yield chunk.data


# ----------------------------------------------------------------------------------------- producing
class PutStream:
    """An open ``do_put`` stream to one partition's leader, acknowledged batch by batch: each
    ``send`` is one stored batch; returns its (base, last) offsets."""

    def __init__(self, client: ClusterClient, topic: str, partition: int, acks: str = "all") -> None:
        self.client = client
        self.topic = topic
        self.partition = partition
        self.acks = acks
        self._writer: flight.FlightStreamWriter | None = None
        self._reader: flight.FlightMetadataReader | None = None
        self._broker: BrokerInfo | None = None

    def _open(self, refresh: bool) -> None:
        broker = self.client.leader(self.topic, self.partition, refresh=refresh)
        command = {"type": wire.PRODUCE, "topic": self.topic, "partition": self.partition, "acks": self.acks}
        descriptor = flight.FlightDescriptor.for_command(wire.encode(command))
        self._writer, self._reader = self.client.flight(broker).do_put(descriptor, wire_schema())
        self._broker = broker

    def send_once(self, batch: pa.RecordBatch, refresh: bool = False) -> tuple[int, int]:
        """One attempt; any failure raises a typed error and leaves the stream closed (whether the
        batch was stored is then unknown unless the error says NotLeader)."""
        try:
            if self._writer is None:
                self._open(refresh)
            assert self._writer is not None and self._reader is not None
            self._writer.write_batch(batch)
            ack = self._reader.read()
            if ack is None:
                raise BrokerNotAvailable("the broker closed the produce stream without an acknowledgement")
            result = wire.decode(ack)
            return int(result["base_offset"]), int(result["last_offset"])
        except BaseException as exc:
            broker = self._broker
            self.close()
            error = typed(exc, f"broker {broker.broker_id if broker else '?'} ({self.topic}-{self.partition})")
            if isinstance(error, BrokerNotAvailable) and broker is not None:
                self.client.forget(broker)
            raise error from None

    def send(self, batch: pa.RecordBatch, retries: int = 20, backoff_s: float = 0.1) -> tuple[int, int]:
        """Send, retrying retriable failures (a retry may store the batch twice: only for data whose
        duplicates do not matter, such as staged rows referenced by exact offsets)."""
        for attempt in range(retries + 1):
            try:
                return self.send_once(batch, refresh=attempt > 0)
            except SparklogError as exc:
                if not exc.retriable or attempt == retries:
                    raise
                time.sleep(backoff_s if attempt else 0)
        raise NotLeader(f"no leader for {self.topic}-{self.partition}")

    def close(self) -> None:
        writer, self._writer, self._reader = self._writer, None, None
        if writer is not None:
            try:
                writer.done_writing()
                writer.close()
            except (flight.FlightError, pa.ArrowException, OSError):
                pass
