"""The leader's high watermark never passes a replica that is, or is about to be, in the ISR.

A follower that caught up is added to the ISR by a compare-and-set on ZooKeeper, outside the
partition's lock; the leader keeps appending and other followers keep fetching meanwhile. If the
high watermark moved on without the joining follower during that write, an ``acks=all`` write would
be acknowledged that the new ISR member does not hold, and electing that member (a preferred
leader coming back, as in CI's kill -9 test) would lose it. Here the ZooKeeper write is the
``update_isr`` callback, and the appends and fetches that race with it run inside it, in order.
"""

from __future__ import annotations

import time
from pathlib import Path

import pyarrow as pa
import pytest

from sparklog.broker.log import PartitionLog
from sparklog.broker.partition import Partition
from sparklog.config import TopicConfig
from sparklog.coordination.cluster import PartitionState
from sparklog.errors import NotLeader

LEADER, FOLLOWER, JOINING = 1, 3, 2


def records(n: int) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict({"value": [b"v"] * n})


def test_the_high_watermark_waits_for_a_follower_while_its_return_to_the_isr_is_written(tmp_path: Path) -> None:
    log = PartitionLog(tmp_path / "p", TopicConfig.from_dict({"min.insync.replicas": 2}))
    seen_during_write: list[int] = []
    version = 0

    def update_isr(partition: Partition, isr: list[int]) -> bool:
        nonlocal version
        # while the new ISR is being written: a produce and the other follower's fetch
        info = partition.append_as_leader(records(5), "1", -1, -1, min_isr=2)
        partition.fetch_range_end(FOLLOWER, info.last_offset + 1, 0)
        seen_during_write.append(partition.high_watermark)
        version += 1
        partition.apply_state(PartitionState(LEADER, 0, isr), version, [LEADER, JOINING, FOLLOWER])
        return True

    partition = Partition("t", 0, LEADER, log, update_isr)
    partition.apply_state(PartitionState(LEADER, 0, [LEADER, FOLLOWER]), version, [LEADER, JOINING, FOLLOWER])
    partition.append_as_leader(records(10), "1", -1, -1, min_isr=2)
    partition.fetch_range_end(FOLLOWER, 10, 0)
    assert partition.high_watermark == 10

    partition.fetch_range_end(JOINING, 10, 0)  # caught up: it rejoins the ISR
    assert partition.state is not None and sorted(partition.state.isr) == [LEADER, JOINING, FOLLOWER]
    assert seen_during_write == [10], "the high watermark passed the follower joining the ISR"
    assert partition.high_watermark == 10  # the new member holds 10 records, not 15
    partition.fetch_range_end(JOINING, 15, 0)
    assert partition.high_watermark == 15
    log.close()


def test_a_failed_isr_write_stops_holding_the_high_watermark_back(tmp_path: Path) -> None:
    log = PartitionLog(tmp_path / "p", TopicConfig.from_dict({"min.insync.replicas": 2}))
    partition = Partition("t", 0, LEADER, log, lambda _p, _isr: False)  # fenced: the write never lands
    partition.apply_state(PartitionState(LEADER, 0, [LEADER, FOLLOWER]), 0, [LEADER, JOINING, FOLLOWER])
    partition.append_as_leader(records(10), "1", -1, -1, min_isr=2)
    partition.fetch_range_end(FOLLOWER, 10, 0)
    partition.fetch_range_end(JOINING, 10, 0)
    partition.append_as_leader(records(5), "1", -1, -1, min_isr=2)
    partition.fetch_range_end(FOLLOWER, 15, 0)
    assert partition.high_watermark == 15  # the joining follower is not in the ISR: not waited for
    log.close()


def test_a_write_is_not_acknowledged_by_the_next_leaders_high_watermark(tmp_path: Path) -> None:
    """CI's kill -9 test on 500 partitions: a leader appended a write, lost leadership before its
    followers had it, truncated it away as a follower and copied the new leader's records over the
    same offsets; the produce request, still waiting for that partition's acknowledgement behind
    the others it carried, then saw a high watermark (the new leader's) past the write and answered
    success for a record no replica holds."""
    log = PartitionLog(tmp_path / "p", TopicConfig.from_dict({"min.insync.replicas": 2}))
    partition = Partition("t", 0, LEADER, log, lambda _p, _isr: False)
    partition.apply_state(PartitionState(LEADER, 1, [LEADER, FOLLOWER]), 0, [LEADER, FOLLOWER])
    partition.append_as_leader(records(10), "all", -1, -1, min_isr=2, wait=False)
    partition.fetch_range_end(FOLLOWER, 10, 1)
    assert partition.high_watermark == 10
    info = partition.append_as_leader(records(1), "all", -1, -1, min_isr=2, wait=False)  # offset 10: not replicated

    # the follower becomes the leader in epoch 2 without offset 10 and writes its own offsets 10-14
    other = PartitionLog(tmp_path / "other", TopicConfig.from_dict({"min.insync.replicas": 2}))
    other.append(records(10), leader_epoch=1)
    other.append(records(5), leader_epoch=2)
    partition.apply_state(PartitionState(FOLLOWER, 2, [LEADER, FOLLOWER]), 1, [LEADER, FOLLOWER])
    log.truncate_to(10)
    for batch, header in other.read_stored(10, 1 << 20):
        partition.append_as_follower(batch, header, 15)
    partition.follower_hw(15)
    assert partition.high_watermark == 15 > info.last_offset

    with pytest.raises(NotLeader):
        partition.await_high_watermark(info.last_offset + 1, 2, info.leader_epoch, deadline=time.monotonic() + 1)
    other.close()
    log.close()


def test_a_write_is_not_acknowledged_after_leadership_was_lost_and_won_back(tmp_path: Path) -> None:
    """Leader in epoch 1, follower in epoch 2 (the write truncated away), leader again in epoch 3:
    the high watermark of epoch 3 says nothing about the write of epoch 1."""
    log = PartitionLog(tmp_path / "p", TopicConfig.from_dict({"min.insync.replicas": 2}))
    partition = Partition("t", 0, LEADER, log, lambda _p, _isr: False)
    partition.apply_state(PartitionState(LEADER, 1, [LEADER, FOLLOWER]), 0, [LEADER, FOLLOWER])
    info = partition.append_as_leader(records(3), "all", -1, -1, min_isr=2, wait=False)
    partition.apply_state(PartitionState(FOLLOWER, 2, [LEADER, FOLLOWER]), 1, [LEADER, FOLLOWER])
    log.truncate_to(0)
    partition.apply_state(PartitionState(LEADER, 3, [LEADER, FOLLOWER]), 2, [LEADER, FOLLOWER])
    partition.append_as_leader(records(5), "all", -1, -1, min_isr=2, wait=False)
    partition.fetch_range_end(FOLLOWER, 5, 3)
    assert partition.high_watermark == 5 > info.last_offset

    with pytest.raises(NotLeader):
        partition.await_high_watermark(info.last_offset + 1, 2, info.leader_epoch, deadline=time.monotonic() + 1)
    # a write of the current epoch is acknowledged as before
    partition.await_high_watermark(5, 2, 3, deadline=time.monotonic() + 1)
    log.close()
