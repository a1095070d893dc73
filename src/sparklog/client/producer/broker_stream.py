"""An open multi-partition produce stream to one broker, driven by its own thread.

Flight cannot cancel a ``do_put`` from the client side, and a write or an ack read on a frozen
broker blocks until that broker answers. So the stream's calls run on its thread and the sender
never waits on them: it hands a request over, and the outcome comes back through the sender's
queue. A stream whose request timed out is abandoned (its thread closes it whenever the broker
answers or the connection dies, and its late outcome is dropped).
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.flight as flight

from sparklog import wire
from sparklog.client.producer.produce_batch import ProduceBatch
from sparklog.coordination.cluster import BrokerInfo
from sparklog.errors import BrokerNotAvailable
from sparklog.records import wire_schema

# a request's answer: per batch (base offset, last offset) or (error code, message); or the
# whole request's error (the stream broke)
BatchResult = dict[str, Any]
Outcome = list[BatchResult] | BaseException


class ProduceRequest:
    """Batches sent together to one broker, and when the sender stops waiting for their answer."""

    __slots__ = ("batches", "deadline", "sent_at", "stream")

    def __init__(self, stream: Any, batches: list[ProduceBatch], deadline: float) -> None:
        self.stream = stream
        self.batches = batches
        self.deadline = deadline
        self.sent_at = time.monotonic()


class BrokerProduceStream:
    """One ``produce_many`` stream to a broker for values of one Arrow type (a Flight stream has one
    schema; every plain topic shares it). ``completed(request, outcome)`` is called on the stream's
    thread when a request has its answer."""

    def __init__(
        self,
        client: flight.FlightClient,
        broker: BrokerInfo,
        value_type: pa.DataType,
        acks: str,
        completed: Callable[[ProduceRequest, Outcome], None],
    ) -> None:
        self.broker = broker
        self.acks = acks
        self.busy: ProduceRequest | None = None  # the request in flight (the sender's bookkeeping)
        self._client = client
        self._schema = wire_schema(value_type)
        self._descriptor = flight.FlightDescriptor.for_command(wire.encode({"type": wire.PRODUCE_MANY, "acks": acks}))
        self._completed = completed
        self._writer: Any = None
        self._reader: Any = None
        self._requests: queue.SimpleQueue[ProduceRequest | None] = queue.SimpleQueue()
        name = f"sparklog-produce-{broker.broker_id}"
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, request: ProduceRequest) -> None:
        self.busy = request
        self._requests.put(request)

    def _run(self) -> None:
        while (request := self._requests.get()) is not None:
            try:
                outcome: Outcome = self._send_now(request.batches)
            except flight.FlightError as exc:
                outcome = wire.from_flight_error(exc, f"{self.broker.broker_id}")
            except BaseException as exc:  # handed to the sender
                outcome = exc
            self._completed(request, outcome)
        self._close_now()

    def _send_now(self, batches: Sequence[ProduceBatch]) -> list[BatchResult]:
        if self._writer is None:
            self._writer, self._reader = self._client.do_put(self._descriptor, self._schema)
        last = len(batches) - 1
        for i, batch in enumerate(batches):
            meta: dict[str, Any] = {"t": batch.topic, "p": batch.partition, "pid": batch.producer_id}
            meta["seq"] = batch.sequence
            if batch.value_schema is not None:
                meta["sv"] = batch.value_schema.version
            if i == last:
                meta["end"] = True
            self._writer.write_with_metadata(batch.batch, pa.py_buffer(wire.encode(meta)))
        if self.acks == "0":
            return [{"b": -1, "l": -1}] * len(batches)
        ack = self._reader.read()
        if ack is None:  # the broker ended the stream: its error comes with closing our side
            try:
                self._writer.close()
            except flight.FlightError as exc:
                raise wire.from_flight_error(exc, f"broker {self.broker.broker_id}") from None
            raise BrokerNotAvailable(f"broker {self.broker.broker_id} closed the produce stream without an ack")
        results = wire.decode(ack).get("r")
        if not isinstance(results, list) or len(results) != len(batches):
            raise BrokerNotAvailable(f"broker {self.broker.broker_id} answered a produce request it was not sent")
        return results

    def _close_now(self) -> None:
        if self._writer is None:
            return
        try:
            self._writer.done_writing()
            self._writer.close()
        except (flight.FlightError, pa.ArrowException, OSError):
            pass

    def close(self) -> None:
        """End the stream once its current request is answered (``join`` waits for that)."""
        self._requests.put(None)

    def join(self, wait_s: float) -> None:
        if wait_s > 0:
            self._thread.join(wait_s)
