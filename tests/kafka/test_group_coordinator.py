"""The classic group protocol's state machine (:mod:`sparklog.kafka.coordinator`) without sockets:
joins, generations, protocol choice, SyncGroup, heartbeats, session and rebalance timeouts,
LeaveGroup, offset commit checks, and the reaper thread's life. Blocking calls run on threads;
timeouts are short (tens to hundreds of milliseconds) and every wait is bounded."""

from __future__ import annotations

import struct
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor

import pytest

from sparklog.kafka import error_codes as ec
from sparklog.kafka.coordinator import GroupCoordinator, GroupState, JoinRequest, JoinResult, SyncResult
from waiting import wait_for

pytestmark = pytest.mark.timeout(60)

RANGE = ("range", b"range-meta")
ROUND_ROBIN = ("roundrobin", b"rr-meta")


@pytest.fixture
def coordinator() -> Iterator[GroupCoordinator]:
    # members joining together must land in one generation even on a busy machine: Kafka's own
    # default delay would do, but 300 ms (the coordinator's default) is enough
    groups = GroupCoordinator(initial_rebalance_delay_ms=300, min_session_timeout_ms=10)
    yield groups
    groups.stop()


@pytest.fixture
def pool() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(8) as executor:
        yield executor


def request(
    member_id: str = "",
    group: str = "g",
    protocols: tuple[tuple[str, bytes], ...] = (RANGE, ROUND_ROBIN),
    session_ms: int = 5_000,
    rebalance_ms: int = 2_000,
    protocol_type: str = "consumer",
    client_id: str = "client",
    instance_id: str | None = None,
) -> JoinRequest:
    return JoinRequest(
        group_id=group,
        member_id=member_id,
        protocol_type=protocol_type,
        protocols=protocols,
        session_timeout_ms=session_ms,
        rebalance_timeout_ms=rebalance_ms,
        group_instance_id=instance_id,
        client_id=client_id,
        client_host="/127.0.0.1",
    )


def member_id(coordinator: GroupCoordinator, **fields: object) -> str:
    """A member id handed out by MEMBER_ID_REQUIRED (JoinGroup v4+)."""
    first = coordinator.join(request(**fields))  # type: ignore[arg-type]
    assert first.error == ec.MEMBER_ID_REQUIRED
    return first.member_id


def joined(future: Future[JoinResult]) -> JoinResult:
    result = future.result(timeout=10)
    assert result.error == ec.NONE, result
    return result


def stable_group(
    coordinator: GroupCoordinator, pool: ThreadPoolExecutor, count: int, **fields: object
) -> list[JoinResult]:
    """``count`` members joined together, synced (each assigned its own member id): Stable."""
    ids = [member_id(coordinator, **fields) for _ in range(count)]
    results = [joined(f) for f in [pool.submit(coordinator.join, request(i, **fields)) for i in ids]]  # type: ignore[arg-type]
    leader = results[0].leader
    group = str(fields.get("group", "g"))
    syncs = [
        pool.submit(
            coordinator.sync,
            group,
            r.generation_id,
            r.member_id,
            {m.member_id: m.member_id.encode() for m in r.members} if r.member_id == leader else {},
        )
        for r in results
    ]
    for r, sync in zip(results, syncs, strict=True):
        assert sync.result(timeout=10) == SyncResult(ec.NONE, "consumer", r.protocol_name, r.member_id.encode())
    return results


def test_a_member_is_given_an_id_then_joins_leads_and_syncs_alone(coordinator: GroupCoordinator) -> None:
    first = coordinator.join(request(client_id="app"))
    assert first.error == ec.MEMBER_ID_REQUIRED and first.member_id.startswith("app-")
    assert coordinator.reaper_alive  # the pending member's deadline is watched
    started = time.monotonic()
    result = coordinator.join(request(first.member_id, client_id="app"))
    assert time.monotonic() - started >= 0.29  # a group leaving Empty waits the initial delay
    assert result.error == ec.NONE
    assert (result.generation_id, result.leader, result.protocol_name) == (1, first.member_id, "range")
    assert [(m.member_id, m.metadata) for m in result.members] == [(first.member_id, b"range-meta")]
    assert coordinator.describe("g").state is GroupState.COMPLETING_REBALANCE  # type: ignore[union-attr]
    synced = coordinator.sync("g", 1, first.member_id, {first.member_id: b"all"})
    assert synced == SyncResult(ec.NONE, "consumer", "range", b"all")
    summary = coordinator.describe("g")
    assert summary is not None and summary.state is GroupState.STABLE and summary.protocol_name == "range"
    assert [(m.member_id, m.client_id, m.metadata, m.assignment) for m in summary.members] == [
        (first.member_id, "app", b"range-meta", b"all")
    ]
    assert coordinator.sync("g", 1, first.member_id, {}) == synced  # asked again: the same
    assert coordinator.heartbeat("g", 1, first.member_id) == ec.NONE


