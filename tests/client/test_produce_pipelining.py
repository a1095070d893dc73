"""Produce requests pipelined on one stream per broker.

The leader's side: while an ``acks=all`` request waits for its replicas, the next request on the
same stream is read and appended (its answer still comes second). Over real partitions and logs,
with the stream's reader and writer stood in for by the test.

The producer's side: one ``BrokerProduceStream`` carries several requests at once and matches the
answers, which come in order, to them; when the broker ends the stream with an error, every request
on it fails with that error, and so does one submitted later. Against a Flight server the test runs
(a broker that answers what the test scripts)."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.flight as flight
import pytest

from log_helpers import Clock, config
from sparklog.broker.log import PartitionLog
from sparklog.broker.partition import Partition
from sparklog.broker.produce_request import ProduceRequestStream
from sparklog.client.producer.broker_stream import BrokerProduceStream, Outcome, ProduceRequest
from sparklog.client.producer.produce_batch import BatchPart, PartitionRows, ProduceBatch
from sparklog.coordination.cluster import BrokerInfo, PartitionState
from sparklog.errors import InvalidRequest
from sparklog.protocol import wire
from sparklog.protocol.record_frames import FRAMED, frame, read_frame
from sparklog.records import to_wire_batch
from waiting import wait_for

LEADER, FOLLOWER = 1, 2
NOW = 1_700_000_000_000


SCHEMA = pa.schema([("value", pa.binary())])  # the records' (what the stream's descriptor names)


class Chunk:
    """A Flight message of a produce stream: no record batch, a frame in its app metadata."""

    def __init__(self, app_metadata: pa.Buffer) -> None:
        self.data = None
        self.app_metadata = app_metadata


class ScriptedReader:
    """A produce stream's incoming frames, each released by the test."""

    schema = FRAMED  # what a produce stream declares

    def __init__(self) -> None:
        self.chunks: list[Chunk | None] = []  # None: the producer is done writing
        self.cond = threading.Condition()

    def send(self, topic: str, p: int, end: bool = True) -> None:
        meta = {"t": topic, "p": p, "pid": -1, "seq": -1, "end": end}
        batch = pa.record_batch({"value": pa.array([b"%s-%d" % (topic.encode(), p)], pa.binary())}, schema=SCHEMA)
        with self.cond:
            self.chunks.append(Chunk(frame(batch, meta)))
            self.cond.notify_all()

    def done(self) -> None:
        with self.cond:
            self.chunks.append(None)
            self.cond.notify_all()

    def read_chunk(self) -> Chunk:
        with self.cond:
            assert self.cond.wait_for(lambda: self.chunks, 30)
            chunk = self.chunks.pop(0)
        if chunk is None:
            raise StopIteration
        return chunk


class Timings:
    """The produce requests' times, as the broker's metrics get them."""

    def __init__(self) -> None:
        self.requests: list[tuple[float, float, float, float]] = []  # (local, remote, throttle, total)

    def produce_request(
        self, listener: str, local_s: float, remote_s: float, throttle_s: float, total_s: float, version: int = -1
    ) -> None:
        assert listener == "flight"
        self.requests.append((local_s, remote_s, throttle_s, total_s))


class Target:
    broker_id = LEADER
    value_schemas: dict[str, Any] = {}

    def __init__(self, partitions: dict[tuple[str, int], Partition]) -> None:
        self.partitions = partitions
        self.metrics = Timings()

    def leader_partition(self, topic: str, p: int, for_write: bool = False) -> Partition:
        return self.partitions[(topic, p)]


def led_partition(tmp_path: Path, topic: str, isr: list[int]) -> Partition:
    log = PartitionLog(tmp_path / f"{topic}-0", config(), clock=Clock(NOW))
    partition = Partition(topic, 0, LEADER, log, lambda *_: True)
    partition.apply_state(PartitionState(LEADER, 0, isr), 0, [LEADER, FOLLOWER])
    return partition


def test_the_next_request_appends_while_an_acks_all_one_waits_for_its_replicas(tmp_path: Path) -> None:
    waits = led_partition(tmp_path, "waits", [LEADER, FOLLOWER])  # its follower has not fetched yet
    alone = led_partition(tmp_path, "alone", [LEADER])
    reader, answers = ScriptedReader(), []

    class Writer:
        def write(self, buffer: pa.Buffer) -> None:
            answers.append(wire.decode(buffer.to_pybytes()))

    target = Target({("waits", 0): waits, ("alone", 0): alone})
    stream = ProduceRequestStream(target, "all", SCHEMA, lambda: False)
    serving = threading.Thread(target=stream.serve, args=(reader, Writer()))
    serving.start()
    reader.send("waits", 0)
    reader.send("alone", 0)
    wait_for(  # the second request is appended...
        lambda: alone.log.log_end_offset > 0, 10, "the second request's append (not after the first's replicas)", 0.01
    )
    assert answers == []  # ...and answered only after the first, whose follower has not fetched
    time.sleep(0.2)  # the first request waits for its follower this long at least
    waits.fetch_range_end(FOLLOWER, waits.log.log_end_offset, 0)  # the follower catches up
    reader.done()
    serving.join(10)
    assert answers == [{"r": [{"b": 0, "l": 0}]}, {"r": [{"b": 0, "l": 0}]}]
    assert waits.high_watermark == 1 and alone.high_watermark == 1
    # the metrics' breakdown: the first request's time went to waiting for its follower
    (local, remote, throttle, total), second = target.metrics.requests
    assert remote >= 0.2 and total >= local + remote and throttle == 0
    assert second[1] < 0.2  # its own replicas (none) took no time: it waited behind the first in line


