"""Bounded broker resources in the storage engine: producer ids expire (``producer.id.expiration.ms``)
and the producer table has a size cap; ``segment.ms`` has a floor."""

from __future__ import annotations

from pathlib import Path

import pytest

from log_helpers import Clock, config, read_all
from sparklog.broker.log import PartitionLog
from sparklog.broker.log.producer_state import (
    DEFAULT_PRODUCER_ID_EXPIRATION_MS,
    ProducerStateTable,
)
from sparklog.broker.log_manager import LogManager
from sparklog.config import TopicConfig
from sparklog.errors import DuplicateSequence, InvalidConfig, OutOfOrderSequence

DAY_MS = 86_400_000


# ------------------------------------------------------------------------------------- producer ids
def test_producer_id_expiration_defaults_to_kafkas_one_day(tmp_path: Path) -> None:
    assert DEFAULT_PRODUCER_ID_EXPIRATION_MS == DAY_MS
    manager = LogManager(tmp_path)
    assert manager.producer_id_expiration_ms == DAY_MS
    manager.close()


def test_producer_ids_expire_in_the_maintenance_pass_and_a_returning_producer_is_new(tmp_path: Path) -> None:
    expiration = 60_000
    manager = LogManager(tmp_path, producer_id_expiration_ms=expiration)
    log = manager.get("t", 0, TopicConfig())
    clock = Clock(10_000_000)
    log.clock = clock
    first = log.append({"value": [b"a", b"b"]}, producer_id=7, producer_seq=0)
    log.append({"value": [b"c"]}, producer_id=7, producer_seq=2)
    clock.advance(30_000)
    log.append({"value": [b"d"]}, producer_id=8, producer_seq=0)

    clock.advance(expiration - 30_000 - 1)  # producer 7 last wrote expiration - 1 ms ago
    manager.maintain()
    assert 7 in log.producers and 8 in log.producers
    assert log.append({"value": [b"a", b"b"]}, producer_id=7, producer_seq=0).duplicate  # still known

    clock.advance(1)  # now exactly expiration ms after producer 7's last write: forgotten, 8 is not
    manager.maintain()
    assert 7 not in log.producers and 8 in log.producers
    end = log.log_end_offset
    again = log.append({"value": [b"a", b"b"]}, producer_id=7, producer_seq=0)  # a new producer
    assert not again.duplicate and again.base_offset == end != first.base_offset
    assert log.append({"value": [b"e"]}, producer_id=7, producer_seq=2).base_offset == end + 2
    with pytest.raises(OutOfOrderSequence):  # and it is tracked again from its new start
        log.append({"value": [b"f"]}, producer_id=7, producer_seq=9)

    clock.advance(expiration)
    manager.maintain()
    assert len(log.producers) == 0
    # a producer that comes back after expiry with its next sequence (not 0) is accepted too
    assert not log.append({"value": [b"g"]}, producer_id=8, producer_seq=41).duplicate
    assert [r[3] for r in read_all(log)] == [b"a", b"b", b"c", b"d", b"a", b"b", b"e", b"g"]
    manager.close()


def test_without_expiration_a_stale_producer_is_still_refused(tmp_path: Path) -> None:
    """The counterpart of the test above: within producer.id.expiration.ms sequences are enforced."""
    manager = LogManager(tmp_path, producer_id_expiration_ms=DAY_MS)
    log = manager.get("t", 0, TopicConfig())
    clock = Clock(10_000_000)
    log.clock = clock
    log.append({"value": [b"a"]}, producer_id=7, producer_seq=0)
    log.append({"value": [b"b"]}, producer_id=7, producer_seq=1)
    clock.advance(DAY_MS - 1)
    manager.maintain()
    with pytest.raises(OutOfOrderSequence):
        log.append({"value": [b"c"]}, producer_id=7, producer_seq=5)
    with pytest.raises(DuplicateSequence):
        log.append({"value": [b"a", b"x"]}, producer_id=7, producer_seq=0)
    manager.close()


def test_producer_state_rebuilt_on_open_expires_by_the_batches_max_timestamp(tmp_path: Path) -> None:
    clock = Clock(10_000_000)
    log = PartitionLog(tmp_path / "p", TopicConfig(), clock=clock)
    log.append({"value": [b"a"], "timestamp": [9_000_000]}, producer_id=1, producer_seq=0)  # older records
    log.append({"value": [b"b"]}, producer_id=2, producer_seq=0)  # stamped now: 10_000_000
    log.append({"value": [b"c"], "timestamp": [10_500_000]}, producer_id=3, producer_seq=0)  # ahead of now
    log.close()

    clock.advance(1_000)
    log = PartitionLog(tmp_path / "p", TopicConfig(), clock=clock)
    assert log.producers.last_write_ms(1) == 9_000_000
    assert log.producers.last_write_ms(2) == 10_000_000
    assert log.producers.last_write_ms(3) == 10_001_000  # never later than the clock when rebuilt
    assert log.producers.remove_expired(clock(), 1_000) == 2  # 1 and 2, not 3
    assert 3 in log.producers and len(log.producers) == 1
    assert log.producers.remove_expired(clock() + 1_000, 1_000) == 1
    log.close()


def test_truncation_keeps_the_remaining_producers_last_write(tmp_path: Path) -> None:
    clock = Clock(10_000_000)
    log = PartitionLog(tmp_path / "p", TopicConfig(), clock=clock)
    log.append({"value": [b"a"]}, producer_id=1, producer_seq=0)
    clock.advance(500)
    log.append({"value": [b"b"]}, producer_id=1, producer_seq=1)
    log.truncate_to(1)
    assert log.producers.last_write_ms(1) == 10_000_500
    log.close()


def test_the_producer_table_is_bounded_least_recently_written_first() -> None:
    table = ProducerStateTable(max_producers=3)
    for pid in range(3):
        table.record(pid, 0, 1, pid, pid, last_write_ms=100 + pid)
    table.record(0, 1, 1, 10, 10, last_write_ms=200)  # producer 0 wrote again: 1 is now the oldest
    table.record(3, 0, 1, 11, 11, last_write_ms=201)
    assert len(table) == 3
    assert 1 not in table and {0, 2, 3} <= {pid for pid in range(4) if pid in table}
    assert table.duplicate_of(1, 5, 1) is None  # evicted: a new producer
    assert table.duplicate_of(0, 1, 1) is not None


# ---------------------------------------------------------------------------------------- segment.ms
@pytest.mark.parametrize("value", [0, 1, 999])
def test_segment_ms_below_one_second_is_refused(value: int) -> None:
    with pytest.raises(InvalidConfig, match=r"segment\.ms must be >= 1000"):
        config(segment_ms=value)
    assert config(segment_ms=1000).segment_ms == 1000