def test_members_joining_together_form_one_generation_and_wait_for_the_leaders_assignment(
    coordinator: GroupCoordinator, pool: ThreadPoolExecutor
) -> None:
    ids = [member_id(coordinator) for _ in range(3)]
    results = [joined(f) for f in [pool.submit(coordinator.join, request(i)) for i in ids]]
    assert {r.generation_id for r in results} == {1}
    leader = results[0].leader
    assert leader == ids[0]  # the first to join leads
    for r in results:
        assert [m.member_id for m in r.members] == (ids if r.member_id == leader else [])
    followers = [pool.submit(coordinator.sync, "g", 1, i, {}) for i in ids[1:]]
    time.sleep(0.2)
    assert not any(f.done() for f in followers)  # blocked until the leader's SyncGroup
    assignments = {i: f"part-{n}".encode() for n, i in enumerate(ids)}
    assert coordinator.sync("g", 1, leader, assignments).assignment == b"part-0"
    assert [f.result(timeout=5).assignment for f in followers] == [b"part-1", b"part-2"]
    assert coordinator.describe("g").state is GroupState.STABLE  # type: ignore[union-attr]


def test_the_protocol_is_voted_and_a_tie_goes_to_the_leaders_preference(
    coordinator: GroupCoordinator, pool: ThreadPoolExecutor
) -> None:
    tie = stable_group(coordinator, pool, 2, group="tie", protocols=(RANGE, ROUND_ROBIN))
    assert tie[0].protocol_name == "range"
    a, b, c = (member_id(coordinator, group="votes") for _ in range(3))
    futures = [
        pool.submit(coordinator.join, request(a, group="votes", protocols=(RANGE, ROUND_ROBIN))),
        pool.submit(coordinator.join, request(b, group="votes", protocols=(ROUND_ROBIN, RANGE))),
        pool.submit(coordinator.join, request(c, group="votes", protocols=(ROUND_ROBIN, RANGE))),
    ]
    results = [joined(f) for f in futures]
    assert {r.protocol_name for r in results} == {"roundrobin"}  # two votes against the leader's one
    leader = next(r for r in results if r.member_id == r.leader)
    assert {m.metadata for m in leader.members} == {b"rr-meta"}


def test_a_member_without_a_common_protocol_or_of_another_type_is_refused(
    coordinator: GroupCoordinator, pool: ThreadPoolExecutor
) -> None:
    stable_group(coordinator, pool, 1, protocols=(RANGE,))
    assert coordinator.join(request(protocols=(ROUND_ROBIN,))).error == ec.INCONSISTENT_GROUP_PROTOCOL
    assert coordinator.join(request(protocol_type="connect")).error == ec.INCONSISTENT_GROUP_PROTOCOL
    assert coordinator.join(request(group="other", protocols=())).error == ec.INCONSISTENT_GROUP_PROTOCOL
    assert coordinator.join(request(session_ms=1)).error == ec.INVALID_SESSION_TIMEOUT
    assert coordinator.join(request("nobody-knows-me")).error == ec.UNKNOWN_MEMBER_ID


def test_heartbeats_report_rebalances_generations_and_unknown_members(
    coordinator: GroupCoordinator, pool: ThreadPoolExecutor
) -> None:
    first, second = stable_group(coordinator, pool, 2)
    assert coordinator.heartbeat("g", 1, first.member_id) == ec.NONE
    assert coordinator.heartbeat("g", 0, first.member_id) == ec.ILLEGAL_GENERATION
    assert coordinator.heartbeat("g", 1, "stranger") == ec.UNKNOWN_MEMBER_ID
    assert coordinator.heartbeat("nogroup", 1, first.member_id) == ec.UNKNOWN_MEMBER_ID
    third = pool.submit(coordinator.join, request(member_id(coordinator)))
    wait_for(lambda: coordinator.describe("g").state is GroupState.PREPARING_REBALANCE, 5, "a rebalance")  # type: ignore[union-attr]
    assert coordinator.heartbeat("g", 1, first.member_id) == ec.REBALANCE_IN_PROGRESS
    assert coordinator.sync("g", 1, first.member_id, {}).error == ec.REBALANCE_IN_PROGRESS
    rejoined = [pool.submit(coordinator.join, request(r.member_id)) for r in (first, second)]
    results = [joined(f) for f in [*rejoined, third]]  # everyone rejoined: no need to wait the timeout
    assert {r.generation_id for r in results} == {2}
    assert results[0].leader == first.member_id


