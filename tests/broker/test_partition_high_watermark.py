"""The leader's high watermark under random follower fetches, appends, ISR changes and
``min.insync.replicas`` changes: after every fetch it is exactly what a full recomputation gives.
(A follower fetching where it stood, at or below the high watermark, takes a short path that skips
the recomputation and wakes nobody: every idle partition takes it every replica fetch round. This
checks that the short path never leaves the high watermark behind; skipping on "where it stood"
alone fails it, when a lowered ``min.insync.replicas`` lets the watermark move.)"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from log_helpers import Clock, config
from sparklog.broker.log import PartitionLog
from sparklog.broker.partition import Partition
from sparklog.coordination.cluster import PartitionState
from sparklog.errors import OffsetOutOfRange

LEADER, REPLICAS = 1, [1, 2, 3]
NOW = 1_700_000_000_000


@pytest.mark.parametrize("seed", range(5))
def test_high_watermark_equals_a_full_recomputation_after_every_step(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    log = PartitionLog(tmp_path / "t-0", config(), clock=Clock(NOW))
    partition = Partition("t", 0, LEADER, log, lambda *_: True)
    version = 0
    partition.apply_state(PartitionState(LEADER, 0, REPLICAS), version, REPLICAS)
    positions = {2: 0, 3: 0}
    idle_fetches = 0
    for _ in range(600):
        step = rng.random()
        if step < 0.25:
            log.append({"value": [b"v"] * rng.randint(1, 3)}, leader_epoch=0)
            with partition.changed:
                partition._advance_hw()
        elif step < 0.30:  # min.insync.replicas altered (the broker sets the config; nothing recomputes)
            log.config = config(min_insync_replicas=rng.randint(1, 3))
        elif step < 0.40:  # the ISR shrinks or grows (as the controller or the leader writes it)
            version += 1
            isr = [LEADER, *sorted(rng.sample([2, 3], rng.randint(0, 2)))]
            partition.apply_state(PartitionState(LEADER, 0, isr), version, REPLICAS)
        else:  # a follower fetches: often where it stood, else somewhere up to the log end
            replica = rng.choice([2, 3])
            if rng.random() < 0.5:
                positions[replica] = rng.randint(positions[replica], log.log_end_offset)
            else:
                idle_fetches += 1
            try:
                partition.fetch_range_end(replica, positions[replica], 0)
            except OffsetOutOfRange:
                pytest.fail("a follower position past the log end")
        if step >= 0.40:  # after a fetch: nothing it could have moved is left behind
            before = partition.high_watermark
            with partition.changed:
                partition._advance_hw()
            assert partition.high_watermark == before, "a fetch left the high watermark behind"
    assert idle_fetches > 100 and partition.high_watermark > 0