class ScriptedBroker(flight.FlightServerBase):
    """Answers each produce request (a frame whose metadata says "end") with one result per batch, in order, once
    the test releases the answers; a request to partition 99 ends the stream with an InvalidRequest
    (no answer then)."""

    def __init__(self) -> None:
        super().__init__("grpc://127.0.0.1:0")
        self.release = threading.Event()  # answers wait for it
        self.streams: list[BrokerProduceStream] = []  # the test's streams to it (closed at the end)

    def do_put(self, context: Any, descriptor: Any, reader: Any, writer: Any) -> None:
        requests: queue.SimpleQueue[tuple[int, int] | None] = queue.SimpleQueue()  # (first offset, batches)
        failed = threading.Event()

        def answer() -> None:  # in order, once released, while the next requests are read
            while (request := requests.get()) is not None:
                while not self.release.wait(0.05):
                    if failed.is_set():
                        return
                first, size = request
                writer.write(pa.py_buffer(wire.encode({"r": [{"b": first + i, "l": first + i} for i in range(size)]})))

        if not reader.schema.equals(FRAMED):  # the producer's stream must carry frames
            raise wire.to_flight_error(InvalidRequest(f"a produce stream declaring {reader.schema}"))
        answers = threading.Thread(target=answer)
        answers.start()
        size, offset = 0, 0
        try:
            while True:
                try:
                    chunk = reader.read_chunk()
                except StopIteration:
                    return
                meta = read_frame(chunk.app_metadata).metadata
                if meta["p"] == 99:
                    failed.set()
                    raise wire.to_flight_error(InvalidRequest("partition 99 is refused"))
                size += 1
                if meta.get("end"):
                    requests.put((offset, size))
                    offset, size = offset + size, 0
        finally:
            requests.put(None)
            answers.join()


@pytest.fixture
def broker() -> Iterator[ScriptedBroker]:
    server = ScriptedBroker()
    yield server
    server.release.set()
    for stream in server.streams:  # a call still open would hold the server's shutdown
        stream.close()
        stream.join(5)
    server.shutdown()


def requests_to(stream: BrokerProduceStream, *partitions: int) -> list[ProduceRequest]:
    made = []
    for p in partitions:
        owner = PartitionRows(p, [slice(0, 1)], 1, lambda _rows: None)
        batch = to_wire_batch(pa.record_batch({"value": pa.array([b"v"], pa.binary())}))
        produce_batch = ProduceBatch("t", p, batch, None, time.monotonic() + 30, [BatchPart(owner, 0, 1)])
        request = ProduceRequest(stream, [produce_batch], time.monotonic() + 30)
        stream.submit(request)
        made.append(request)
    return made


def open_stream(broker: ScriptedBroker) -> tuple[BrokerProduceStream, dict[ProduceRequest, Outcome]]:
    outcomes: dict[ProduceRequest, Outcome] = {}

    def completed(request: ProduceRequest, outcome: Outcome) -> None:
        outcomes[request] = outcome

    client = flight.connect(f"grpc://127.0.0.1:{broker.port}")
    stream = BrokerProduceStream(client, BrokerInfo(1, "127.0.0.1", broker.port), pa.binary(), "all", completed)
    broker.streams.append(stream)
    return stream, outcomes


def wait_answered(outcomes: dict[ProduceRequest, Outcome], n: int) -> None:
    wait_for(lambda: len(outcomes) >= n, 10, lambda: f"{n} requests answered ({len(outcomes)} were)", 0.01)


def test_one_stream_carries_several_requests_and_matches_the_answers_in_order(broker: ScriptedBroker) -> None:
    stream, outcomes = open_stream(broker)
    first, second, third = requests_to(stream, 0, 1, 2)
    time.sleep(0.3)
    assert outcomes == {}  # all three written, none answered yet
    broker.release.set()
    wait_answered(outcomes, 3)
    assert [outcomes[r] for r in (first, second, third)] == [[{"b": i, "l": i}] for i in range(3)]
    stream.close()
    stream.join(5)
    assert not stream._thread.is_alive()


def test_a_stream_the_broker_ends_with_an_error_fails_every_request_on_it(broker: ScriptedBroker) -> None:
    stream, outcomes = open_stream(broker)
    waiting = requests_to(stream, 0, 1)  # written; their answers wait
    refused = requests_to(stream, 99)  # the broker ends the stream
    wait_answered(outcomes, 3)
    for request in waiting + refused:
        assert isinstance(outcomes[request], InvalidRequest) and "partition 99" in str(outcomes[request])
    (later,) = requests_to(stream, 3)
    wait_answered(outcomes, 4)
    assert isinstance(outcomes[later], InvalidRequest)
    stream.close()
    stream.join(5)
