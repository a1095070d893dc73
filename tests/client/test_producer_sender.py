"""The producer's sender against fake brokers (a fake leader lookup and fake streams that answer what
the test tells them): requests per broker, per-partition order, retries with the same producer id
and sequences, a refused batch failing alone, timeouts and delivery timeouts. The same sender runs
against real brokers in the produce, replication and failover tests."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa
import pytest

from sparklog.client.producer.broker_stream import Outcome, ProduceRequest
from sparklog.client.producer.produce_batch import BatchPart, PartitionRows, ProduceBatch, wire_batches
from sparklog.client.producer.sender import LEADER_CHECK_S, Sender
from sparklog.coordination.cluster import BrokerInfo
from sparklog.errors import InvalidRecord, NotEnoughReplicas, NotLeader, RequestTimedOut
from waiting import wait_for

BROKERS = {1: BrokerInfo(1, "127.0.0.1", 9001), 2: BrokerInfo(2, "127.0.0.1", 9002)}


class FakeLeaders:
    def __init__(self, leaders: dict[tuple[str, int], int]) -> None:
        self.leaders = leaders
        self.refreshed: list[tuple[str, int]] = []
        self.forgotten: list[int] = []
        self.suspected: list[int] = []

    def leader(self, topic: str, partition: int, refresh: bool = False) -> BrokerInfo:
        if refresh:
            self.refreshed.append((topic, partition))
        return BROKERS[self.leaders[(topic, partition)]]

    def forget(self, broker: BrokerInfo) -> None:
        self.forgotten.append(broker.broker_id)

    def suspect(self, broker: BrokerInfo) -> None:
        self.suspected.append(broker.broker_id)


class FakeStream:
    def __init__(self, broker: BrokerInfo, answers: Callable[[ProduceRequest, Outcome], None], log: Any) -> None:
        self.broker = broker
        self.in_flight = 0
        self.closed = False
        self._answers = answers
        self._log = log

    def submit(self, request: ProduceRequest) -> None:
        self._log.sent(self, request)

    def answer(self, request: ProduceRequest, outcome: Outcome) -> None:
        self._answers(request, outcome)

    def close(self) -> None:
        self.closed = True

    def join(self, wait_s: float) -> None:
        pass


class Brokers:
    """The fake streams the sender opened and the requests it sent, in order."""

    def __init__(self) -> None:
        self.streams: list[FakeStream] = []
        self.requests: list[tuple[FakeStream, ProduceRequest]] = []
        self._cond = threading.Condition()
        self._refuse = False

    def open(self, broker: BrokerInfo, _value_type: pa.DataType, answers: Any) -> FakeStream:
        stream = FakeStream(broker, answers, self)
        self.streams.append(stream)
        return stream

    def sent(self, stream: FakeStream, request: ProduceRequest) -> None:
        with self._cond:
            self.requests.append((stream, request))
            self._cond.notify_all()
            refuse = self._refuse
        if refuse:
            self._refused(stream, request)

    def refuse_all(self) -> None:
        with self._cond:
            self._refuse = True
            requests = list(self.requests)
        for stream, request in requests:
            self._refused(stream, request)

    @staticmethod
    def _refused(stream: FakeStream, request: ProduceRequest) -> None:
        stream.answer(request, [{"e": InvalidRecord.code, "m": "test over"}] * len(request.batches))

    def wait_requests(self, n: int, timeout: float = 10.0) -> list[tuple[FakeStream, ProduceRequest]]:
        with self._cond:
            assert self._cond.wait_for(lambda: len(self.requests) >= n, timeout), (
                f"expected {n} requests, got {len(self.requests)}"
            )
            return self.requests[:n]


def ok(request: ProduceRequest, base: int = 0) -> list[dict[str, Any]]:
    out, at = [], base
    for b in request.batches:
        out.append({"b": at, "l": at + b.batch.num_rows - 1})
        at += b.batch.num_rows
    return out


class Outcomes:
    """Each queued batch's outcome, as the producer's rows learn it."""

    def __init__(self) -> None:
        self.done: dict[str, Any] = {}

    def batch(self, topic: str, partition: int, name: str, rows: int = 2, deadline_s: float = 30.0) -> ProduceBatch:
        def on_done(send: PartitionRows) -> None:
            self.done[name] = send.error if send.error is not None else send.offsets.tolist()

        owner = PartitionRows(partition, [slice(0, rows)], rows, on_done)
        owner.expect(1)
        batch = pa.record_batch({"value": pa.array([name.encode()] * rows, pa.binary())})
        deadline = time.monotonic() + deadline_s
        return ProduceBatch(topic, partition, batch, None, deadline, [BatchPart(owner, 0, rows)])

    def wait(self, *names: str, timeout: float = 10.0) -> None:
        wait_for(
            lambda: all(n in self.done for n in names),
            timeout,
            lambda: f"an outcome for each of {[n for n in names if n not in self.done]}",
            0.01,
        )


@pytest.fixture
def setup() -> Iterator[tuple[FakeLeaders, Brokers, Outcomes, Callable[..., Sender]]]:
    leaders = FakeLeaders({("t", 0): 1, ("t", 1): 2, ("t", 2): 1})
    brokers = Brokers()
    outcomes = Outcomes()
    senders: list[Sender] = []

    def make(**kwargs: Any) -> Sender:
        options: dict[str, Any] = {
            "acks": "all",
            "request_timeout_s": 30.0,
            "delivery_timeout_s": 30.0,
            "retries": None,
            "batch_records": 10_000,
            "batch_bytes": 4 << 20,
            **kwargs,
        }
        sender = Sender(leaders, brokers.open, **options)
        senders.append(sender)
        return sender

    yield leaders, brokers, outcomes, make
    brokers.refuse_all()  # whatever is unanswered, or sent from now on, fails: the senders stop at once
    for sender in senders:
        sender.close()


def test_one_request_per_broker_with_every_partition_it_leads(setup: Any) -> None:
    """With one request in flight per broker, what is queued meanwhile for the partitions a broker
    leads goes in its next request, all partitions together; another broker's go their own way."""
    leaders, brokers, outcomes, make = setup
    sender = make(max_in_flight=1)
    sender.enqueue("t", 0, [outcomes.batch("t", 0, "a1")])
    ((stream1, first),) = brokers.wait_requests(1)
    sender.enqueue("t", 2, [outcomes.batch("t", 2, "c")])
    sender.enqueue("t", 0, [outcomes.batch("t", 0, "a2", rows=20_000)])
    sender.enqueue("t", 1, [outcomes.batch("t", 1, "b")])
    (_, _), (stream2, to_two) = brokers.wait_requests(2)
    assert stream2.broker.broker_id == 2 and [b.partition for b in to_two.batches] == [1]
    time.sleep(0.2)
    assert len(brokers.requests) == 2, "a second request to broker 1 while one is in flight"
    stream1.answer(first, ok(first))
    stream2.answer(to_two, ok(to_two, 10))
    (_, _), (_, _), (stream3, to_one) = brokers.wait_requests(3)
    assert stream3 is stream1
    assert sorted((b.partition, b.sequence) for b in to_one.batches) == [(0, 2), (2, 0)]
    stream3.answer(to_one, ok(to_one, 50))
    outcomes.wait("a1", "a2", "b", "c")
    assert outcomes.done["a1"] == [0, 1] and outcomes.done["b"] == [10, 11]


