"""Idempotent producers at the partition log: repeats are answered with their first offsets, a batch
older than the remembered ones is a typed duplicate, a gap is out of order; both codes survive the wire."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparklog.broker.log import PartitionLog
from sparklog.broker.log.producer_state import BATCHES_KEPT
from sparklog.config import TopicConfig
from sparklog.errors import DuplicateSequence, OutOfOrderSequence
from sparklog.protocol import wire

PID = 42


def test_repeats_duplicates_and_gaps(tmp_path: Path) -> None:
    log = PartitionLog(tmp_path / "p", TopicConfig())
    firsts = []
    for i in range(BATCHES_KEPT + 2):
        info = log.append({"value": [b"a", b"b"]}, producer_id=PID, producer_seq=2 * i)
        firsts.append(info.base_offset)
    repeat = log.append({"value": [b"a", b"b"]}, producer_id=PID, producer_seq=2 * (BATCHES_KEPT + 1))
    assert repeat.duplicate and repeat.base_offset == firsts[-1]
    with pytest.raises(DuplicateSequence, match="older than the batches kept"):
        log.append({"value": [b"a", b"b"]}, producer_id=PID, producer_seq=0)
    with pytest.raises(OutOfOrderSequence, match="expected") as gap:
        log.append({"value": [b"a"]}, producer_id=PID, producer_seq=2 * (BATCHES_KEPT + 2) + 1)
    assert not isinstance(gap.value, DuplicateSequence)
    assert log.log_end_offset == 2 * (BATCHES_KEPT + 2)  # nothing refused was stored
    log.close()


@pytest.mark.parametrize("error", [DuplicateSequence("older"), OutOfOrderSequence("gap")])
def test_sequence_errors_keep_their_type_over_the_wire(error: OutOfOrderSequence) -> None:
    back = wire.from_flight_error(wire.to_flight_error(error))
    assert type(back) is type(error)
    assert str(error) in str(back)


def test_a_kafka_producers_sequences_wrap_from_int32_max_to_zero(tmp_path: Path) -> None:
    """After a batch ending at 2147483647 (or running past it), the next one starts at 0 (or goes
    on from where the wrap left it): Kafka's clients number records so."""
    log = PartitionLog(tmp_path / "p", TopicConfig())
    top = (1 << 31) - 1
    log.append({"value": [b"a", b"b"]}, producer_id=PID, producer_seq=top - 1)  # ends at top
    assert not log.append({"value": [b"c"]}, producer_id=PID, producer_seq=0).duplicate
    other = PID + 1
    log.append({"value": [b"a", b"b", b"c"]}, producer_id=other, producer_seq=top - 1)  # top-1, top, 0
    assert log.append({"value": [b"d"]}, producer_id=other, producer_seq=1).base_offset == 6
    with pytest.raises(DuplicateSequence):
        log.append({"value": [b"e"]}, producer_id=other, producer_seq=0)  # inside the batch across the wrap
    with pytest.raises(OutOfOrderSequence):
        log.append({"value": [b"e"]}, producer_id=other, producer_seq=5)
    assert log.log_end_offset == 7
    log.close()
