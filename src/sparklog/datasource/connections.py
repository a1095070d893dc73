"""Cluster access shared by the data source's driver-side and executor-side code.

Spark runs the data source in several Python processes (driver-side planners, executor workers that
Spark reuses between tasks); none of them can receive a connection from another, so each process keeps
its own :class:`ClusterClient` and Flight clients here, keyed by cluster address / location, created
on first use and dropped if the process was forked after creating them. With ``bootstrap.servers``
the clients talk to brokers only: no process of the job opens a ZooKeeper session.
"""

from __future__ import annotations

import collections
import concurrent.futures
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, TypeVar

import pyarrow as pa
import pyarrow.flight as flight

from sparklog.client.cluster_address import ClusterAddress
from sparklog.client.cluster_client import ClusterClient, fetch_connection
from sparklog.client.flight_clients import FlightClients
from sparklog.coordination.cluster import BrokerInfo
from sparklog.errors import BrokerNotAvailable, SparklogError
from sparklog.protocol import fetch_columns, wire
from sparklog.protocol.record_frames import open_produce, write_frame
from sparklog.records import wire_schema

log = logging.getLogger("sparklog.datasource")

T = TypeVar("T")
_lock = threading.Lock()
_clients: dict[ClusterAddress, ClusterClient] = {}  # one per address and identity
_flights = FlightClients()  # by location and connection (ClusterClient.flight), for reads given their leader
_pid = os.getpid()
_RESTORER = fetch_columns.Restorer()  # fetched batches get back the columns a response left out


def _check_fork() -> None:
    global _pid, _flights
    if os.getpid() != _pid:  # a forked child must not use its parent's sockets or ZooKeeper session
        _clients.clear()
        _flights = FlightClients()
        _pid = os.getpid()


def _address(address: ClusterAddress | str) -> ClusterAddress:
    return ClusterAddress(address) if isinstance(address, str) else address  # a str: a ZooKeeper connect string


def cluster_client(address: ClusterAddress | str) -> ClusterClient:
    """This process's ClusterClient for ``address`` (at most one ZooKeeper session per process, none
    with bootstrap servers)."""
    address = _address(address)
    with _lock:
        _check_fork()
        client = _clients.get(address)
        if client is None:
            client = _clients[address] = ClusterClient.connect(address)
        return client


def close_cluster_client(address: ClusterAddress | str) -> None:
    with _lock:
        client = _clients.pop(_address(address), None)
    if client is not None:
        client.close()


def close_all() -> None:
    """Close this process's cached clients (a process that outlives the cluster should call this
    first: a ZooKeeper client whose server is gone keeps retrying, and blocks the process's exit)."""
    with _lock:
        clients = list(_clients.values())
        _clients.clear()
    for client in clients:
        client.close()
    _flights.close()


def flight_client(location: str, connection: int = 0) -> flight.FlightClient:
    with _lock:
        _check_fork()
        flights = _flights
    return flights.get(location, connection)


def forget_flight(location: str) -> None:
    _flights.forget(location)


def typed(exc: BaseException, where: str) -> SparklogError:
    if isinstance(exc, SparklogError):
        return exc
    if isinstance(exc, flight.FlightError):
        error = wire.from_flight_error(exc, where)
        if type(error) is SparklogError:  # a code this process has no class for: keep the code
            found = re.search(r"sparklog:([A-Z_]+):", str(exc))
            if found:
                error.code = found.group(1)
        return error
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


def leader_location(client: ClusterClient, topic: str, partition: int) -> str | None:
    try:
        return client.leader(topic, partition).location
    except SparklogError:
        return None


