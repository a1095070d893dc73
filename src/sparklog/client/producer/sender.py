"""The producer's sender: one thread that sends every partition's batches to its leader, on one
stream per broker carrying up to ``max_in_flight`` requests at once (Kafka's ``Sender`` draining its
``RecordAccumulator``).

Each round it looks at the partitions with batches waiting and not in flight, finds their leaders
(cached; looked up again after a ``NotLeader`` or an unreachable broker), and for each broker whose
stream has room sends requests holding the waiting batches of the partitions that broker leads (up
to ``max_request_bytes`` each; small batches queued for one partition are joined first). A
partition has at most one request in flight, so its batches stay in order. The
answer carries a result per batch: acknowledged batches resolve their rows; a partition whose batch
failed with a retriable error gets its batches back at the front of its queue, to go again (same
producer id and sequences) after a backoff, until their delivery timeout; any other error fails
that batch alone. A request unanswered within ``request_timeout_s`` (or its batches' delivery
timeout) is given up on with its stream, and its batches, and those of every other request on that
stream, go again on a new one. A request unanswered for ``LEADER_CHECK_S`` has its partitions'
leaders looked up again (on a thread of its own, other brokers asked first): if one moved, the
request is given up on as by ``NotLeader``, so a leader whose host fell off the network costs the
election, not the request timeout (the batches keep their producer id and sequences: the new
leader appends them once, whether or not the old one had).

Threads: this one, plus two per open broker stream (:mod:`broker_stream`), whatever the number of
partitions.
"""

from __future__ import annotations

import math
import queue
import threading
import time
from collections.abc import Callable, Iterable
from typing import Protocol

import pyarrow as pa

from sparklog.client.client_metrics import ProducerMetrics
from sparklog.client.producer.broker_stream import Outcome, ProduceRequest
from sparklog.client.producer.partition_queue import PartitionQueue
from sparklog.client.producer.produce_batch import ProduceBatch
from sparklog.coordination.cluster import BrokerInfo
from sparklog.errors import (
    BrokerNotAvailable,
    NotLeader,
    RequestTimedOut,
    SparklogError,
    UnknownServerError,
    error_from_code,
)

MAX_REQUEST_BYTES = 8 << 20
MAX_IN_FLIGHT = 4  # requests on one broker's stream at once (Kafka: max.in.flight.requests.per.connection)
LEADER_CHECK_S = 1.0  # a request unanswered this long has its partitions' leaders looked up again
TopicPartition = tuple[str, int]
StreamKey = tuple[int, pa.DataType]  # broker id, value type


class Leaders(Protocol):
    """What the sender needs from the cluster's metadata and connections."""

    def leader(self, topic: str, partition: int, refresh: bool = False) -> BrokerInfo: ...

    def forget(self, broker: BrokerInfo) -> None: ...

    def suspect(self, broker: BrokerInfo) -> None: ...


class ProduceStream(Protocol):
    """An open stream to a broker that answers its requests in order (:class:`BrokerProduceStream`,
    or a fake in tests)."""

    broker: BrokerInfo
    in_flight: int  # requests submitted and not answered (kept by the sender)

    def submit(self, request: ProduceRequest) -> None: ...

    def close(self) -> None: ...

    def join(self, wait_s: float) -> None: ...


# (broker, value type, where answers go) -> a new stream
OpenStream = Callable[[BrokerInfo, pa.DataType, Callable[[ProduceRequest, Outcome], None]], ProduceStream]


