"""An open multi-partition produce stream to one broker, carrying up to the sender's
``max_in_flight`` requests at once (Kafka's ``max.in.flight.requests.per.connection``), driven by
two threads of its own: one writes requests, one reads answers.

Flight cannot cancel a ``do_put`` from the client side, and a write or an ack read on a frozen
broker blocks until that broker answers. So the stream's calls run on its threads and the sender
never waits on them: it hands a request over, and the outcome comes back through the sender's
queue. A stream whose request timed out is abandoned (its threads close it whenever the broker
answers or the connection dies, and its late outcomes are dropped).
"""

from __future__ import annotations

import collections
import contextlib
import queue
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.flight as flight

from sparklog.client.producer.produce_batch import ProduceBatch
from sparklog.coordination.cluster import BrokerInfo
from sparklog.errors import BrokerNotAvailable, SparklogError
from sparklog.protocol import wire
from sparklog.protocol.record_frames import open_produce, write_frame
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
    schema; every plain topic shares it), carrying several requests at once: its writer thread
    writes each request as it is submitted, its reader thread matches the broker's answers (in
    order) to them. ``completed(request, outcome)`` is called on one of those threads when a request
    has its answer; once the stream broke, every request on it (and any submitted later) completes
    with the error."""

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
        self.in_flight = 0  # requests submitted and not answered (the sender's bookkeeping)
        self._client = client
        self._schema = wire_schema(value_type)
        self._command = {"type": wire.PRODUCE_MANY, "acks": acks}
        self._completed = completed
        self._writer: Any = None
        self._reader: Any = None
        self._requests: queue.SimpleQueue[ProduceRequest | None] = queue.SimpleQueue()
        self._lock = threading.Lock()  # the requests awaiting answers, whether the stream broke
        self._call_lock = threading.Lock()  # writes and closing the call (two threads use it)
        self._awaiting: collections.deque[ProduceRequest] = collections.deque()  # written, not answered
        self._broken: BaseException | None = None
        self._answers_thread: threading.Thread | None = None
        name = f"sparklog-produce-{broker.broker_id}"
        self._thread = threading.Thread(target=self._run_writes, name=name, daemon=True)
        self._thread.start()

    def submit(self, request: ProduceRequest) -> None:
        self._requests.put(request)

    # ----------------------------------------------------------------- the writer thread
    def _run_writes(self) -> None:
        while (request := self._requests.get()) is not None:
            with self._lock:
                broken = self._broken
                if broken is None:
                    self._awaiting.append(request)
            if broken is not None:
                self._completed(request, broken)
                continue
            try:
                self._write(request.batches)
            except flight.FlightError as exc:
                self._break(self._flight_error(exc))
            except BaseException as exc:  # handed to the sender
                self._break(exc)
            else:
                if self.acks == "0":  # no answer comes
                    with self._lock:
                        self._awaiting.remove(request)
                    self._completed(request, [{"b": -1, "l": -1}] * len(request.batches))
        self._finish_writing()

    def _write(self, batches: Sequence[ProduceBatch]) -> None:
        if self._writer is None:
            self._writer, self._reader = open_produce(self._client, self._command, self._schema)
            if self.acks != "0":
                name = f"sparklog-produce-answers-{self.broker.broker_id}"
                self._answers_thread = threading.Thread(target=self._run_reads, name=name, daemon=True)
                self._answers_thread.start()
        last = len(batches) - 1
        for i, batch in enumerate(batches):
            meta: dict[str, Any] = {"t": batch.topic, "p": batch.partition, "pid": batch.producer_id}
            meta["seq"] = batch.sequence
            if batch.value_schema is not None:
                meta["sv"] = batch.value_schema.version
            if i == last:
                meta["end"] = True
            with self._call_lock:  # not while the reader thread closes the call
                write_frame(self._writer, batch.batch, meta)

    def _finish_writing(self) -> None:
        """(Closing.) Half-close the stream: the broker answers what it was sent, then ends it (the
        reader thread sees that and closes the call); without a reader, close it here."""
        if self._writer is None:
            return
        with self._call_lock, contextlib.suppress(flight.FlightError, pa.ArrowException, OSError):
            self._writer.done_writing()
        if self._answers_thread is None:
            self._close_call()

    # ----------------------------------------------------------------- the reader thread
    def _run_reads(self) -> None:
        error: BaseException | None = None
        try:
            while (ack := self._reader.read()) is not None:
                results = wire.decode(ack).get("r")
                with self._lock:
                    request = self._awaiting[0] if self._awaiting else None
                    if request is None or not isinstance(results, list) or len(results) != len(request.batches):
                        raise BrokerNotAvailable(
                            f"broker {self.broker.broker_id} answered a produce request it was not sent"
                        )
                    self._awaiting.popleft()
                self._completed(request, results)
        except flight.FlightError as exc:
            error = self._flight_error(exc)
        except BaseException as exc:
            error = exc
        # the broker ended the stream (its error comes with closing the call), or reading failed
        closed_with = self._close_call()
        self._break(error or closed_with or self._ended_early())

    def _flight_error(self, exc: flight.FlightError) -> SparklogError:
        return wire.from_flight_error(exc, f"broker {self.broker.broker_id}")

    def _ended_early(self) -> BaseException:
        return BrokerNotAvailable(f"broker {self.broker.broker_id} closed the produce stream without an ack")

    def _close_call(self) -> BaseException | None:
        """Close the call; the error it ended with, if any."""
        try:
            with self._call_lock:
                self._writer.close()
        except flight.FlightError as exc:
            return self._flight_error(exc)
        except (pa.ArrowException, OSError) as exc:
            return BrokerNotAvailable(f"broker {self.broker.broker_id}: {exc}")
        return None

    def _break(self, error: BaseException) -> None:
        """Every request written and not answered fails with ``error``, and so does any later one."""
        with self._lock:
            if self._broken is None:
                self._broken = error
            failed = list(self._awaiting)
            self._awaiting.clear()
        for request in failed:
            self._completed(request, error)

    # ----------------------------------------------------------------- the sender's calls
    def close(self) -> None:
        """End the stream once the requests submitted are answered (``join`` waits for that)."""
        self._requests.put(None)

    def join(self, wait_s: float) -> None:
        if wait_s <= 0:
            return
        deadline = time.monotonic() + wait_s
        self._thread.join(wait_s)
        if self._answers_thread is not None:
            self._answers_thread.join(max(0.0, deadline - time.monotonic()))