def test_slices_of_one_big_send_fill_a_request_by_the_bytes_they_carry(setup: Any) -> None:
    """A 60,000-row table (6 MB) cut into 10,000-row batches for one partition: each batch is a
    slice sharing the table's buffers, and counts as the 1.2 MB it carries, so all six go in one
    request of up to 8 MiB (counted as 6 MB each, they went one request and one round trip each)."""
    _leaders, brokers, outcomes, make = setup
    sender = make(max_in_flight=1)
    rows = 60_000
    owner = PartitionRows(
        0, [slice(0, rows)], rows, lambda send: outcomes.done.setdefault("big", send.offsets.tolist())
    )
    table = pa.table({"value": pa.array([b"v" * 100] * rows, pa.binary())})
    batches = wire_batches("t", owner, table, None, time.monotonic() + 30, 10_000)
    assert len(batches) == 6 and all(b.nbytes < 1_300_000 for b in batches), [b.nbytes for b in batches]
    owner.expect(len(batches))
    sender.enqueue("t", 0, batches)
    ((stream, first),) = brokers.wait_requests(1)
    assert [b.batch.num_rows for b in first.batches] == [10_000] * 6
    stream.answer(first, ok(first))
    outcomes.wait("big")
    assert outcomes.done["big"] == list(range(rows))


def test_a_partition_is_in_one_request_at_a_time_and_keeps_its_order(setup: Any) -> None:
    leaders, brokers, outcomes, make = setup
    sender = make()
    sender.enqueue("t", 0, [outcomes.batch("t", 0, "a1")])
    ((stream, first),) = brokers.wait_requests(1)
    sender.enqueue("t", 0, [outcomes.batch("t", 0, "a2"), outcomes.batch("t", 0, "a3")])
    time.sleep(0.2)
    assert len(brokers.requests) == 1, "a second request for a partition already in flight"
    stream.answer(first, ok(first))
    (_, _), (stream2, second) = brokers.wait_requests(2)
    # the two small batches queued meanwhile travel joined, numbered after the first
    assert len(second.batches) == 1 and second.batches[0].batch.num_rows == 4
    assert second.batches[0].sequence == 2 and second.batches[0].producer_id == first.batches[0].producer_id
    stream2.answer(second, ok(second, 2))
    outcomes.wait("a1", "a2", "a3")
    assert (outcomes.done["a1"], outcomes.done["a2"], outcomes.done["a3"]) == ([0, 1], [2, 3], [4, 5])