class Sender:
    """Sends queued batches (:meth:`enqueue`) until :meth:`close`."""

    def __init__(
        self,
        leaders: Leaders,
        open_stream: OpenStream,
        acks: str,
        request_timeout_s: float,
        delivery_timeout_s: float,
        retries: int | None,
        batch_records: int,
        batch_bytes: int,
        max_request_bytes: int = MAX_REQUEST_BYTES,
        max_in_flight: int = MAX_IN_FLIGHT,
        metrics: ProducerMetrics | None = None,
    ) -> None:
        self.leaders = leaders
        self.open_stream = open_stream
        self.acks = acks
        self.request_timeout_s = request_timeout_s
        self.delivery_timeout_s = delivery_timeout_s
        self.retries = retries
        self.batch_records = batch_records
        self.batch_bytes = batch_bytes
        self.max_request_bytes = max_request_bytes
        self.max_in_flight = max(1, max_in_flight)
        self.metrics = metrics if metrics is not None else ProducerMetrics()  # updated on this thread only
        self._queues: dict[TopicPartition, PartitionQueue] = {}
        self._ready: dict[TopicPartition, None] = {}  # batches waiting and not in flight (ordered set)
        self._lock = threading.Lock()  # the queues and the ready set (enqueue runs on callers' threads)
        self._wake = threading.Event()
        self._answers: queue.SimpleQueue[tuple[ProduceRequest, Outcome]] = queue.SimpleQueue()
        self._streams: dict[StreamKey, ProduceStream] = {}
        self._in_flight: dict[ProduceRequest, None] = {}
        # outcomes decided under the lock, resolved after it is released (a future's callback may
        # send again, which takes the lock)
        self._settled: list[tuple[ProduceBatch, BaseException | int]] = []
        self._closing = False
        self._checked_at: dict[ProduceRequest, float] = {}  # overdue requests: when their leaders were looked up
        self._checking = threading.Lock()  # held while a leader check runs (released by its thread)
        self._thread = threading.Thread(target=self._run, name="sparklog-sender", daemon=True)
        self._thread.start()

    # ----------------------------------------------------------------- callers' side
    def enqueue(self, topic: str, partition: int, batches: Iterable[ProduceBatch]) -> None:
        """Queue batches for one partition, after the ones already queued there."""
        tp = (topic, partition)
        with self._lock:
            q = self._queues.get(tp)
            if q is None:
                q = self._queues[tp] = PartitionQueue(topic, partition)
            q.batches.extend(batches)
            if not q.in_flight:
                self._ready[tp] = None
        self._wake.set()

    def close(self, wait_s: float = 2.0) -> None:
        """Send what is queued (each batch until its delivery timeout), then stop; a frozen broker's
        stream is left behind after ``wait_s``, not waited for."""
        self._closing = True
        self._wake.set()
        self._thread.join()
        for stream in self._streams.values():
            stream.close()
        give_up = time.monotonic() + wait_s
        for stream in self._streams.values():
            stream.join(give_up - time.monotonic())
        self._streams.clear()

    def threads(self) -> int:
        """Threads the sender runs now (its own and two per open stream)."""
        return 1 + 2 * len(self._streams)

    # ----------------------------------------------------------------- the sender's thread
    def _run(self) -> None:
        while True:
            now = time.monotonic()
            while True:
                try:
                    request, outcome = self._answers.get_nowait()
                except queue.Empty:
                    break
                self._answered(request, outcome, now)
                self._settle()
            self._time_out_requests(now)
            next_at = min(self._send_ready(now), self._check_leaders(now))
            self._settle()
            if self._in_flight:
                next_at = min(next_at, min(r.deadline for r in self._in_flight))
            if self._closing and not self._in_flight and self._idle():
                return
            self._wake.wait(None if next_at == math.inf else max(0.0, next_at - time.monotonic()))
            self._wake.clear()

    def _settle(self) -> None:
        settled, self._settled = self._settled, []
        metrics = self.metrics
        for batch, outcome in settled:
            if isinstance(outcome, BaseException):
                metrics.records_failed += batch.batch.num_rows
                batch.failed(outcome)
            else:
                metrics.records_sent += batch.batch.num_rows
                batch.acknowledged(outcome)

    def _idle(self) -> bool:
        with self._lock:
            return not any(q.batches for q in self._queues.values())

    def _answer_from_stream(self, request: ProduceRequest, outcome: Outcome) -> None:
        self._answers.put((request, outcome))
        self._wake.set()

    def _send_ready(self, now: float) -> float:
        """Send a request to every broker with a free stream and partitions ready for it; the next
        time something is due (a partition's backoff is over, a waiting batch's delivery timeout)."""
        next_at = math.inf
        with self._lock:
            ready = [self._queues[tp] for tp in self._ready]
        by_broker: dict[StreamKey, tuple[BrokerInfo, list[PartitionQueue]]] = {}
        for q in ready:
            if q.retry_at > now:
                next_at = min(next_at, q.retry_at)
                continue
            with self._lock:
                self._expire(q, now)
                head = q.batches[0] if q.batches else None
                if head is None:
                    self._ready.pop((q.topic, q.partition), None)
                    continue
            next_at = min(next_at, head.deadline)  # if it is still waiting then, it fails
            try:
                broker = self.leaders.leader(q.topic, q.partition, refresh=q.refresh_leader)
            except Exception as exc:  # no leader now (retried), or no such topic (failed)
                next_at = min(next_at, self._cannot_send(q, now, exc, "metadata lookup failed"))
                continue
            q.refresh_leader = False
            by_broker.setdefault((broker.broker_id, head.value_type), (broker, []))[1].append(q)
        for key, (broker, queues) in by_broker.items():
            stream = self._streams.get(key)
            if stream is not None and stream.broker != broker:  # the broker moved: a new stream
                self._drop_stream(stream, forget=False)
                stream = None
            if stream is None:
                try:  # connecting may fail: refused credentials, an unreachable broker
                    stream = self.open_stream(broker, key[1], self._answer_from_stream)
                except Exception as exc:
                    for q in queues:
                        next_at = min(next_at, self._cannot_send(q, now, exc, "connecting failed"))
                    continue
                self._streams[key] = stream
            while queues and stream.in_flight < self.max_in_flight:  # else an answer wakes this thread
                with self._lock:
                    batches, queues = self._drain(queues, key[1])
                if not batches:
                    break
                left = min(b.deadline for b in batches) - now
                request = ProduceRequest(stream, batches, now + max(0.0, min(self.request_timeout_s, left)))
                self.metrics.request_sent([b.nbytes for b in batches])
                self._in_flight[request] = None
                stream.in_flight += 1
                stream.submit(request)
        return next_at

    def _cannot_send(self, q: PartitionQueue, now: float, exc: BaseException, doing: str) -> float:
        """``q`` cannot be sent now because of ``exc``: retried after a backoff if retriable, else its
        queued batches fail with it. When to look at it again."""
        error = exc if isinstance(exc, SparklogError) else BrokerNotAvailable(f"{doing}: {exc}")
        if error.retriable:
            q.retry_later(now, error, refresh_leader=True)
            return q.retry_at
        with self._lock:
            self._fail_queued(q, error)
        return math.inf

    def _drain(
        self, queues: list[PartitionQueue], value_type: pa.DataType
    ) -> tuple[list[ProduceBatch], list[PartitionQueue]]:
        """Take the batches of a request from the front of the queues (each queue then in flight),
        up to ``max_request_bytes``; and the queues left for the next request."""
        batches: list[ProduceBatch] = []
        size = 0
        for i, q in enumerate(queues):
            if batches and size >= self.max_request_bytes:
                return batches, queues[i:]
            taken = 0
            while q.batches:
                batch = q.batches[0]
                if batch.value_type != value_type or (taken and size + batch.nbytes > self.max_request_bytes):
                    break
                q.batches.popleft()
                while q.batches and batch.can_join(q.batches[0], self.batch_records, self.batch_bytes):
                    batch.join(q.batches.popleft())
                q.number(batch)
                batch.attempts += 1
                batches.append(batch)
                size += batch.nbytes
                taken += 1
            if taken:
                q.in_flight = True
                self._ready.pop((q.topic, q.partition), None)
        return batches, []

    def _time_out_requests(self, now: float) -> None:
        for request in [r for r in self._in_flight if r.deadline <= now]:
            waited = now - request.sent_at
            broker = request.stream.broker
            error = RequestTimedOut(
                f"broker {broker.broker_id} did not acknowledge a produce request within {waited:.1f} s"
            )
            self._answered(request, error, now)

    def _check_leaders(self, now: float) -> float:
        """Start a leader check of the requests unanswered for ``LEADER_CHECK_S`` (one check at a
        time, each request at most once a ``LEADER_CHECK_S``); when the next one is due."""
        for gone in [r for r in self._checked_at if r not in self._in_flight]:
            del self._checked_at[gone]
        due = [r for r in self._in_flight if max(r.sent_at, self._checked_at.get(r, 0.0)) + LEADER_CHECK_S <= now]
        if due and self._checking.acquire(blocking=False):
            for r in due:
                self._checked_at[r] = now
            looked_up = [(r, r.stream.broker, sorted({(b.topic, b.partition) for b in r.batches})) for r in due]
            threading.Thread(target=self._look_up_leaders, args=(looked_up,), name="sparklog-leader-check").start()
        waiting = [max(r.sent_at, self._checked_at.get(r, 0.0)) + LEADER_CHECK_S for r in self._in_flight]
        return min(waiting, default=math.inf)

    def _look_up_leaders(self, requests: list[tuple[ProduceRequest, BrokerInfo, list[TopicPartition]]]) -> None:
        """(On its own thread.) For each overdue request, whether its broker still leads its
        partitions; a request whose partition moved is answered ``NotLeader``."""
        try:
            for _request, broker, _partitions in requests:
                self.leaders.suspect(broker)
            for request, broker, partitions in requests:
                for topic, partition in partitions:
                    try:
                        leader = self.leaders.leader(topic, partition, refresh=True)
                    except Exception:  # no leader yet, brokers out of reach: looked at again later
                        continue
                    if leader.broker_id != broker.broker_id:
                        moved = NotLeader(
                            f"broker {broker.broker_id} no longer leads {topic}-{partition} (broker "
                            f"{leader.broker_id} does) and has not answered for {LEADER_CHECK_S:.0f} s or more"
                        )
                        self._answer_from_stream(request, moved)
                        break
        finally:
            self._checking.release()
            self._wake.set()

    def _answered(self, request: ProduceRequest, outcome: Outcome, now: float) -> None:
        if request not in self._in_flight:
            return  # given up on already (timed out, or its leader moved): its batches went again
        del self._in_flight[request]
        stream = request.stream
        stream.in_flight -= 1
        by_partition: dict[TopicPartition, list[tuple[ProduceBatch, BaseException | int]]] = {}
        if isinstance(outcome, BaseException):
            error = outcome if isinstance(outcome, SparklogError) else UnknownServerError(repr(outcome))
            if self._drop_stream(stream, forget=isinstance(error, BrokerNotAvailable)):
                # the other requests on it go again on a new stream now, not at their deadlines
                for other in [r for r in self._in_flight if r.stream is stream]:
                    self._answered(other, BrokerNotAvailable(f"abandoned with its stream: {error}"), now)
            for batch in request.batches:
                by_partition.setdefault((batch.topic, batch.partition), []).append((batch, error))
        else:
            self.metrics.request_answered(time.monotonic() - request.sent_at)
            for batch, result in zip(request.batches, outcome, strict=True):
                answer: BaseException | int
                if "b" in result:
                    answer = int(result["b"])
                else:
                    answer = error_from_code(str(result.get("e")), str(result.get("m", "")))
                by_partition.setdefault((batch.topic, batch.partition), []).append((batch, answer))
        with self._lock:
            for tp, answers in by_partition.items():
                self._partition_answered(self._queues[tp], answers, now)

    def _partition_answered(
        self, q: PartitionQueue, answers: list[tuple[ProduceBatch, BaseException | int]], now: float
    ) -> None:
        """One partition's batches of a request: a run of acknowledged ones, then (the leader stops
        at a partition's first failed batch) failed ones, which go back to the front of its queue."""
        q.in_flight = False
        for i, (batch, answer) in enumerate(answers):
            if not isinstance(answer, BaseException):
                self._settled.append((batch, answer))
                q.succeeded()
                continue
            rest = [b for b, _ in answers[i:]]
            q.batches.extendleft(reversed(rest))
            retry = answer.retriable if isinstance(answer, SparklogError) else False
            if retry and (self.retries is None or batch.attempts <= self.retries):
                self.metrics.records_retried += sum(b.batch.num_rows for b in rest)
                q.retry_later(now, answer, refresh_leader=isinstance(answer, NotLeader | BrokerNotAvailable))
            elif retry:  # out of retries: as if its delivery timeout had passed
                q.retry_later(now, answer, refresh_leader=False)
                self._fail_front(q, q.last_error or answer)
            else:  # this batch is refused; the ones behind it were not appended: they go again
                self._settled.append((q.batches.popleft(), answer))
                q.new_producer_id()
            break
        if q.batches:
            self._ready[(q.topic, q.partition)] = None

    def _expire(self, q: PartitionQueue, now: float) -> None:
        """Fail the batches at the front whose delivery timeout has passed."""
        while q.batches and q.batches[0].deadline <= now:
            timeout = RequestTimedOut(f"delivery timeout of {self.delivery_timeout_s} s passed before sending")
            self._fail_front(q, q.last_error or timeout)

    def _fail_front(self, q: PartitionQueue, error: BaseException) -> None:
        """Fail the front batch for good. If it was sent its fate is unknown, and so is the fate of
        the batches sent with it: they fail too (sent again under a new producer id, a stored one
        would be stored twice), and the batches behind them go under a new producer id."""
        batch = q.batches.popleft()
        self._settled.append((batch, error))
        if batch.sequence is not None:
            while q.batches and q.batches[0].sequence is not None:
                self._settled.append((q.batches.popleft(), error))
            q.new_producer_id()

    def _fail_queued(self, q: PartitionQueue, error: BaseException) -> None:
        while q.batches:
            self._settled.append((q.batches.popleft(), error))
        q.new_producer_id()
        self._ready.pop((q.topic, q.partition), None)

    def _drop_stream(self, stream: ProduceStream, forget: bool) -> bool:
        """Stop using ``stream`` (True if it was still in use)."""
        dropped = False
        for key, open_stream in list(self._streams.items()):
            if open_stream is stream:
                del self._streams[key]
                dropped = True
        if dropped:
            stream.close()
        if forget:
            self.leaders.forget(stream.broker)
        return dropped
