"""The leader's answer to a replica fetch (``replica_fetch_server``), over real leader logs: it
streams each partition's messages as it reads them, takes no more partitions once it has sent
something and its build budget has passed (the follower asks again at once), starts at a random
partition so that what one response leaves out comes early in another, and stops building for a
follower that went away.

(A follower catching up on 500 partitions of small batches on a loaded machine once got responses
that took longer to build than its call's deadline: it received nothing, asked again, and stayed
out of every ISR.)"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from log_helpers import Clock, config
from sparklog.broker.log import PartitionLog
from sparklog.broker.partition import Partition
from sparklog.broker.replication import replica_fetch_server
from sparklog.broker.replication.fetch_request import FetchPosition, read_frame, request
from sparklog.broker.replication.partition_changes import PartitionChanges
from sparklog.broker.replication.replica_fetch_server import ReplicaFetchResponse
from sparklog.coordination.cluster import PartitionState

LEADER, FOLLOWER = 1, 2
NOW = 1_700_000_000_000
BATCHES = 5
Led = dict[tuple[str, int], Partition]


@pytest.fixture
def led(tmp_path: Path) -> Led:
    """40 partitions led here, each with ``BATCHES`` batches of 3 records."""
    partitions = {}
    for p in range(40):
        log = PartitionLog(tmp_path / f"t-{p}", config(), clock=Clock(NOW))
        partition = Partition("t", p, LEADER, log, lambda *_: True)
        partition.apply_state(PartitionState(LEADER, 0, [LEADER, FOLLOWER]), 0, [LEADER, FOLLOWER])
        for i in range(BATCHES):
            log.append({"value": [b"%d-%d-%d" % (p, i, j) for j in range(3)]}, leader_epoch=0)
        partitions[("t", p)] = partition
    return partitions


def responder(led: Led, looked_up: list[int], cancelled: bool = False) -> ReplicaFetchResponse:
    def lookup(topic: str, p: int) -> Partition:
        looked_up.append(p)
        return led[(topic, p)]

    return ReplicaFetchResponse(lookup, PartitionChanges(), lambda: False, lambda: cancelled)


def fetch_all(led: Led) -> dict[str, object]:
    positions = [FetchPosition("t", p, 0, 0, -1) for p in range(len(led))]
    return request(FOLLOWER, positions, max_wait_ms=100, max_bytes=1 << 20)


def partitions_of(messages: Iterator[tuple[pa.RecordBatch, pa.Buffer]]) -> list[int]:
    """The partition of each message, in order."""
    return [read_frame(meta).metadata["p"] for _message, meta in messages]


def test_a_response_streams_each_partition_as_it_reads_it(led: Led) -> None:
    looked_up: list[int] = []
    messages = responder(led, looked_up).messages(fetch_all(led))
    first = partitions_of(iter([next(messages)]))
    assert looked_up == first  # the first message left before any other partition was read
    rest = partitions_of(messages)
    assert sorted(first + rest) == sorted(p for p in range(len(led)) for _ in range(BATCHES))


def test_past_its_build_budget_a_response_takes_no_more_partitions_and_starts_anywhere(
    led: Led, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(replica_fetch_server, "BUILD_BUDGET_S", 0.0)
    firsts = []
    for _ in range(60):
        sent = partitions_of(responder(led, []).messages(fetch_all(led)))
        assert len(sent) == BATCHES and len(set(sent)) == 1  # one partition's batches, then it stopped
        firsts.append(sent[0])
    assert len(set(firsts)) >= 10  # not always the same one: 60 draws from 40 partitions


def test_within_its_budget_a_response_covers_every_partition(led: Led, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(replica_fetch_server, "BUILD_BUDGET_S", 600.0)
    sent = partitions_of(responder(led, []).messages(fetch_all(led)))
    assert sorted(sent) == sorted(p for p in range(len(led)) for _ in range(BATCHES))


def test_a_response_stops_building_once_its_follower_went_away(led: Led, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(replica_fetch_server, "CANCEL_CHECK_S", 0.0)  # asks before each partition
    looked_up: list[int] = []
    sent = partitions_of(responder(led, looked_up, cancelled=True).messages(fetch_all(led)))
    assert looked_up == [] and sent == []
    # asked only every CANCEL_CHECK_S: within it, the partitions are read
    monkeypatch.setattr(replica_fetch_server, "CANCEL_CHECK_S", 600.0)
    monkeypatch.setattr(replica_fetch_server, "BUILD_BUDGET_S", 600.0)
    sent = partitions_of(responder(led, looked_up, cancelled=True).messages(fetch_all(led)))
    assert len(looked_up) == len(led) and len(sent) == len(led) * BATCHES