def test_a_retriable_error_sends_the_partitions_batches_again_with_the_same_numbers(setup: Any) -> None:
    leaders, brokers, outcomes, make = setup
    sender = make(max_in_flight=1)
    sender.enqueue("t", 2, [outcomes.batch("t", 2, "z")])
    ((stream, blocker),) = brokers.wait_requests(1)  # while it is in flight, broker 1's next request fills
    sender.enqueue("t", 0, [outcomes.batch("t", 0, "a1"), outcomes.batch("t", 0, "a2", rows=20_000)])
    sender.enqueue("t", 2, [outcomes.batch("t", 2, "c")])
    stream.answer(blocker, ok(blocker))
    (_, _), (stream, request) = brokers.wait_requests(2)
    assert [(b.partition, b.sequence) for b in request.batches] == [(0, 0), (0, 2), (2, 2)]
    leaders.leaders[("t", 0)] = 2  # partition 0 moved
    moved = {"e": NotLeader.code, "m": "not the leader"}
    stream.answer(request, [moved, moved, {"b": 5, "l": 6}])
    outcomes.wait("c")
    assert outcomes.done["c"] == [5, 6]
    (_, _), (_, _), (stream2, again) = brokers.wait_requests(3)
    assert stream2.broker.broker_id == 2 and ("t", 0) in leaders.refreshed
    assert [(b.partition, b.sequence, b.producer_id) for b in again.batches] == [
        (0, 0, request.batches[0].producer_id),
        (0, 2, request.batches[0].producer_id),
    ]
    stream2.answer(again, ok(again, 100))
    outcomes.wait("a1", "a2")
    assert outcomes.done["a1"] == [100, 101]


def test_a_refused_batch_fails_alone_and_the_next_goes_under_a_new_producer_id(setup: Any) -> None:
    leaders, brokers, outcomes, make = setup
    sender = make()
    sender.enqueue("t", 0, [outcomes.batch("t", 0, "bad"), outcomes.batch("t", 0, "next", rows=20_000)])
    ((stream, request),) = brokers.wait_requests(1)
    refused = {"e": InvalidRecord.code, "m": "refused"}
    stream.answer(request, [refused, refused])  # the leader stops at a partition's first failed batch
    outcomes.wait("bad")
    assert isinstance(outcomes.done["bad"], InvalidRecord)
    (_, _), (stream2, again) = brokers.wait_requests(2)
    (batch,) = again.batches
    assert batch.sequence == 0 and batch.producer_id != request.batches[0].producer_id
    stream2.answer(again, ok(again, 7))
    outcomes.wait("next")
    assert outcomes.done["next"][:2] == [7, 8]


def test_an_unanswered_request_is_abandoned_and_sent_again_on_a_new_stream(setup: Any) -> None:
    leaders, brokers, outcomes, make = setup
    sender = make(request_timeout_s=0.3)
    sender.enqueue("t", 1, [outcomes.batch("t", 1, "b")])
    ((stream, request),) = brokers.wait_requests(1)
    (_, _), (stream2, again) = brokers.wait_requests(2)  # no answer: timed out
    assert stream.closed and stream2 is not stream and 2 in leaders.forgotten
    assert again.batches[0].sequence == request.batches[0].sequence == 0
    stream.answer(request, ok(request))  # a late answer on the abandoned stream is ignored
    stream2.answer(again, ok(again, 3))
    outcomes.wait("b")
    assert outcomes.done["b"] == [3, 4]


def test_an_overdue_request_whose_leader_moved_goes_to_the_new_leader_before_its_timeout(setup: Any) -> None:
    leaders, brokers, outcomes, make = setup
    sender = make(request_timeout_s=30.0)
    sender.enqueue("t", 0, [outcomes.batch("t", 0, "a")])
    ((stream, request),) = brokers.wait_requests(1)
    assert stream.broker.broker_id == 1
    time.sleep(LEADER_CHECK_S + 0.5)  # unanswered past the check, the leader unchanged: nothing moves
    assert len(brokers.requests) == 1 and not stream.closed
    assert 1 in leaders.suspected  # metadata is asked of the other brokers first meanwhile
    leaders.leaders[("t", 0)] = 2  # broker 1 lost the partition (its host fell off the network)
    (_, _), (stream2, again) = brokers.wait_requests(2, timeout=LEADER_CHECK_S * 3)
    assert stream2.broker.broker_id == 2 and stream.closed
    assert again.batches[0].sequence == request.batches[0].sequence == 0  # the new leader appends it once
    stream.answer(request, ok(request))  # the old leader's late answer is ignored
    stream2.answer(again, ok(again, 7))
    outcomes.wait("a")
    assert outcomes.done["a"] == [7, 8]