def test_a_member_whose_session_expires_is_removed_and_the_rest_rebalance(
    coordinator: GroupCoordinator, pool: ThreadPoolExecutor
) -> None:
    alive, silent = stable_group(coordinator, pool, 2, session_ms=300)
    deadline = time.monotonic() + 10
    while coordinator.heartbeat("g", 1, alive.member_id) == ec.NONE:  # only one member heartbeats
        assert time.monotonic() < deadline, "the silent member was never removed"
        time.sleep(0.05)
    assert coordinator.heartbeat("g", 1, alive.member_id) == ec.REBALANCE_IN_PROGRESS
    assert coordinator.heartbeat("g", 1, silent.member_id) == ec.UNKNOWN_MEMBER_ID
    again = coordinator.join(request(alive.member_id, session_ms=300))
    assert (again.error, again.generation_id, [m.member_id for m in again.members]) == (
        ec.NONE,
        2,
        [alive.member_id],
    )


def test_a_join_phase_ends_at_the_rebalance_timeout_without_members_that_did_not_rejoin(
    coordinator: GroupCoordinator, pool: ThreadPoolExecutor
) -> None:
    first, lagging = stable_group(coordinator, pool, 2, rebalance_ms=400)
    started = time.monotonic()
    result = coordinator.join(request(first.member_id, rebalance_ms=400, protocols=(ROUND_ROBIN, RANGE)))
    waited = time.monotonic() - started
    assert 0.3 <= waited < 5, waited
    assert (result.generation_id, [m.member_id for m in result.members]) == (2, [first.member_id])
    assert coordinator.heartbeat("g", 1, lagging.member_id) == ec.UNKNOWN_MEMBER_ID


def test_a_leader_that_never_syncs_is_removed_and_the_waiting_followers_told_to_rejoin(
    coordinator: GroupCoordinator, pool: ThreadPoolExecutor
) -> None:
    ids = [member_id(coordinator) for _ in range(2)]
    leader, follower = [joined(f) for f in [pool.submit(coordinator.join, request(i, rebalance_ms=300)) for i in ids]]
    assert leader.member_id == leader.leader
    started = time.monotonic()
    assert coordinator.sync("g", 1, follower.member_id, {}).error == ec.REBALANCE_IN_PROGRESS
    assert 0.2 <= time.monotonic() - started < 5
    assert coordinator.heartbeat("g", 1, leader.member_id) == ec.UNKNOWN_MEMBER_ID
    assert [m.member_id for m in coordinator.describe("g").members] == [follower.member_id]  # type: ignore[union-attr]


def test_leaving_members_rebalance_the_rest_and_the_last_one_ends_the_group_and_the_reaper(
    coordinator: GroupCoordinator, pool: ThreadPoolExecutor
) -> None:
    first, second = stable_group(coordinator, pool, 2)
    assert coordinator.leave("g", [(second.member_id, None), ("stranger", None)]) == [ec.NONE, ec.UNKNOWN_MEMBER_ID]
    assert coordinator.heartbeat("g", 1, first.member_id) == ec.REBALANCE_IN_PROGRESS
    assert joined(pool.submit(coordinator.join, request(first.member_id))).generation_id == 2
    assert coordinator.reaper_alive
    assert coordinator.leave("g", [(first.member_id, None)]) == [ec.NONE]
    assert coordinator.describe("g") is None and coordinator.group_ids() == []
    wait_for(lambda: not coordinator.reaper_alive, 5, "the reaper to end with the last group")
    assert coordinator.leave("g", [(first.member_id, None)]) == [ec.UNKNOWN_MEMBER_ID]


