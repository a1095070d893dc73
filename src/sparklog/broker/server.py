"""The broker's Arrow Flight service: produce (``do_put``), fetch (``do_get``), and actions.

The contract is in :mod:`sparklog.wire`. Every error leaves as a typed Flight error; garbage on the
port is gRPC's to refuse; nothing a request does can corrupt a stored log (the log validates input
before it touches a file).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.flight as flight

from sparklog import wire
from sparklog.errors import InvalidRecord, InvalidRequest, NotLeader, SparklogError

if TYPE_CHECKING:
    from sparklog.broker.broker import Broker

log = logging.getLogger(__name__)

MAX_FETCH_BYTES = 64 << 20
MAX_WAIT_MS = 30_000


class PartitionWaiters:
    """Long-poll support: fetchers wait on a partition until an append notifies them."""

    def __init__(self) -> None:
        self._conditions: dict[tuple[str, int], threading.Condition] = {}
        self._lock = threading.Lock()

    def condition(self, topic: str, partition: int) -> threading.Condition:
        key = (topic, partition)
        cond = self._conditions.get(key)
        if cond is None:
            with self._lock:
                cond = self._conditions.setdefault(key, threading.Condition())
        return cond

    def notify(self, topic: str, partition: int) -> None:
        cond = self.condition(topic, partition)
        with cond:
            cond.notify_all()

    def notify_all(self) -> None:
        """Wake every waiting fetch (the broker is stopping)."""
        for cond in list(self._conditions.values()):
            with cond:
                cond.notify_all()

    def wait_until(self, topic: str, partition: int, ready: Callable[[], bool], timeout_s: float) -> bool:
        cond = self.condition(topic, partition)
        with cond:
            return cond.wait_for(ready, timeout=timeout_s)


def _int(request: dict[str, Any], name: str, default: int | None = None) -> int:
    value = request.get(name, default)
    if value is None:
        raise InvalidRequest(f"request is missing '{name}'")
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidRequest(f"'{name}' must be an integer, got {value!r}")
    return value


def _str(request: dict[str, Any], name: str) -> str:
    value = request.get(name)
    if not isinstance(value, str) or not value:
        raise InvalidRequest(f"request needs a non-empty string '{name}'")
    return value


def _parse(data: bytes | Any) -> dict[str, Any]:
    try:
        request = wire.decode(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidRequest(f"request is not valid JSON: {exc}") from None
    if not isinstance(request, dict):
        raise InvalidRequest("request must be a JSON object")
    return request


class BrokerServer(flight.FlightServerBase):
    """Serves one broker's partitions over Arrow Flight."""

    def __init__(self, broker: Broker, location: str) -> None:
        super().__init__(location)
        self.broker = broker
        self.waiters = PartitionWaiters()
        self.stopping = False

    def begin_shutdown(self) -> None:
        """Refuse new work and end long polls now (``shutdown()`` waits for running calls)."""
        self.stopping = True
        self.waiters.notify_all()

    # ----------------------------------------------------------------- produce
    def do_put(
        self,
        context: flight.ServerCallContext,
        descriptor: flight.FlightDescriptor,
        reader: flight.MetadataRecordBatchReader,
        writer: flight.FlightMetadataWriter,
    ) -> None:
        try:
            request = _parse(descriptor.command)
            if request.get("type") != wire.PRODUCE:
                raise InvalidRequest(f"unknown put type {request.get('type')!r}")
            topic, partition = _str(request, "topic"), _int(request, "partition")
            acks = str(request.get("acks", "1"))
            if acks not in ("0", "1", "all", "-1"):
                raise InvalidRequest(f"acks must be 0, 1 or all, got {acks!r}")
            producer_id = _int(request, "producer_id", -1)
            sequence = _int(request, "first_sequence", -1)
            plog = self.broker.leader_log(topic, partition)
            while True:
                try:
                    chunk = reader.read_chunk()
                except StopIteration:
                    break
                except pa.ArrowInvalid as exc:
                    raise InvalidRecord(f"unreadable record batch: {exc}") from None
                if chunk.data is None:
                    continue
                if self.stopping:
                    raise NotLeader(f"broker {self.broker.broker_id} is shutting down")
                info = plog.append(chunk.data, producer_id=producer_id, producer_seq=sequence)
                if sequence >= 0:
                    sequence += chunk.data.num_rows
                self.waiters.notify(topic, partition)
                if acks != "0":
                    result = {"base_offset": info.base_offset, "last_offset": info.last_offset, "count": info.count}
                    writer.write(pa.py_buffer(wire.encode(result)))
        except SparklogError as exc:
            raise wire.to_flight_error(exc) from None

    # ----------------------------------------------------------------- fetch
    def do_get(self, context: flight.ServerCallContext, ticket: flight.Ticket) -> flight.FlightDataStream:
        try:
            request = _parse(ticket.ticket)
            topic, partition = _str(request, "topic"), _int(request, "partition")
            offset = _int(request, "offset")
            max_bytes = min(max(_int(request, "max_bytes", 8 << 20), 1), MAX_FETCH_BYTES)
            max_wait_ms = min(max(_int(request, "max_wait_ms", 0), 0), MAX_WAIT_MS)
            plog = self.broker.leader_log(topic, partition)
            batches = plog.read(offset, max_bytes)
            if not batches and max_wait_ms > 0:
                self.waiters.wait_until(
                    topic,
                    partition,
                    lambda: self.stopping or plog.closed or plog.log_end_offset > offset,
                    max_wait_ms / 1000,
                )
                batches = plog.read(offset, max_bytes)
            return flight.RecordBatchStream(pa.Table.from_batches(batches, schema=plog.schema))
        except SparklogError as exc:
            raise wire.to_flight_error(exc) from None

    # ----------------------------------------------------------------- actions
    def do_action(self, context: flight.ServerCallContext, action: flight.Action) -> Iterator[bytes]:
        try:
            request = _parse(action.body.to_pybytes()) if action.body.size else {}
            if action.type == wire.PING:
                result: dict[str, Any] = {"broker_id": self.broker.broker_id}
            elif action.type == wire.LIST_OFFSETS:
                result = self._list_offsets(request)
            else:
                raise InvalidRequest(f"unknown action {action.type!r}")
        except SparklogError as exc:
            raise wire.to_flight_error(exc) from None
        return iter([wire.encode(result)])

    def list_actions(self, context: flight.ServerCallContext) -> list[tuple[str, str]]:
        return [(wire.PING, "broker id"), (wire.LIST_OFFSETS, "log start/end offsets, offset for a time")]

    def _list_offsets(self, request: dict[str, Any]) -> dict[str, Any]:
        topic, partition = _str(request, "topic"), _int(request, "partition")
        plog = self.broker.leader_log(topic, partition)
        result: dict[str, Any] = {
            "log_start_offset": plog.log_start_offset,
            "log_end_offset": plog.log_end_offset,
            "high_watermark": plog.log_end_offset,
        }
        if "timestamp" in request:
            result["offset_for_time"] = plog.offset_for_time(_int(request, "timestamp"))
        return result