# ----------------------------------------------------------------------------------------- fetching
def fetch(
    address: ClusterAddress | str,
    topic: str,
    partition: int,
    offset: int,
    max_bytes: int,
    leader_hint: str | None = None,
    fields: Sequence[str] | None = None,
    deadline: float | None = None,
) -> Iterator[pa.RecordBatch]:
    """Stored record batches of a partition from the batch holding ``offset`` on (about ``max_bytes``
    of them; the first may start before ``offset``), from its leader: first the ``leader_hint``
    location (no metadata needed), then whatever the cluster's metadata says, following NotLeader and unreachable
    brokers like :meth:`ClusterClient.call_leader`. Errors before the first batch are retried here;
    a stream that breaks later raises (the caller resumes from the offset it reached). ``deadline``
    (``time.monotonic()``): when finding the leader stops being retried (default: the client's)."""
    request: dict[str, Any] = {
        "topic": topic,
        "partition": partition,
        "offset": offset,
        "max_bytes": max_bytes,
        "max_wait_ms": 0,
        "compact": True,  # columns with nothing in them travel empty (sparklog.protocol.fetch_columns)
    }
    if fields:
        request["fields"] = list(fields)  # typed topics: the broker sends only these value fields
    ticket = flight.Ticket(wire.encode(request))
    connection = fetch_connection(partition)
    restore = _RESTORER.restore

    def open_stream(client: flight.FlightClient) -> tuple[flight.FlightStreamReader, pa.RecordBatch | None]:
        reader = client.do_get(ticket)
        try:
            chunk = reader.read_chunk()
        except StopIteration:
            return reader, None
        return reader, restore(chunk.data, chunk.app_metadata)

    opened = None
    if leader_hint is not None:
        try:
            opened = open_stream(flight_client(leader_hint, connection))
        except (flight.FlightError, OSError, pa.ArrowException) as exc:
            error = typed(exc, f"broker {leader_hint}")
            if not error.retriable:
                raise error from None
            if isinstance(error, BrokerNotAvailable):
                forget_flight(leader_hint)
    if opened is None:
        client = cluster_client(address)
        opened = client.call_leader(
            topic, partition, lambda c, _b: open_stream(c), deadline=deadline, connection=connection
        )
    reader, first = opened
    if first is None:
        return
    yield first
    while True:
        try:
            chunk = reader.read_chunk()
        except StopIteration:
            return
        except (flight.FlightError, OSError, pa.ArrowException) as exc:
            raise typed(exc, f"the leader of {topic}-{partition}") from None
        if chunk.data is not None:
            yield restore(chunk.data, chunk.app_metadata)


# ----------------------------------------------------------------------------------------- producing
Ack = tuple[Any, int, int, int]  # (tag, base offset, last offset, rows); offsets -1 if stored earlier


