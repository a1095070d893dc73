"""Replica fetch sessions (KIP-227): after a full request opens a session, a follower lists only the
partitions whose position changed and the leader looks only at the partitions that need it (listed,
changed, or left out of an earlier response), plus all of them every ``full_look_s`` so that an
in-sync follower's idle partitions keep it in the ISR. Over real leader logs and partitions; the
follower side is the real ``FetchSessionHandler``.

(Before sessions, every round of a follower of a thousand partitions listed, parsed and looked at
every one of them, on both brokers, whether anything had changed or not.)"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from log_helpers import Clock, config
from sparklog.broker.log import PartitionLog
from sparklog.broker.log.batch_codec import BatchHeader
from sparklog.broker.partition import Partition
from sparklog.broker.replication import replica_fetch_server
from sparklog.broker.replication.fetch_request import FetchPosition, SessionRef, read_frame, request
from sparklog.broker.replication.fetch_session import FetchSessionCache
from sparklog.broker.replication.fetch_session_handler import FetchSessionHandler
from sparklog.broker.replication.partition_changes import PartitionChanges
from sparklog.broker.replication.replica_fetch_server import ReplicaFetchResponse
from sparklog.coordination.cluster import PartitionState
from sparklog.errors import FetchSessionInvalid, InvalidRequest, TooManyRequests

LEADER, FOLLOWER = 1, 2
NOW = 1_700_000_000_000
PARTITIONS = 40
TopicPartition = tuple[str, int]


class Leader:
    """``PARTITIONS`` partitions led here, each with 3 batches, followed by ``FOLLOWER`` (in the ISR)."""

    def __init__(self, tmp_path: Path, full_look_s: float = 600.0, replica_lag_ms: int = 10_000) -> None:
        self.changes = PartitionChanges()
        self.sessions = FetchSessionCache()
        self.full_look_s = full_look_s
        self.isr_writes: list[tuple[int, list[int]]] = []
        self.looked_up: list[int] = []
        self.partitions: dict[TopicPartition, Partition] = {}
        for p in range(PARTITIONS):
            log = PartitionLog(tmp_path / f"t-{p}", config(), clock=Clock(NOW))
            partition = Partition(
                "t",
                p,
                LEADER,
                log,
                self._update_isr,
                replica_lag_ms=replica_lag_ms,
                on_change=lambda key=("t", p): self.changes.notify(key),
            )
            partition.apply_state(PartitionState(LEADER, 0, [LEADER, FOLLOWER]), 0, [LEADER, FOLLOWER])
            for i in range(3):
                log.append({"value": [b"%d-%d" % (p, i)]}, leader_epoch=0)
            self.partitions[("t", p)] = partition

    def _update_isr(self, partition: Partition, isr: list[int]) -> bool:
        self.isr_writes.append((partition.partition, isr))
        return True

    def lookup(self, topic: str, p: int) -> Partition:
        self.looked_up.append(p)
        return self.partitions[(topic, p)]

    def answer(self, body: dict[str, Any]) -> list[dict[str, Any]]:
        """The metadata of each message of the answer to ``body``."""
        response = ReplicaFetchResponse(
            self.lookup, self.changes, lambda: False, lambda: False, self.sessions, self.full_look_s
        )
        return [read_frame(meta).metadata for _message, meta in response.messages(body)]

    def append(self, p: int) -> None:
        self.partitions[("t", p)].append_as_leader(
            _one_record(p), acks="1", producer_id=-1, sequence=-1, min_isr=1, wait=False
        )


def _one_record(p: int) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict({"value": pa.array([b"more-%d" % p], pa.binary())})


class Follower:
    """A follower's view: its position per partition, fetched through a real session handler."""

    def __init__(self, leader: Leader, max_wait_ms: int = 20) -> None:
        self.leader = leader
        self.max_wait_ms = max_wait_ms
        self.handler = FetchSessionHandler()
        self.offsets = dict.fromkeys(leader.partitions, 0)
        self.hws = dict.fromkeys(leader.partitions, -1)
        self.received: list[int] = []  # the partition of each batch received

    def positions(self) -> list[FetchPosition]:
        return [FetchPosition(t, p, self.offsets[(t, p)], 0, self.hws[(t, p)]) for t, p in self.offsets]

    def round(self) -> tuple[list[FetchPosition], list[dict[str, Any]]]:
        """One round: the positions the request listed, and what came back (applied)."""
        listed, session = self.handler.build(self.positions())
        answer = self.leader.answer(request(FOLLOWER, listed, self.max_wait_ms, 1 << 20, session))
        self.handler.answered()
        for meta in answer:
            key = (meta["t"], meta["p"])
            if "h" in meta:
                header, _crc = BatchHeader.decode(meta["h"])
                assert header.base_offset == self.offsets[key]  # in order, nothing skipped or repeated
                self.offsets[key] = header.last_offset + 1
                self.received.append(meta["p"])
            if "hw" in meta:
                self.hws[key] = meta["hw"]
        return listed, answer


