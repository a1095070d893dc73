"""One partition's open fetch, read on its own thread into the consumer's queue.

The consumer asks the leader for a following fetch (``sparklog.broker.fetch_follower``): the
broker keeps the stream open and sends new records as they are appended, so a record reaches the
consumer without a new call per fetch. The thread reads the stream ahead of ``poll_batches`` by
at most ``max_bytes`` (then it waits, and gRPC's flow control holds the broker back); when the
stream ends (nothing new for ``max_wait_ms``, the leader moved, a new schema version) it says so,
and the consumer opens the next one from its position. ``cancel()`` (a seek, a rebalance,
``close()``) ends the call at once.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Protocol

import pyarrow as pa
import pyarrow.flight as flight

from sparklog.coordination.cluster import BrokerInfo
from sparklog.fetch_columns import Restorer

TopicPartition = tuple[str, int]


class ColumnsInFront(Protocol):
    FIELDS: tuple[pa.Field, ...]

    def __call__(self, tp: TopicPartition, rows: int) -> list[pa.Array]: ...


RunOnLeader = Callable[[Callable[[flight.FlightClient, BrokerInfo], None]], None]


class FetchStream:
    """Reads ``tp`` from ``offset`` on; puts ``(self, batch)`` on ``results`` for each batch and
    ``(self, None)`` once, when the stream is over (``error`` says why, if it failed)."""

    def __init__(
        self,
        tp: TopicPartition,
        offset: int,
        ticket: Callable[[int], flight.Ticket],
        restorer: Restorer,
        in_front: ColumnsInFront,
        on_leader: RunOnLeader,
        results: queue.SimpleQueue[tuple[FetchStream, pa.RecordBatch | None]],
        max_bytes: int,
    ) -> None:
        """``ticket(offset)``: the fetch request from an offset; ``restorer`` rebuilds the columns a
        compact fetch left out; ``in_front(tp, rows)`` gives the columns put before the fetched ones
        (named ``in_front.FIELDS``); ``on_leader(request)`` runs ``request(client, broker)``
        against the partition's leader, retrying retriable errors."""
        self.tp = tp
        self.offset = offset  # where the next (re)opened call starts: past every batch read
        self.error: BaseException | None = None
        self._ticket = ticket
        self._restorer = restorer
        self._in_front = in_front
        self._on_leader = on_leader
        self._results = results
        self._max_bytes = max_bytes
        self._unread = 0  # bytes put on the queue that poll_batches has not taken yet
        self._credit = threading.Condition()
        self._cancelled = False
        self._reader: flight.FlightStreamReader | None = None
        self._thread = threading.Thread(target=self._run, name=f"sparklog-fetch-{tp[0]}-{tp[1]}", daemon=True)
        self._thread.start()

    def taken(self, batch: pa.RecordBatch) -> None:
        """``poll_batches`` took ``batch``: the thread may read that much further."""
        with self._credit:
            self._unread -= batch.get_total_buffer_size()
            self._credit.notify()

    def cancel(self) -> None:
        """End the call now; nothing more is put on the queue but the end."""
        with self._credit:
            self._cancelled = True
            self._credit.notify()
        reader = self._reader
        if reader is not None:
            reader.cancel()

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)

    def _run(self) -> None:
        try:
            self._on_leader(self._read)
        except BaseException as exc:  # the consumer raises it from poll_batches
            if not self._cancelled:
                self.error = exc
        finally:
            self._results.put((self, None))

    def _read(self, client: flight.FlightClient, _broker: BrokerInfo) -> None:
        if self._cancelled:
            return
        reader = self._reader = client.do_get(self._ticket(self.offset))
        try:
            if self._cancelled:  # cancel() may have run before the reader was set
                return
            restored, elided = self._restorer.layout(reader.schema)  # a stream's schema is fixed
            schema = pa.schema([*self._in_front.FIELDS, *restored])
            offsets = len(self._in_front.FIELDS)
            for chunk in reader:
                rows = 0 if chunk.data is None else chunk.data.num_rows
                if not rows:
                    continue
                columns = self._restorer.columns(chunk.data, chunk.app_metadata, elided)
                batch = pa.RecordBatch.from_arrays([*self._in_front(self.tp, rows), *columns], schema=schema)
                if not self._wait_for_credit():
                    return
                self.offset = batch.column(offsets)[-1].as_py() + 1
                with self._credit:
                    self._unread += batch.get_total_buffer_size()
                self._results.put((self, batch))
        except flight.FlightCancelledError:
            if not self._cancelled:
                raise
        finally:
            self._reader = None
            if self._cancelled:
                reader.cancel()

    def _wait_for_credit(self) -> bool:
        with self._credit:
            self._credit.wait_for(lambda: self._cancelled or self._unread < self._max_bytes)
            return not self._cancelled
