"""A follower's fetcher for one leader broker, driven through a fake ``LeaderEndPoint`` that serves
real leader logs (no network): one request per round covers every followed partition, idle
partitions cost no data, a diverged replica truncates by leader epoch before it fetches, and a
partition the leader refuses (or sends a malformed batch for) sits out while the others go on."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa

from log_helpers import Clock, config
from sparklog.broker.log import PartitionLog
from sparklog.broker.log.batch_codec import BatchHeader
from sparklog.broker.partition import Partition
from sparklog.broker.replication.fetch_request import FetchPosition
from sparklog.broker.replication.leader_endpoint import FetchedItem
from sparklog.broker.replication.leader_fetcher import LeaderFetcher
from sparklog.coordination.cluster import PartitionState
from sparklog.errors import NotLeader, SparklogError
from waiting import wait_for

LEADER, FOLLOWER = 1, 2
NOW = 1_700_000_000_000


class FakeLeader:
    """Leader logs behind the three calls a fetcher may make; records every fetch request."""

    def __init__(self, logs: dict[tuple[str, int], PartitionLog]) -> None:
        self.logs = logs
        self.requests: list[list[FetchPosition]] = []
        self.refuse: set[tuple[str, int]] = set()
        self.corrupt: set[tuple[str, int]] = set()
        self.lock = threading.Lock()

    def fetch(self, positions: list[FetchPosition], max_wait_ms: int, max_bytes: int) -> Iterator[FetchedItem]:
        with self.lock:
            self.requests.append(list(positions))
        sent = False
        for pos in positions:
            key = (pos.topic, pos.partition)
            if key in self.refuse:
                sent = True
                yield FetchedItem(pos.topic, pos.partition, error=NotLeader("not the leader"))
                continue
            log = self.logs[key]
            for batch, header in log.read_stored(pos.offset, max_bytes, upto=log.log_end_offset):
                sent = True
                if key in self.corrupt:
                    batch = batch.set_column(
                        3, "value", pa.array([b"x"] * (batch.num_rows - 1) + [None]).cast(pa.string())
                    )
                yield FetchedItem(pos.topic, pos.partition, log.log_end_offset, log.log_start_offset, batch, header)
        if not sent:
            time.sleep(max_wait_ms / 1000 / 10)  # a long poll, shortened

    def offsets_for_leader_epoch(
        self, topic: str, partition: int, epoch: int, leader_epoch: int
    ) -> tuple[int, int, int]:
        log = self.logs[(topic, partition)]
        found, end = log.epochs.end_offset_for(epoch, log.log_end_offset)
        return found, end, log.log_start_offset

    def log_start_offset(self, topic: str, partition: int) -> int:
        return self.logs[(topic, partition)].log_start_offset


def follower(tmp_path: Path, topic: str, p: int, epoch: int = 0) -> Partition:
    log = PartitionLog(tmp_path / "follower" / f"{topic}-{p}", config(), clock=Clock(NOW))
    partition = Partition(topic, p, FOLLOWER, log, lambda *_: True)
    partition.apply_state(PartitionState(LEADER, epoch, [LEADER, FOLLOWER]), 0, [LEADER, FOLLOWER])
    return partition


def leader_log(tmp_path: Path, topic: str, p: int) -> PartitionLog:
    return PartitionLog(tmp_path / "leader" / f"{topic}-{p}", config(), clock=Clock(NOW))


def rows(n: int, tag: str) -> dict[str, list[bytes]]:
    return {"value": [f"{tag}-{i}".encode() for i in range(n)]}


def values(log: PartitionLog) -> list[bytes]:
    return [v for b in log.read(log.log_start_offset, 1 << 30) for v in b.column("value").to_pylist()]


def start(
    endpoint: FakeLeader, partitions: list[Partition], reread: list[tuple[str, int]] | None = None
) -> LeaderFetcher:
    fetcher = LeaderFetcher(
        LEADER, endpoint, lambda t, p: (reread if reread is not None else []).append((t, p)), "test"
    )
    for partition in partitions:
        fetcher.add(partition)
    fetcher.start()
    return fetcher


def test_one_request_per_round_covers_every_followed_partition(tmp_path: Path) -> None:
    n = 200
    leaders = {("t", p): leader_log(tmp_path, "t", p) for p in range(n)}
    for p in range(0, n, 7):
        leaders[("t", p)].append(rows(3, f"p{p}"), leader_epoch=0)
    endpoint = FakeLeader(leaders)
    partitions = [follower(tmp_path, "t", p) for p in range(n)]
    fetcher = start(endpoint, partitions)
    try:
        wait_for(
            lambda: all(partitions[p].log.log_end_offset == leaders[("t", p)].log_end_offset for p in range(n)),
            10,
            "every follower at its leader's log end",
            0.01,
        )
        for p in (3, 50, 199):
            leaders[("t", p)].append(rows(2, f"late{p}"), leader_epoch=0)
        wait_for(
            lambda: all(partitions[p].log.log_end_offset == 2 + (3 if p % 7 == 0 else 0) for p in (3, 50, 199)),
            10,
            "the late appends fetched",
            0.01,
        )
    finally:
        fetcher.stop()
        fetcher.join(5)
    assert all(len(request) == n for request in endpoint.requests)  # every round: all partitions, one request
    assert len(endpoint.requests) < 200  # rounds, not partitions x rounds
    for p in range(n):
        assert values(partitions[p].log) == values(leaders[("t", p)])


def test_a_diverged_replica_truncates_by_leader_epoch_before_it_fetches(tmp_path: Path) -> None:
    leader = leader_log(tmp_path, "t", 0)
    leader.append(rows(5, "e0"), leader_epoch=0)
    leader.append(rows(3, "e2"), leader_epoch=2)
    mine = follower(tmp_path, "t", 0, epoch=2)
    # the follower has epoch 0's records, then 4 records of an epoch-1 leader that lost them
    for batch, header in leader.read_stored(0, 1 << 20, upto=5):
        mine.log.append_replica(batch, header)
    diverged = PartitionLog(tmp_path / "other", config(), clock=Clock(NOW))
    diverged.append(rows(5, "e0"), leader_epoch=0)
    diverged.append(rows(4, "lost"), leader_epoch=1)
    batch, header = diverged.read_stored(5, 1 << 20)[0]
    mine.log.append_replica(batch, BatchHeader(5, 8, 4, header.max_timestamp, 1))
    assert mine.log.log_end_offset == 9
    fetcher = start(FakeLeader({("t", 0): leader}), [mine])
    try:
        wait_for(lambda: values(mine.log) == values(leader), 10, "the follower's log equal to the leader's", 0.01)
    finally:
        fetcher.stop()
        fetcher.join(5)
    assert b"lost-0" not in values(mine.log)


def test_a_refused_or_malformed_partition_sits_out_and_the_others_go_on(tmp_path: Path) -> None:
    leaders = {("t", p): leader_log(tmp_path, "t", p) for p in range(3)}
    for log in leaders.values():
        log.append(rows(4, "a"), leader_epoch=0)
    endpoint = FakeLeader(leaders)
    endpoint.refuse.add(("t", 0))
    endpoint.corrupt.add(("t", 1))
    partitions = [follower(tmp_path, "t", p) for p in range(3)]
    reread: list[tuple[str, int]] = []
    fetcher = start(endpoint, partitions, reread)
    try:
        wait_for(lambda: partitions[2].log.log_end_offset == 4, 10, "the healthy partition fetched", 0.01)
        # NotLeader: the follower re-reads the partition's state
        wait_for(lambda: ("t", 0) in reread, 10, "t-0's state re-read", 0.01)
        time.sleep(0.3)
        assert partitions[0].log.log_end_offset == 0 and partitions[1].log.log_end_offset == 0
        endpoint.refuse.clear()
        endpoint.corrupt.clear()
        wait_for(lambda: all(p.log.log_end_offset == 4 for p in partitions), 10, "every partition fetched", 0.01)
    finally:
        fetcher.stop()
        fetcher.join(5)
    assert [values(p.log) for p in partitions] == [values(log) for log in leaders.values()]


def test_a_failing_leader_does_not_stop_the_fetcher(tmp_path: Path) -> None:
    leader = leader_log(tmp_path, "t", 0)
    leader.append(rows(2, "a"), leader_epoch=0)
    endpoint = FakeLeader({("t", 0): leader})
    calls = {"n": 0}
    real = endpoint.fetch

    def flaky(positions: list[FetchPosition], max_wait_ms: int, max_bytes: int) -> Iterator[FetchedItem]:
        calls["n"] += 1
        if calls["n"] <= 3:
            raise SparklogError("leader unreachable")
        return real(positions, max_wait_ms, max_bytes)

    endpoint.fetch = flaky  # type: ignore[method-assign]
    mine = follower(tmp_path, "t", 0)
    fetcher = start(endpoint, [mine])
    try:
        wait_for(lambda: mine.log.log_end_offset == 2, 10, "the records fetched after the failures", 0.01)
    finally:
        fetcher.stop()
        fetcher.join(5)
    assert calls["n"] > 3 and np.array_equal(values(mine.log), values(leader))
