"""One open multi-partition fetch (:mod:`sparklog.protocol.multi_fetch`) of a consumer: the partitions of one
topic that one broker leads (those of one of its connections), read on one thread.

The thread keeps a ``fetch_many`` stream open from the partitions' positions and puts each batch
it receives on the consumer's queue, ahead of ``poll_batches`` by at most ``max_bytes`` (then it
waits, and gRPC's flow control holds the broker back). When the broker ends the stream (nothing
new for ``max_wait_ms``, a new schema version...) it opens the next one from where each partition
stands. A partition the broker refuses (in band: not its leader, offset out of range...) leaves
the session with that error; a failed call takes every partition with it and ends the session:
the consumer decides where they go next. Adding, moving (a seek) or removing partitions ends the
current call at once and the next one covers the new set: what one partition gets is always read
by this one thread, in order.
"""

from __future__ import annotations

import dataclasses
import queue
import threading
import time
from typing import NamedTuple, Protocol

import pyarrow as pa
import pyarrow.flight as flight

from sparklog.coordination.cluster import BrokerInfo
from sparklog.errors import SparklogError, error_from_code
from sparklog.protocol import wire
from sparklog.protocol.fetch_columns import Restorer
from sparklog.protocol.multi_fetch import MultiFetchRequest

TopicPartition = tuple[str, int]
MIN_CALL_INTERVAL_S = 0.1  # a call that ended at once with nothing is not repeated sooner than this


class ColumnsInFront(Protocol):
    FIELDS: tuple[pa.Field, ...]

    def __call__(self, tp: TopicPartition, rows: int) -> list[pa.Array]: ...


class Delivery(NamedTuple):
    """Where a queued item comes from: the session, the partition and the partition's generation
    (the consumer's count of its seeks and assignments) when it was read; ``error`` when the
    partition left the session (the item's batch is then None); ``high_watermark``: the
    partition's, as the leader said with the batch."""

    session: FetchSession
    tp: TopicPartition
    generation: int
    error: BaseException | None = None
    high_watermark: int | None = None


Results = queue.SimpleQueue[tuple[Delivery, "pa.RecordBatch | None"]]


