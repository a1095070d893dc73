"""An idempotent Kafka producer's sequence numbers through the Produce handler into a real partition
log (no cluster): what ``sparklog fuzz --kafka`` found a hostile or long-lived producer could do."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from kafka.protocol.producer import ProduceRequest

from sparklog.broker.log import PartitionLog
from sparklog.config import TopicConfig
from sparklog.kafka.api import ListenerState, RequestContext
from sparklog.kafka.broker_access import Appended
from sparklog.kafka.handlers import produce
from sparklog.kafka.record_batch import BatchFields, encode_batch

PRODUCER_ID, EPOCH = 7, 0
INVALID_RECORD, DUPLICATE_SEQUENCE = 87, 46


class LogBroker:
    """The calls the Produce handler makes, answered by one partition log (``t-0``)."""

    broker_id = 1

    def __init__(self, log: PartitionLog) -> None:
        self.log = log

    def max_message_bytes(self, topic: str, partition: int) -> int:
        return self.log.config.max_message_bytes

    def append(
        self, topic: str, partition: int, records: pa.RecordBatch, acks: str, producer_id: int, sequence: int
    ) -> Appended:
        info = self.log.append(records, producer_id=producer_id, producer_seq=sequence)
        return Appended(info.base_offset, info.last_offset, -1, 0, 0, info.duplicate)

    def await_replicated(self, *_: Any) -> None: ...


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[LogBroker]:
    log = PartitionLog(tmp_path / "t-0", TopicConfig())
    try:
        yield LogBroker(log)
    finally:
        log.close()


def _produce(broker: LogBroker, sequence: int, records: int = 3, producer_id: int = PRODUCER_ID) -> tuple[int, int]:
    """(error code, base offset) of a batch of ``records`` from the producer at ``sequence``."""
    n = records
    batch = pa.RecordBatch.from_pydict(
        {
            "offset": pa.array(range(n), pa.int64()),
            "timestamp": pa.array([1_700_000_000_000] * n, pa.int64()),
            "key": pa.array([b"k"] * n),
            "value": pa.array([b"v%d" % (sequence + i) for i in range(n)]),
        }
    )
    data = encode_batch(batch, BatchFields(0, producer_id=producer_id, producer_epoch=EPOCH, base_sequence=sequence))
    T = ProduceRequest.TopicProduceData
    request = ProduceRequest[9](
        transactional_id=None,
        acks=1,
        timeout_ms=1000,
        topic_data=[T(name="t", partition_data=[T.PartitionProduceData(index=0, records=data)])],
    )
    ctx = RequestContext(9, 1, "test", ("127.0.0.1", 1), broker, ListenerState(()), lambda: False)  # type: ignore[arg-type]
    answer = produce.handle(request, ctx).responses[0].partition_responses[0]
    return answer.error_code, answer.base_offset


def test_a_negative_sequence_is_refused_not_stored_without_its_producer(broker: LogBroker) -> None:
    """A batch of an idempotent producer with sequence -3 was stored as one without a producer: the
    same batch sent again was stored again. Kafka refuses it (INVALID_RECORD); so does sparklog."""
    assert _produce(broker, 0) == (0, 0)
    for sequence in (-3, -(1 << 31)):
        assert _produce(broker, sequence)[0] == INVALID_RECORD
        assert _produce(broker, sequence)[0] == INVALID_RECORD
    assert broker.log.log_end_offset == 3
    assert _produce(broker, 0) == (0, 0)  # the first batch again: still recognised
    assert _produce(broker, 3) == (0, 3)
    assert _produce(broker, -1, producer_id=-1) == (0, 6)  # no producer: no sequence either


def test_sequences_go_on_from_int32_max_to_zero_as_kafka_clients_number_them(broker: LogBroker) -> None:
    """Kafka's clients number a producer's records with int32 sequences that go from 2147483647
    back to 0. The batch after the wrap used to be refused as DUPLICATE_SEQUENCE_NUMBER, forever,
    and Kafka's clients take that error for a batch already stored: after 2^31 records on one
    partition, an idempotent producer's records were dropped without a word."""
    top = (1 << 31) - 1
    assert _produce(broker, top - 4) == (0, 0)  # top-4 .. top-2
    assert _produce(broker, top - 1) == (0, 3)  # top-1, top, then 0: across the wrap
    assert _produce(broker, top - 1) == (0, 3)  # sent again: recognised
    assert _produce(broker, 4)[0] == 45  # past the next: a gap (OUT_OF_ORDER_SEQUENCE_NUMBER)
    assert _produce(broker, 1) == (0, 6)  # the next, numbered from 1
    assert _produce(broker, 1) == (0, 6)
    assert _produce(broker, 4) == (0, 9)
    assert _produce(broker, 9)[0] == 45  # a gap is still a gap
    assert broker.log.log_end_offset == 12