def test_past_the_delivery_timeout_the_batches_sent_together_fail_together(setup: Any) -> None:
    leaders, brokers, outcomes, make = setup
    sender = make(delivery_timeout_s=1.0)
    first = [outcomes.batch("t", 0, "x1", deadline_s=1.0), outcomes.batch("t", 0, "x2", rows=20_000, deadline_s=5)]
    sender.enqueue("t", 0, first)
    ((stream, request),) = brokers.wait_requests(1)
    short = {"e": NotEnoughReplicas.code, "m": "too few replicas"}
    stream.answer(request, [short, short])
    outcomes.wait("x1", "x2", timeout=10)
    # x2 was sent with x1 and its fate is as unknown: both fail with the last reason, not a timeout
    assert isinstance(outcomes.done["x1"], NotEnoughReplicas) and isinstance(outcomes.done["x2"], NotEnoughReplicas)
    sender.enqueue("t", 0, [outcomes.batch("t", 0, "later")])
    later = brokers.wait_requests(len(brokers.requests) + 1)[-1][1]
    assert later.batches[0].sequence == 0 and later.batches[0].producer_id != request.batches[0].producer_id


def test_a_batch_never_sent_fails_with_the_delivery_timeout(setup: Any) -> None:
    leaders, brokers, outcomes, make = setup
    sender = make(delivery_timeout_s=0.5, max_in_flight=1)
    sender.enqueue("t", 0, [outcomes.batch("t", 0, "first")])
    brokers.wait_requests(1)  # in flight, never answered (request timeout 30 s)
    sender.enqueue("t", 2, [outcomes.batch("t", 2, "waits", deadline_s=0.5)])  # same broker, stream busy
    outcomes.wait("waits", timeout=10)
    error = outcomes.done["waits"]
    assert isinstance(error, RequestTimedOut) and "before sending" in str(error)


def test_requests_to_one_broker_share_one_stream_up_to_max_in_flight(setup: Any) -> None:
    """Up to ``max_in_flight`` requests travel on one stream to a broker (pipelined: the broker
    answers them in order); the next waits for an answer."""
    leaders, brokers, outcomes, make = setup
    leaders.leaders.update({("t", p): 1 for p in range(3, 6)})
    sender = make(max_in_flight=2)
    sender.enqueue("t", 0, [outcomes.batch("t", 0, "a")])
    brokers.wait_requests(1)
    sender.enqueue("t", 2, [outcomes.batch("t", 2, "c")])
    sender.enqueue("t", 3, [outcomes.batch("t", 3, "d")])
    (stream, first), (stream_b, second) = brokers.wait_requests(2)
    assert stream_b is stream and len(brokers.streams) == 1
    time.sleep(0.2)
    assert len(brokers.requests) == 2, "a third request while two are in flight"
    stream.answer(first, ok(first))
    (_, _), (_, _), (stream_c, third) = brokers.wait_requests(3)
    assert stream_c is stream and [b.partition for b in third.batches] == [3]
    stream.answer(second, ok(second, 10))
    stream.answer(third, ok(third, 20))
    outcomes.wait("a", "c", "d")
    assert (outcomes.done["a"], outcomes.done["c"], outcomes.done["d"]) == ([0, 1], [10, 11], [20, 21])


def test_a_timed_out_request_takes_the_other_requests_of_its_stream_along(setup: Any) -> None:
    """When one request on a stream times out the stream is abandoned: the other requests on it go
    again at once on a new stream (same producer ids and sequences), not at their own deadlines."""
    leaders, brokers, outcomes, make = setup
    sender = make(max_in_flight=2, request_timeout_s=2.0)
    sender.enqueue("t", 0, [outcomes.batch("t", 0, "a")])
    brokers.wait_requests(1)
    time.sleep(1.5)  # the second request's deadline is 1.5 s after the first's
    sender.enqueue("t", 2, [outcomes.batch("t", 2, "c")])
    (stream, first), (_, second) = brokers.wait_requests(2)
    (_, _), (_, _), (stream2, again) = brokers.wait_requests(3)  # both again, when the first timed out
    assert time.monotonic() < second.deadline, "the second went again only at its own deadline"
    assert stream.closed and stream2 is not stream
    resent = {b.partition: (b.sequence, b.producer_id) for b in again.batches}
    assert resent == {
        0: (first.batches[0].sequence, first.batches[0].producer_id),
        2: (second.batches[0].sequence, second.batches[0].producer_id),
    }
    answers = {0: {"b": 30, "l": 31}, 2: {"b": 40, "l": 41}}
    stream2.answer(again, [answers[b.partition] for b in again.batches])
    outcomes.wait("a", "c")
    assert outcomes.done["c"] == [40, 41]
