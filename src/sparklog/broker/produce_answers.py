"""The answers of one producer stream's ``acks=all`` requests, written in order by their own thread
while the stream's handler reads and appends the next requests (Kafka keeps a produce request that
waits for its replicas in a purgatory, not on a network thread).

A producer pipelines up to a few requests on one stream per broker; if the handler waited for each
request's high watermark before reading the next, the requests would replicate one after the other.
At most ``MAX_WAITING`` answers wait here; past that the handler stops reading (and the producer's
writes wait), so a producer that never reads its answers holds two threads and no more memory.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from typing import Any

import pyarrow as pa

log = logging.getLogger(__name__)

MAX_WAITING = 8  # requests appended and not yet answered, per stream


class PipelinedAnswers:
    """Computes each queued request's answer (``answer(request)``, which may wait for replicas) and
    writes it (``write``), in the order the requests were queued."""

    def __init__(self, answer: Callable[[Any], pa.Buffer], write: Callable[[pa.Buffer], None], name: str) -> None:
        self._answer = answer
        self._write = write
        self._queue: queue.Queue[Any] = queue.Queue(MAX_WAITING)
        self._stop = object()
        self._abandoned = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def put(self, request: Any) -> None:
        """Queue a request's answer (waits while ``MAX_WAITING`` are queued)."""
        self._queue.put(request)

    def close(self, abandon: bool) -> None:
        """Write the queued answers (or, ``abandon``: drop those not started: the stream failed) and
        wait for the thread: the handler must not return while an answer is being written."""
        self._abandoned = self._abandoned or abandon
        self._queue.put(self._stop)
        self._thread.join()

    def _run(self) -> None:
        while (request := self._queue.get()) is not self._stop:
            if self._abandoned:
                continue
            try:
                answer = self._answer(request)
            except Exception:  # a bug: the producer's request times out and goes again
                log.exception("a produce answer could not be made")
                self._abandoned = True
                continue
            try:
                self._write(answer)
            except Exception as exc:  # the producer went away: nobody reads the answers left
                log.debug("a produce answer could not be written: %r", exc)
                self._abandoned = True