def test_after_a_full_request_an_idle_round_lists_and_looks_at_nothing(tmp_path: Path) -> None:
    leader = Leader(tmp_path)
    follower = Follower(leader)
    listed, _answer = follower.round()
    assert len(listed) == PARTITIONS and len(set(leader.looked_up)) == PARTITIONS  # the full request
    while follower.received.count(0) < 3 or any(hw != 3 for hw in follower.hws.values()):
        follower.round()  # until it has every batch and knows every high watermark
    assert follower.offsets == dict.fromkeys(leader.partitions, 3)
    listed, answer = follower.round()  # says where it stands now (it learnt the high watermarks)
    assert len(listed) == PARTITIONS and answer == []
    leader.looked_up.clear()
    listed, answer = follower.round()
    assert listed == [] and answer == [] and leader.looked_up == []


def test_a_round_looks_only_at_the_partitions_that_changed(tmp_path: Path) -> None:
    leader = Leader(tmp_path)
    follower = Follower(leader)
    for _ in range(4):
        follower.round()
    leader.looked_up.clear()
    leader.append(7)
    leader.append(23)
    _listed, answer = follower.round()
    assert sorted(leader.looked_up) == [7, 23]
    assert sorted(m["p"] for m in answer if "h" in m) == [7, 23]
    assert follower.offsets[("t", 7)] == follower.offsets[("t", 23)] == 4
    leader.looked_up.clear()
    listed, _answer = follower.round()  # the follower moved in 7 and 23: it says so, nothing else
    assert sorted(p.partition for p in listed) == [7, 23] and sorted(set(leader.looked_up)) == [7, 23]


def test_a_waiting_round_is_answered_when_a_partition_of_its_session_changes(tmp_path: Path) -> None:
    leader = Leader(tmp_path)
    follower = Follower(leader)
    for _ in range(4):
        follower.round()
    follower.max_wait_ms = 10_000
    threading.Timer(0.2, leader.append, args=(11,)).start()
    _listed, answer = follower.round()  # waits for the append, not 10 s
    assert [m["p"] for m in answer if "h" in m] == [11]