def test_an_unanswered_member_id_lapses_after_the_session_timeout(coordinator: GroupCoordinator) -> None:
    pending = member_id(coordinator, session_ms=100)
    assert coordinator.group_ids() == ["g"]
    wait_for(lambda: coordinator.group_ids() == [], 5, "the pending member to lapse")
    assert coordinator.join(request(pending)).error == ec.UNKNOWN_MEMBER_ID


def test_a_static_member_rejoining_replaces_its_previous_incarnation(
    coordinator: GroupCoordinator, pool: ThreadPoolExecutor
) -> None:
    old = joined(pool.submit(coordinator.join, request(instance_id="box-1")))  # static: no MEMBER_ID_REQUIRED
    assert old.member_id.startswith("box-1-")
    coordinator.sync("g", old.generation_id, old.member_id, {old.member_id: b"x"})
    new = joined(pool.submit(coordinator.join, request(instance_id="box-1")))
    assert new.member_id != old.member_id and new.generation_id == 2
    assert [m.member_id for m in new.members] == [new.member_id]
    assert coordinator.heartbeat("g", 1, old.member_id) == ec.UNKNOWN_MEMBER_ID


def test_offset_commits_are_checked_against_the_group(coordinator: GroupCoordinator, pool: ThreadPoolExecutor) -> None:
    assert coordinator.validate_commit("simple", -1, "", 8) == ec.NONE  # no group management
    assert coordinator.validate_commit("simple", 3, "m", 8) == ec.ILLEGAL_GENERATION
    assert coordinator.validate_commit("simple", 3, "m", 9) == ec.GROUP_ID_NOT_FOUND
    first, _ = stable_group(coordinator, pool, 2)
    assert coordinator.validate_commit("g", 1, first.member_id, 8) == ec.NONE
    assert coordinator.validate_commit("g", 0, first.member_id, 8) == ec.ILLEGAL_GENERATION
    assert coordinator.validate_commit("g", 1, "stranger", 8) == ec.UNKNOWN_MEMBER_ID
    assert coordinator.validate_commit("g", -1, "", 8) == ec.UNKNOWN_MEMBER_ID  # the group has members
    ids = [member_id(coordinator, group="completing") for _ in range(2)]
    results = [joined(f) for f in [pool.submit(coordinator.join, request(i, group="completing")) for i in ids]]
    assert coordinator.validate_commit("completing", 1, results[0].member_id, 8) == ec.REBALANCE_IN_PROGRESS


def test_subscribed_topics_are_read_from_consumer_protocol_metadata(
    coordinator: GroupCoordinator, pool: ThreadPoolExecutor
) -> None:
    def subscription(*topics: str) -> bytes:
        body = struct.pack(">hi", 1, len(topics))
        for topic in topics:
            body += struct.pack(">h", len(topic)) + topic.encode()
        return body + struct.pack(">i", -1) + b"later versions' fields"

    ids = [member_id(coordinator) for _ in range(2)]
    futures = [
        pool.submit(coordinator.join, request(ids[0], protocols=(("range", subscription("a", "b")),))),
        pool.submit(coordinator.join, request(ids[1], protocols=(("range", subscription("c")),))),
    ]
    for f in futures:
        joined(f)
    assert coordinator.subscribed_topics("g") == frozenset({"a", "b", "c"})
    assert coordinator.subscribed_topics("none") == frozenset()
    stable_group(coordinator, pool, 1, group="opaque", protocols=(("range", b"\x00"),))
    assert coordinator.subscribed_topics("opaque") is None  # unreadable: every topic


def test_stop_answers_a_blocked_join_and_ends_the_reaper(coordinator: GroupCoordinator) -> None:
    blocked = threading.Event()
    outcome: list[JoinResult] = []
    first, second = member_id(coordinator), member_id(coordinator)
    stable = coordinator.join(request(first))
    coordinator.sync("g", stable.generation_id, first, {})

    def join() -> None:
        blocked.set()
        outcome.append(coordinator.join(request(second, rebalance_ms=60_000)))  # waits for `first`

    thread = threading.Thread(target=join, daemon=True)
    thread.start()
    blocked.wait(5)
    wait_for(lambda: coordinator.describe("g").state is GroupState.PREPARING_REBALANCE, 5, "the rebalance")  # type: ignore[union-attr]
    coordinator.stop()
    thread.join(5)
    assert outcome == [JoinResult(ec.NOT_COORDINATOR, second)]
    assert not coordinator.reaper_alive