class FetchSession:
    """Fetches ``topic``'s partitions given to it from ``broker`` over ``client``."""

    def __init__(
        self,
        topic: str,
        broker: BrokerInfo,
        client: flight.FlightClient,
        entries: dict[int, tuple[int, int]],
        request: MultiFetchRequest,
        restorer: Restorer,
        in_front: ColumnsInFront,
        results: Results,
        max_bytes: int,
    ) -> None:
        """``entries``: partition -> (offset, generation); ``request``: the fetch's settings
        (its ``positions`` are replaced by the session's for each call); ``restorer`` rebuilds
        the columns a compact fetch left out; ``in_front(tp, rows)`` gives the columns put before
        the fetched ones (named ``in_front.FIELDS``)."""
        self.topic = topic
        self.broker = broker
        self._client = client
        self._request = request
        self._restorer = restorer
        self._in_front = in_front
        self._results = results
        self._max_bytes = max_bytes
        self._entries = dict(entries)
        self._lock = threading.Condition()
        self._call = 0  # bumped when the partitions change: the current call is then over
        self._closed = False
        self._unread = 0  # bytes put on the queue that poll_batches has not taken yet
        self._reader: flight.FlightStreamReader | None = None
        name = f"sparklog-fetch-{topic}-b{broker.broker_id}-{id(self) % 10_000}"
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    # ----------------------------------------------------------------- the consumer's side
    def update(self, entries: dict[int, tuple[int, int]]) -> bool:
        """Fetch these partitions from these offsets (new ones, or a seek): the current call ends
        and the next covers them. False if the session is over (the consumer starts another)."""
        with self._lock:
            if self._closed:
                return False
            self._entries.update(entries)
            self._restart()
        return True

    def remove(self, partitions: list[int]) -> None:
        with self._lock:
            for p in partitions:
                self._entries.pop(p, None)
            self._restart()

    def taken(self, batch: pa.RecordBatch) -> None:
        """``poll_batches`` took ``batch``: the thread may read that much further."""
        with self._lock:
            self._unread -= batch.get_total_buffer_size()
            self._lock.notify_all()

    def close(self) -> None:
        """End the call now; nothing more is put on the queue."""
        with self._lock:
            self._closed = True
            self._restart()

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)

    def _restart(self) -> None:
        """(Under the lock.) The current call is over: the thread opens the next one."""
        self._call += 1
        self._lock.notify_all()
        reader = self._reader
        if reader is not None:
            reader.cancel()

    # ----------------------------------------------------------------- the thread
    def _run(self) -> None:
        try:
            while True:
                with self._lock:
                    if self._closed or not self._entries:
                        self._closed = True
                        return
                    call = self._call
                    positions = {p: offset for p, (offset, _) in self._entries.items()}
                started = time.monotonic()
                delivered = self._one_call(call, positions)
                if not delivered and time.monotonic() - started < MIN_CALL_INTERVAL_S:
                    with self._lock:
                        self._lock.wait_for(lambda c=call: self._closed or self._call != c, MIN_CALL_INTERVAL_S)
        except BaseException as exc:  # the call failed: every partition leaves with the error
            if isinstance(exc, flight.FlightError):
                exc = wire.from_flight_error(exc, f"broker {self.broker.broker_id}")
            with self._lock:
                entries, self._entries = self._entries, {}
                closed, self._closed = self._closed, True
            if not closed:
                for p, (_, generation) in sorted(entries.items()):
                    self._results.put((Delivery(self, (self.topic, p), generation, exc), None))

    def _one_call(self, call: int, positions: dict[int, int]) -> bool:
        """One ``fetch_many`` call until the broker ends it or the session restarts it; whether
        it delivered anything."""
        request = dataclasses.replace(self._request, topic=self.topic, positions=positions)
        reader = self._client.do_get(flight.Ticket(wire.encode(request.to_json())))
        delivered = False
        with self._lock:
            if call != self._call:
                reader.cancel()
                return True
            self._reader = reader
        try:
            restored, elided = self._restorer.layout(reader.schema)  # a stream's schema is fixed
            schema = pa.schema([*self._in_front.FIELDS, *restored])
            offsets = len(self._in_front.FIELDS)
            for chunk in reader:
                if chunk.app_metadata is None or not chunk.app_metadata.size:
                    continue
                told = wire.decode(chunk.app_metadata)
                p = told.get("p")
                if "error" in told:
                    error = error_from_code(str(told["error"]), str(told.get("message", "")))
                    if not self._leave(call, p, error):
                        return True
                    delivered = True
                    continue
                rows = 0 if chunk.data is None else chunk.data.num_rows
                if not rows or p is None:
                    continue
                tp = (self.topic, p)
                columns = self._restorer.columns(chunk.data, told, elided)
                batch = pa.RecordBatch.from_arrays([*self._in_front(tp, rows), *columns], schema=schema)
                size = batch.get_total_buffer_size()
                with self._lock:
                    self._lock.wait_for(lambda: call != self._call or self._unread < self._max_bytes)
                    if call != self._call:
                        return True
                    entry = self._entries.get(p)
                    if entry is None:
                        continue
                    self._entries[p] = (batch.column(offsets)[-1].as_py() + 1, entry[1])
                    self._unread += size
                    hw = told.get("hw")
                    self._results.put((Delivery(self, tp, entry[1], None, hw if isinstance(hw, int) else None), batch))
                delivered = True
        except flight.FlightCancelledError:
            with self._lock:
                if call == self._call:
                    raise
            return True
        finally:
            with self._lock:
                self._reader = None
                if call != self._call:
                    reader.cancel()
        return delivered

    def _leave(self, call: int, p: object, error: SparklogError) -> bool:
        """Partition ``p`` was refused by the broker: it leaves the session with ``error``.
        False if the call is over meanwhile."""
        with self._lock:
            if call != self._call:
                return False
            entry = self._entries.pop(p, None) if isinstance(p, int) else None
            if entry is not None:
                self._results.put((Delivery(self, (self.topic, p), entry[1], error), None))
        return True