def test_partitions_a_response_left_out_come_in_the_next_ones(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With no build budget, each response takes one partition; nothing changes on the leader, so
    only the session's record of what it left out brings the others (no full look is due)."""
    monkeypatch.setattr(replica_fetch_server, "BUILD_BUDGET_S", 0.0)
    leader = Leader(tmp_path)
    follower = Follower(leader)
    for _ in range(10 * PARTITIONS):  # (a round may carry only a high watermark)
        follower.round()
        if len(follower.received) == 3 * PARTITIONS:
            break
    assert sorted(follower.received) == sorted(p for p in range(PARTITIONS) for _ in range(3))


def test_a_forgotten_partition_is_no_longer_looked_at(tmp_path: Path) -> None:
    leader = Leader(tmp_path)
    follower = Follower(leader)
    for _ in range(4):
        follower.round()
    del follower.offsets[("t", 5)]  # the follower stops fetching it (say, it leads it now)
    listed, session = follower.handler.build(follower.positions())
    assert listed == [] and session.forget == (("t", 5),)
    leader.answer(request(FOLLOWER, listed, 20, 1 << 20, session))
    follower.handler.answered()
    leader.looked_up.clear()
    leader.append(5)
    leader.append(6)
    follower.round()
    assert leader.looked_up == [6]


def test_idle_partitions_keep_an_in_sync_follower_in_the_isr(tmp_path: Path) -> None:
    """Only the full look notes the caught-up time of partitions nothing happens to: with it every
    0.05 s, a follower fetching for 1.5 s stays in the ISR of a leader whose replica lag is 0.5 s."""
    leader = Leader(tmp_path, full_look_s=0.05, replica_lag_ms=500)
    follower = Follower(leader)
    for _ in range(4):
        follower.round()
    for _ in range(75):
        follower.round()  # 20 ms each: 1.5 s
        for partition in leader.partitions.values():
            partition.maybe_shrink_isr()
    assert leader.isr_writes == []


def test_a_session_refuses_a_request_out_of_turn_and_a_new_one_replaces_it(tmp_path: Path) -> None:
    leader = Leader(tmp_path)
    full = [FetchPosition("t", p, 0, 0, -1) for p in range(PARTITIONS)]
    leader.answer(request(FOLLOWER, full, 0, 1 << 20, SessionRef(99, 0)))
    with pytest.raises(FetchSessionInvalid, match="expects epoch 1"):
        leader.answer(request(FOLLOWER, [], 0, 1 << 20, SessionRef(99, 2)))  # skipped one
    with pytest.raises(FetchSessionInvalid, match="no fetch session 98"):
        leader.answer(request(FOLLOWER, [], 0, 1 << 20, SessionRef(98, 1)))
    with pytest.raises(FetchSessionInvalid, match="no fetch session 99 of broker 3"):
        leader.answer(request(3, [], 0, 1 << 20, SessionRef(99, 1)))  # another broker's
    leader.answer(request(FOLLOWER, [], 0, 1 << 20, SessionRef(99, 1)))
    with pytest.raises(FetchSessionInvalid, match="expects epoch 2"):
        leader.answer(request(FOLLOWER, [], 0, 1 << 20, SessionRef(99, 1)))  # the same one again
    # a leader that restarted holds no session: the follower's next request is refused
    restarted = FetchSessionCache()
    leader.sessions = restarted
    with pytest.raises(FetchSessionInvalid):
        leader.answer(request(FOLLOWER, [], 0, 1 << 20, SessionRef(99, 2)))
    leader.looked_up.clear()
    leader.answer(request(FOLLOWER, full, 0, 1 << 20, SessionRef(99, 0)))  # opened again, in full
    assert len(set(leader.looked_up)) == PARTITIONS and len(restarted) == 1


def test_a_session_in_use_refuses_a_second_request() -> None:
    cache = FetchSessionCache()
    session = cache.acquire(FOLLOWER, 7, 0)
    with pytest.raises(FetchSessionInvalid, match="in use"):
        cache.acquire(FOLLOWER, 7, 1)
    cache.release(session)
    cache.release(cache.acquire(FOLLOWER, 7, 1))


def test_malformed_session_fields_are_refused_by_name(tmp_path: Path) -> None:
    leader = Leader(tmp_path)
    body = request(FOLLOWER, [], 0, 1 << 20, SessionRef(5, 0))
    for field, value in [("session_id", -1), ("session_epoch", "1"), ("forget", {"t": "t"}), ("forget", [["t", 1]])]:
        with pytest.raises(InvalidRequest, match="session_id|forget"):
            leader.answer({**body, field: value})
    with pytest.raises(InvalidRequest, match="topic"):
        leader.answer({**body, "forget": [{"t": "../etc", "p": 0}]})


def test_the_cache_drops_idle_and_least_recently_used_sessions() -> None:
    now = [0.0]
    cache = FetchSessionCache(clock=lambda: now[0], max_sessions=4, max_per_replica=2, idle_s=100.0)
    for session_id in (1, 2):
        cache.release(cache.acquire(FOLLOWER, session_id, 0))
        now[0] += 1
    cache.release(cache.acquire(FOLLOWER, 3, 0))  # a third of one follower: its oldest (1) goes
    with pytest.raises(FetchSessionInvalid):
        cache.acquire(FOLLOWER, 1, 1)
    now[0] += 1
    cache.release(cache.acquire(FOLLOWER, 2, 1))  # 2 stays (and is now the most recently used)
    for replica in (3, 4):
        now[0] += 1
        cache.release(cache.acquire(replica, 1, 0))
    assert len(cache) == 4
    now[0] += 1
    cache.release(cache.acquire(5, 1, 0))  # full: the least recently used of all (follower's 3) goes
    with pytest.raises(FetchSessionInvalid):
        cache.acquire(FOLLOWER, 3, 1)
    now[0] += 200  # everything idle for longer than idle_s goes when a session opens
    cache.release(cache.acquire(6, 1, 0))
    assert len(cache) == 1


def test_a_cache_full_of_sessions_in_use_refuses_a_new_one() -> None:
    cache = FetchSessionCache(max_sessions=2)
    cache.acquire(3, 1, 0)
    cache.acquire(4, 1, 0)
    with pytest.raises(TooManyRequests, match="full"):
        cache.acquire(5, 1, 0)


def test_the_follower_lists_what_changed_and_opens_a_new_session_after_a_failure() -> None:
    ids = iter([11, 12])
    handler = FetchSessionHandler(new_id=lambda: next(ids))
    a, b, c = (FetchPosition("t", p, 10, 0, 5) for p in range(3))
    listed, session = handler.build([a, b])
    assert listed == [a, b] and session == SessionRef(11, 0)
    handler.answered()
    moved = FetchPosition("t", 0, 12, 0, 5)
    listed, session = handler.build([moved, b, c])
    assert listed == [moved, c] and session == SessionRef(11, 1)
    handler.answered()
    listed, session = handler.build([moved, c])
    assert listed == [] and session == SessionRef(11, 2, (("t", 1),))
    handler.reset()  # that request failed
    listed, session = handler.build([moved, c])
    assert listed == [moved, c] and session == SessionRef(12, 0)
