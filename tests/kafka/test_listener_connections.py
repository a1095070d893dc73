"""The Kafka listener's connection handling against a fake broker (no cluster): what a client that
misbehaves on the wire costs the listener, found by ``sparklog fuzz --kafka``."""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Iterator
from typing import Any

import pytest
from kafka.protocol.consumer import FetchRequest

from kafka_wire import KafkaWire
from sparklog.kafka.broker_access import PartitionOffsets, PartitionRead, TopicPartition
from sparklog.kafka.server import KafkaListener
from waiting import wait_for

pytestmark = pytest.mark.timeout(60)


class IdleBroker:
    """One partition ``t-0`` holding nothing: every fetch waits for records that never come."""

    broker_id = 1
    change_version = 0

    def read(self, topic: str, partition: int, offset: int, max_bytes: int, epoch: int) -> PartitionRead:
        return PartitionRead([], 0, 0, 0, False)

    def offsets(self, topic: str, partition: int, epoch: int) -> PartitionOffsets:
        return PartitionOffsets(0, 0, 0)

    def wait_for_change(
        self, since: int, partitions: Collection[TopicPartition], deadline: float, give_up: Callable[[], bool]
    ) -> int:
        while time.monotonic() < deadline and not give_up():
            time.sleep(0.05)
        return since


@pytest.fixture
def listener() -> Iterator[KafkaListener]:
    running = KafkaListener(IdleBroker()).start()  # type: ignore[arg-type]
    try:
        yield running
    finally:
        running.stop()


def _connections(listener: KafkaListener) -> int:
    with listener._lock:
        return len(listener._connections)


def _long_poll(max_wait_ms: int) -> Any:
    F = FetchRequest.FetchTopic
    partition = F.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20)
    return FetchRequest[12](max_wait_ms=max_wait_ms, min_bytes=1, topics=[F(topic="t", partitions=[partition])])


def test_a_long_poll_fetch_left_by_its_client_frees_its_connection(listener: KafkaListener) -> None:
    """A Fetch waiting up to a minute (max_wait_ms may say 24 days) whose client closed the
    connection used to hold its thread and its max.connections.per.ip slot until the wait ran
    out: the fuzzer saw the broker's side stay in CLOSE_WAIT. It gives up once the client left."""
    clients = [KafkaWire("127.0.0.1", listener.port) for _ in range(5)]
    for wire in clients:
        wire.send(_long_poll(60_000))
    wait_for(lambda: _connections(listener) == 5, 10, "five connections served", 0.02)
    for wire in clients:
        wire.close()
    wait_for(lambda: _connections(listener) == 0, 5, "the left long polls to end", 0.05)


def test_a_long_poll_fetch_still_waits_for_a_client_that_stays(listener: KafkaListener) -> None:
    """Giving up on a client that left must not cut short one that waits (or pipelines its next
    request behind the fetch)."""
    with KafkaWire("127.0.0.1", listener.port) as wire:
        started = time.monotonic()
        wire.send(_long_poll(1_000))
        wire.send(_long_poll(0))  # pipelined: not mistaken for the client leaving
        first = wire.receive(10)
        assert isinstance(first, bytes)
        assert time.monotonic() - started >= 0.9, "the fetch did not wait its max_wait_ms"
        assert isinstance(wire.receive(10), bytes)