class PutStream:
    """An open ``do_put`` stream to one partition's leader that keeps up to ``window`` batches in
    flight (acknowledgements are read behind the writes, so the round trip is not paid per batch).
    Each batch becomes one stored batch.

    With a ``producer_id`` every batch carries its first ``sequence``: the leader answers a batch
    it already stored with the original offsets instead of appending it again (the idempotent
    producer), so after any failure the unacknowledged batches are simply sent again with the same
    sequences; ``already_stored(error)`` recognises the leader's answer for a repeat older than the
    few batches it remembers (such a batch is acknowledged with offsets -1). Without a producer id a
    retry may store a batch twice: fine only for data whose duplicates do not matter (staged rows,
    which are referenced by the exact offsets acknowledged).

    A typed topic's stream carries values of ``value_type`` (the Arrow type of a schema version)
    and says it writes with ``schema_version``; the leader evolves older versions to its latest."""

    def __init__(
        self,
        client: ClusterClient,
        topic: str,
        partition: int,
        acks: str = "all",
        producer_id: int = -1,
        window: int = 8,
        timeout_s: float = 120.0,
        already_stored: Callable[[SparklogError], bool] | None = None,
        value_type: pa.DataType | None = None,
        schema_version: int | None = None,
    ) -> None:
        self.client = client
        self.value_type = pa.binary() if value_type is None else value_type
        self.schema_version = schema_version
        self.topic = topic
        self.partition = partition
        self.acks = acks
        self.producer_id = producer_id
        self.window = max(1, window)
        self.timeout_s = timeout_s
        self.already_stored = already_stored
        self._inflight: collections.deque[tuple[Any, pa.RecordBatch, int]] = collections.deque()
        self._writer: flight.FlightStreamWriter | None = None
        self._reader: flight.FlightMetadataReader | None = None
        self._broker: BrokerInfo | None = None

    @property
    def where(self) -> str:
        broker = self._broker
        return f"broker {broker.broker_id if broker else '?'} ({self.topic}-{self.partition})"

    # ------------------------------------------------------------------ raw stream
    def _open(self, refresh: bool) -> None:
        broker = self.client.leader(self.topic, self.partition, refresh=refresh)
        command = {
            "type": wire.PRODUCE,
            "topic": self.topic,
            "partition": self.partition,
            "acks": self.acks,
            "producer_id": self.producer_id,
        }
        if self.schema_version is not None:
            command["schema_version"] = self.schema_version
        self._writer, self._reader = open_produce(self.client.flight(broker), command, wire_schema(self.value_type))
        self._broker = broker

    def _write(self, batch: pa.RecordBatch, sequence: int, refresh: bool = False) -> None:
        if self._writer is None:
            self._open(refresh)
        assert self._writer is not None
        write_frame(self._writer, batch, {"sequence": sequence} if sequence >= 0 else None)

    def _read_ack(self) -> tuple[int, int]:
        assert self._reader is not None and self._writer is not None
        ack = self._reader.read()
        if ack is None:  # the broker ended the call: its error (if any) comes with closing it
            writer, self._writer = self._writer, None
            writer.done_writing()
            writer.close()
            raise BrokerNotAvailable("the broker closed the produce stream without an acknowledgement")
        result = wire.decode(ack)
        return int(result["base_offset"]), int(result["last_offset"])

    def _fail(self, exc: BaseException) -> SparklogError:
        """Close the stream; the failure as a typed error."""
        broker = self._broker
        self.close()
        error = typed(exc, self.where)
        if isinstance(error, BrokerNotAvailable) and broker is not None:
            self.client.forget(broker)
        return error

    # ------------------------------------------------------------------ sending
    def submit(self, batch: pa.RecordBatch, sequence: int = -1, tag: Any = None) -> list[Ack]:
        """Send a batch; returns the acknowledgements that arrived meanwhile (in sending order)."""
        self._inflight.append((tag, batch, sequence))
        done: list[Ack] = []
        try:
            self._write(batch, sequence)
            while len(self._inflight) >= self.window:
                base, last = self._read_ack()
                t, b, _ = self._inflight.popleft()
                done.append((t, base, last, b.num_rows))
        except Exception as exc:  # noqa: BLE001 - typed and classified in _recover
            done.extend(self._recover(self._fail(exc)))
        return done

    def flush(self) -> list[Ack]:
        """Wait for every batch in flight; their acknowledgements."""
        done: list[Ack] = []
        try:
            while self._inflight:
                base, last = self._read_ack()
                t, b, _ = self._inflight.popleft()
                done.append((t, base, last, b.num_rows))
        except Exception as exc:  # noqa: BLE001
            done.extend(self._recover(self._fail(exc)))
        return done

    def send(self, batch: pa.RecordBatch, sequence: int = -1) -> tuple[int, int]:
        """One batch, acknowledged."""
        done = self.submit(batch, sequence) + self.flush()
        return done[-1][1], done[-1][2]

    def _recover(self, error: SparklogError) -> list[Ack]:
        """After a failure: send every unacknowledged batch again, one at a time and in order, each
        retried (retriable errors, with backoff) until ``timeout_s``."""
        pending = list(self._inflight)
        self._inflight.clear()
        stored = self.already_stored
        if not error.retriable and not (stored is not None and stored(error)):
            raise error
        deadline = time.monotonic() + self.timeout_s
        done: list[Ack] = []
        for tag, batch, sequence in pending:
            backoff = 0.05
            while True:
                try:
                    self._write(batch, sequence, refresh=True)
                    base, last = self._read_ack()
                    done.append((tag, base, last, batch.num_rows))
                    break
                except Exception as exc:  # noqa: BLE001
                    error = self._fail(exc)
                if stored is not None and stored(error):
                    done.append((tag, -1, -1, batch.num_rows))
                    break
                if not error.retriable or time.monotonic() + backoff > deadline:
                    raise error
                log.info("sparklog: resending to %s-%s after: %s", self.topic, self.partition, error)
                time.sleep(backoff)
                backoff = min(backoff * 2, 1.0)
        return done

    def close(self) -> None:
        writer, self._writer, self._reader = self._writer, None, None
        if writer is not None:
            try:
                writer.done_writing()
                writer.close()
            except (flight.FlightError, pa.ArrowException, OSError):
                pass
