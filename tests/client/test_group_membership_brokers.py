"""Consumer group membership through brokers (issue 17: clients talk only to brokers).

Real ZooKeeper, real broker processes. A consumer given ``bootstrap.servers`` and a group joins
through a broker, which hosts the member in ZooKeeper (kazoo's ``SetPartitioner`` on the broker's
session, the same party and locks as ZooKeeper-native consumers); the consumer heartbeats. Checked
on the data: members split the partitions with no overlap and together read every record exactly
once, in order per partition; a member that closes, is killed with -9, or loses the broker hosting
it gives its partitions to the others, which go on from the committed offsets; a ZooKeeper-native
and a bootstrap consumer share one group; without Read on the group, joining is denied.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

from broker_helpers import HELPER_SCRIPT, raw_action, read_jsonl, typed_error
from security_helpers import SecureSetup
from sparklog import Admin, Consumer, Producer
from sparklog.coordination.cluster import ClusterMetadata
from sparklog.errors import (
    AuthorizationFailed,
    CommitFailed,
    GroupNotEmpty,
    InvalidGroupId,
    InvalidRequest,
    SparklogError,
    UnknownMemberId,
    UnknownTopic,
)
from sparklog.protocol import wire
from waiting import finishes, wait_for

HOST = "127.0.0.1"
PARTITIONS = 6
SESSION_S = 3.0  # the members' session timeout: a dead member's partitions move after about that long

Read = tuple[str, int, int, str]  # (consumer name, partition, offset, value)


def bootstrap_of(*brokers: Any) -> str:
    return ",".join(f"{HOST}:{b.port}" for b in brokers)


def produce(connect: str, topic: str, start: int, n: int) -> dict[tuple[int, int], str]:
    """``n`` records spread over the partitions; (partition, offset) -> value."""
    out: dict[tuple[int, int], str] = {}
    with Producer(zookeeper=connect, linger_ms=2) as producer:
        futures = [
            (f"v{i}", producer.send(topic, f"v{i}".encode(), partition=i % PARTITIONS)) for i in range(start, start + n)
        ]
        for value, future in futures:
            meta = future.result(30)
            out[(meta.partition, meta.offset)] = value
    return out


def member(topic: str, group: str, servers: str, **settings: Any) -> Consumer:
    return Consumer(
        topic,
        group=group,
        bootstrap_servers=servers,
        auto_offset_reset="earliest",
        session_timeout_s=SESSION_S,
        **settings,
    )


def assignments(consumers: dict[str, Consumer]) -> dict[str, list[int]]:
    return {name: [p for _t, p in c.assignment()] for name, c in consumers.items()}


def split(consumers: dict[str, Consumer], sizes: Iterable[int] | None = None) -> dict[str, list[int]] | None:
    """The members' assignments once they cover every partition exactly once (None before)."""
    found = assignments(consumers)
    owned = sorted(p for parts in found.values() for p in parts)
    if owned != list(range(PARTITIONS)):
        return None
    if sizes is not None and sorted(len(parts) for parts in found.values()) != sorted(sizes):
        return None
    return found


def poll_round(consumers: dict[str, Consumer], reads: list[Read]) -> None:
    """Every member polls once and commits what it read."""
    for name, consumer in consumers.items():
        for record in consumer.poll(0.2):
            reads.append((name, record.partition, record.offset, record.value.decode()))
        consumer.commit()


def read_until(
    consumers: dict[str, Consumer], reads: list[Read], produced: dict[tuple[int, int], str], timeout: float = 60.0
) -> None:
    wait_for(
        lambda: poll_round(consumers, reads) or {(p, o) for _n, p, o, _v in reads} >= set(produced),
        timeout,
        "every record to be read",
        0.0,
    )


def check_runs(reads: list[Read], produced: dict[tuple[int, int], str]) -> None:
    """Every produced record read exactly once, with its value; per partition, in reading order,
    the offsets go up by one (whoever reads them): a partition is never read by two members at
    once, and a new owner starts where the previous one committed."""
    counts = Counter((p, o) for _n, p, o, _v in reads)
    assert {k: c for k, c in counts.items() if c > 1} == {}, "records read twice"
    assert set(counts) == set(produced), "records missed"
    for _n, p, o, v in reads:
        assert produced[(p, o)] == v
    for p in range(PARTITIONS):
        offsets = [o for _n, q, o, _v in reads if q == p]
        assert offsets == list(range(len(offsets))), f"partition {p} read out of order"


# ------------------------------------------------------------------------------------------ tests
@pytest.mark.slow
def test_bootstrap_members_split_partitions_and_one_closing_gives_the_other_all(
    start_broker: Any, sparklog_connect: str
) -> None:
    broker = start_broker(1)
    servers = bootstrap_of(broker)
    topic, group = f"gm-{uuid.uuid4().hex[:6]}", f"g-{uuid.uuid4().hex[:6]}"
    with Admin(bootstrap_servers=servers) as admin:
        admin.create_topic(topic, PARTITIONS)
    consumers = {"a": member(topic, group, servers)}
    try:
        consumers["b"] = member(topic, group, servers)
        # "a" gives its share up on its next call, as a Kafka member in its next poll: "b"'s
        # constructor does not wait for that (it once waited 30 s for it), it returns without
        # partitions while "a" still holds them all
        assert consumers["b"].assignment() == []
        # its poll waits for its share within the poll's timeout, and wakeup() ends that wait too:
        # "a" does not poll meanwhile, so only wakeup() can end a poll given ten minutes
        threading.Timer(0.5, consumers["b"].wakeup).start()
        assert finishes(lambda: consumers["b"].poll(600), 60, "a poll woken by wakeup()") == []
        found = wait_for(lambda: split(consumers, [3, 3]), 30, "two members with three partitions each", 0.1)
        assert set(found["a"]).isdisjoint(found["b"])
        with ClusterMetadata(sparklog_connect) as cluster:  # the broker hosts them in ZooKeeper
            party = cluster.zk.get_children(f"{cluster.layout.group_partitioner(group, [topic])}/party")
            assert len(party) == 2

        produced = produce(sparklog_connect, topic, 0, 300)
        reads: list[Read] = []
        read_until(consumers, reads, produced)
        for name, parts in found.items():  # each read only its own partitions
            assert {p for n, p, _o, _v in reads if n == name} == set(parts)

        consumers.pop("b").close()  # leaves the group: "a" gets everything at once
        wait_for(lambda: split(consumers, [PARTITIONS]), 15, "the other member to get every partition", 0.1)
        produced.update(produce(sparklog_connect, topic, 300, 120))
        read_until(consumers, reads, produced)
        check_runs(reads, produced)
    finally:
        for consumer in consumers.values():
            consumer.close()


def test_a_members_poll_waits_up_to_its_timeout_for_records(start_broker: Any, sparklog_connect: str) -> None:
    """A member's poll returns once records come, or after its whole timeout: the news of its
    assignment, which reaches the consumer after its constructor got the partitions, is taken up
    and does not end the first poll with nothing while records wait (it once did, at once)."""
    broker = start_broker(1)
    servers = bootstrap_of(broker)
    topic, group = f"gm-{uuid.uuid4().hex[:6]}", f"g-{uuid.uuid4().hex[:6]}"
    with Admin(bootstrap_servers=servers) as admin:
        admin.create_topic(topic, PARTITIONS)
    produced = produce(sparklog_connect, topic, 0, 60)
    with member(topic, group, servers) as consumer:
        assert len(consumer.assignment()) == PARTITIONS
        first = consumer.poll_batches(timeout=30.0)
        assert sum(b.num_rows for b in first) > 0, "the first poll returned nothing while records waited"
        read = sum(b.num_rows for b in first)
        while read < len(produced):
            batches = consumer.poll_batches(timeout=30.0)
            assert batches, "a poll returned nothing while records waited"
            read += sum(b.num_rows for b in batches)
        assert read == len(produced)
        began = time.monotonic()
        assert consumer.poll_batches(timeout=1.0) == []  # nothing left: it waits its timeout
        assert time.monotonic() - began >= 0.9


def last_assignment(events: list[dict[str, Any]]) -> list[int] | None:
    assigned = [e["partitions"] for e in events if e.get("event") == "assigned"]
    return assigned[-1] if assigned else None


@pytest.mark.slow
def test_a_member_killed_with_minus_9_loses_its_partitions_after_its_session_timeout(
    start_broker: Any, sparklog_connect: str, child_processes: Any, tmp_path: Path
) -> None:
    broker = start_broker(1)
    servers = bootstrap_of(broker)
    topic, group = f"gm-{uuid.uuid4().hex[:6]}", f"g-{uuid.uuid4().hex[:6]}"
    with Admin(bootstrap_servers=servers) as admin:
        admin.create_topic(topic, PARTITIONS)
    out = tmp_path / "victim.jsonl"
    victim = child_processes.spawn(
        [
            sys.executable,
            str(HELPER_SCRIPT),
            "group-member",
            f"--bootstrap-servers={servers}",
            f"--topic={topic}",
            f"--group={group}",
            f"--out={out}",
            f"--session-timeout={SESSION_S}",
            "--pause-before-commit=0.3",
        ],
        tmp_path / "victim.log",
    )
    consumers = {"a": member(topic, group, servers)}
    try:

        def halves() -> list[int] | None:
            theirs = last_assignment(read_jsonl(out))
            ours = [p for _t, p in consumers["a"].assignment()]
            if theirs is None or len(theirs) != 3 or sorted(theirs + ours) != list(range(PARTITIONS)):
                return None
            return theirs

        victim_parts = wait_for(halves, 60, "the two members to split the partitions", 0.1)
        produced = produce(sparklog_connect, topic, 0, 300)
        reads: list[Read] = []

        def victim_read_its_share() -> bool:
            poll_round(consumers, reads)
            got = {(e["p"], e["o"]) for e in read_jsonl(out) if "p" in e}
            return got >= {k for k in produced if k[0] in victim_parts}

        wait_for(victim_read_its_share, 30, "the victim to read its partitions", 0.0)
        # kill it right after it got records it has not committed (it pauses before committing)
        seen = len(read_jsonl(out))
        produced.update(produce(sparklog_connect, topic, 300, 120))

        def victim_holds_uncommitted() -> bool:
            events = read_jsonl(out)
            return len(events) > seen and "p" in events[-1]

        wait_for(victim_holds_uncommitted, 30, "the victim to read new records", 0.005)
        victim.kill()
        victim.wait(10)
        with ClusterMetadata(sparklog_connect) as cluster:
            committed = {p: o for (_t, p), o in cluster.committed_offsets(group, topic).items()}
        theirs = [(e["p"], e["o"], e["v"]) for e in read_jsonl(out) if "p" in e]
        uncommitted = {(p, o) for p, o, _v in theirs if o >= committed.get(p, 0)}
        assert uncommitted, "the victim was killed holding records it had not committed"

        started = time.monotonic()
        wait_for(lambda: split(consumers, [PARTITIONS]), 30, "the survivor to get every partition", 0.1)
        assert time.monotonic() - started > SESSION_S / 2  # its member stayed until the session timeout
        produced.update(produce(sparklog_connect, topic, 420, 60))
        kept = {(p, o) for p, o, _v in theirs} - uncommitted  # read and committed by the victim
        read_until(consumers, reads, {k: v for k, v in produced.items() if k not in kept})

        ours = Counter((p, o) for _n, p, o, _v in reads)
        victims = Counter((p, o) for p, o, _v in theirs)
        assert set(ours) | set(victims) == set(produced), "records missed"
        assert max(ours.values()) == 1 and max(victims.values()) == 1
        assert set(ours) & set(victims) == uncommitted  # read again: exactly what it had not committed
        for p in victim_parts:  # the survivor went on from the victim's last commit, in order
            offsets = [o for _n, q, o, _v in reads if q == p]
            assert offsets == list(range(committed.get(p, 0), committed.get(p, 0) + len(offsets)))
        for _n, p, o, v in reads:
            assert produced[(p, o)] == v
    finally:
        for consumer in consumers.values():
            consumer.close()


@pytest.mark.slow
def test_zookeeper_native_and_bootstrap_members_share_one_group(start_broker: Any, sparklog_connect: str) -> None:
    broker = start_broker(1)
    servers = bootstrap_of(broker)
    topic, group = f"gm-{uuid.uuid4().hex[:6]}", f"g-{uuid.uuid4().hex[:6]}"
    with Admin(bootstrap_servers=servers) as admin:
        admin.create_topic(topic, PARTITIONS)
    native = Consumer(
        topic, group=group, zookeeper=sparklog_connect, auto_offset_reset="earliest", session_timeout_s=4.0
    )
    consumers = {"native": native, "bootstrap": member(topic, group, servers)}
    try:
        wait_for(lambda: split(consumers, [3, 3]), 30, "the two members to split the partitions", 0.1)
        produced = produce(sparklog_connect, topic, 0, 300)
        reads: list[Read] = []
        read_until(consumers, reads, produced)
        check_runs(reads, produced)
    finally:
        for consumer in consumers.values():
            consumer.close()


def hosts_of_members(connect: str, group: str, topic: str) -> list[int]:
    """Which broker hosts each member of the group (the broker whose ZooKeeper session owns its
    party node), sorted."""
    with ClusterMetadata(connect) as cluster:
        sessions = {}
        for broker_id in cluster.brokers():
            _data, stat = cluster.zk.get(cluster.layout.broker(broker_id))
            sessions[stat.ephemeralOwner] = broker_id
        party = f"{cluster.layout.group_partitioner(group, [topic])}/party"
        owners = [cluster.zk.get(f"{party}/{child}")[1].ephemeralOwner for child in cluster.zk.get_children(party)]
    return sorted(sessions.get(owner, -1) for owner in owners)


@pytest.mark.slow
@pytest.mark.parametrize("loss", ["kill -9", "SIGTERM", "frozen"])
def test_members_of_a_lost_broker_rejoin_through_another_and_no_partition_is_read_twice(
    start_broker: Any, sparklog_connect: str, loss: str
) -> None:
    """The broker hosting both members is killed, stopped cleanly (it asks its members to release
    before leaving ZooKeeper), or frozen (SIGSTOP: heartbeats time out while its ZooKeeper session
    and locks live on until they expire; then it wakes up to a lost session)."""
    data_broker = start_broker(1)
    topic, group = f"gm-{uuid.uuid4().hex[:6]}", f"g-{uuid.uuid4().hex[:6]}"
    with Admin(bootstrap_servers=bootstrap_of(data_broker)) as admin:
        admin.create_topic(topic, PARTITIONS)  # every partition on broker 1 (the only one yet)
    host = start_broker(2)
    servers = bootstrap_of(host, data_broker)  # the members join through broker 2 first
    consumers = {"a": member(topic, group, servers), "b": member(topic, group, servers)}
    try:
        wait_for(lambda: split(consumers, [3, 3]), 30, "the two members to split the partitions", 0.1)
        assert hosts_of_members(sparklog_connect, group, topic) == [2, 2]
        produced = produce(sparklog_connect, topic, 0, 300)
        reads: list[Read] = []
        read_until(consumers, reads, produced)

        assert host.proc is not None
        if loss == "kill -9":
            host.kill()
        else:
            host.proc.send_signal(signal.SIGTERM if loss == "SIGTERM" else signal.SIGSTOP)
        produced.update(produce(sparklog_connect, topic, 300, 300))
        # they stop reading within a lease, rejoin through broker 1, and get the partitions once
        # broker 2's members released them, or its ZooKeeper session (and its locks) ended
        wait_for(
            lambda: poll_round(consumers, reads) or hosts_of_members(sparklog_connect, group, topic) == [1, 1],
            90,
            "both members to be hosted by broker 1",
            0.0,
        )
        if loss == "frozen":
            host.proc.send_signal(signal.SIGCONT)  # to a lost session: its partitioners fail
        read_until(consumers, reads, produced)
        wait_for(lambda: split(consumers, [3, 3]), 30, "the two members to split the partitions again", 0.1)
        produced.update(produce(sparklog_connect, topic, 600, 60))
        read_until(consumers, reads, produced)
        check_runs(reads, produced)
        if loss == "SIGTERM":
            assert host.proc.wait(30) == 0
    finally:
        for consumer in consumers.values():
            consumer.close()


def test_bad_membership_requests_get_clear_errors_and_the_broker_keeps_serving(start_broker: Any) -> None:
    broker = start_broker(1)
    loc = broker.location
    with Admin(bootstrap_servers=bootstrap_of(broker)) as admin:
        admin.create_topic("t", 2)

    def join(**changes: Any) -> dict[str, Any]:
        body = {"group": "g", "topics": ["t"], "partitions": ["t:0", "t:1"], "session_timeout_ms": 3000, **changes}
        return raw_action(loc, wire.JOIN_GROUP, body)

    cases: list[tuple[dict[str, Any], type[SparklogError], str]] = [
        ({"group": "a/b"}, InvalidGroupId, "invalid group name"),
        ({"topics": "t"}, InvalidRequest, "'topics'"),
        ({"topics": ["no-such-topic"], "partitions": ["no-such-topic:0"]}, UnknownTopic, "unknown topic"),
        ({"partitions": []}, InvalidRequest, "'partitions'"),
        ({"partitions": ["t:2"]}, InvalidRequest, "has no partition 2"),
        ({"partitions": ["u:0"]}, InvalidRequest, "one of 'topics'"),
        ({"partitions": ["t:x"]}, InvalidRequest, "partition"),
        ({"partitions": [7]}, InvalidRequest, "'<topic>:<partition>'"),
        ({"session_timeout_ms": 5}, InvalidRequest, "'session_timeout_ms'"),
        ({"session_timeout_ms": "3000"}, InvalidRequest, "64-bit integer"),
    ]
    for changes, error, fragment in cases:
        answer = typed_error(lambda changes=changes: join(**changes))
        assert isinstance(answer, error), (changes, answer)
        assert fragment in str(answer), (changes, str(answer))
    unknown = typed_error(lambda: raw_action(loc, wire.GROUP_HEARTBEAT, {"group": "g", "member_id": "nobody"}))
    assert isinstance(unknown, UnknownMemberId) and "join again" in str(unknown)
    released = typed_error(
        lambda: raw_action(loc, wire.GROUP_HEARTBEAT, {"group": "g", "member_id": "x", "released": 1})
    )
    assert isinstance(released, InvalidRequest) and "'released'" in str(released)

    joined = join()  # a real member: its heartbeats answer its state, it leaves, then it is unknown
    member_id = joined["member_id"]
    assert joined["zookeeper_session_timeout_ms"] > 0
    heartbeat = {"group": "g", "member_id": member_id, "released": True}
    answer = wait_for(
        lambda: (a := raw_action(loc, wire.GROUP_HEARTBEAT, heartbeat))["state"] == "acquired" and a,
        15,
        "the member to acquire its partitions",
        0.1,
    )
    assert answer["partitions"] == ["t:0", "t:1"]
    other_group = typed_error(lambda: raw_action(loc, wire.GROUP_HEARTBEAT, {**heartbeat, "group": "h"}))
    assert isinstance(other_group, UnknownMemberId)
    assert raw_action(loc, wire.LEAVE_GROUP, {"group": "g", "member_id": member_id}) == {}
    assert isinstance(typed_error(lambda: raw_action(loc, wire.GROUP_HEARTBEAT, heartbeat)), UnknownMemberId)
    assert raw_action(loc, wire.PING, {}) == {"broker_id": 1}  # still serving


@pytest.mark.slow
def test_joining_without_read_on_the_group_is_denied(
    sparklog_connect: str, child_processes: Any, tmp_path: Path
) -> None:
    secure = SecureSetup.create(tmp_path / "security", sparklog_connect)
    secure.extra = {"authorizer.enabled": "true"}
    broker = secure.start_broker(tmp_path, child_processes)
    servers = f"{HOST}:{broker.port}"
    with Admin(bootstrap_servers=servers, config=secure.client("admin")) as admin:
        admin.create_topic("orders", 2)
    secure.allow("topic", "orders", "Read")

    def described() -> bool:  # the broker's ACL watch has the new Read (which allows Describe)
        with Admin(bootstrap_servers=servers, config=secure.client("alice")) as alice:
            return _or_none(lambda: alice.describe_topic("orders")) is not None

    wait_for(described, 15, "alice's Read on the topic to reach the broker", 0.2)

    def join() -> Consumer:
        return member("orders", "g1", servers, config=secure.client("alice"), retry_timeout_s=5)

    with pytest.raises(AuthorizationFailed, match="User:alice may not Read group 'g1'"):
        join()
    secure.allow("group", "g1", "Read")
    consumer = wait_for(lambda: _or_none(join), 15, "the group to be allowed", 0.2)
    try:
        assert sorted(p for _t, p in consumer.assignment()) == [0, 1]
        secure.disallow("group", "g1", "Read")  # the next heartbeat is denied: the consumer stops
        with pytest.raises(AuthorizationFailed, match="User:alice may not Read group 'g1'"):
            wait_for(lambda: consumer.poll(0.2) and False, 15, "the heartbeat to be denied", 0.0)
        with pytest.raises(AuthorizationFailed):  # it stays failed: nothing is read any more
            consumer.assignment()
    finally:
        consumer.close()


def _or_none(make: Any) -> Any:
    try:
        return make()
    except AuthorizationFailed:
        return None


def _group_with_records(start_broker: Any, connect: str, prefix: str) -> tuple[str, str, str]:
    """A broker, a new topic of PARTITIONS partitions holding 10 records each, and a new group
    name: (bootstrap servers, topic, group)."""
    servers = bootstrap_of(start_broker(1))
    topic, group = f"{prefix}-{uuid.uuid4().hex[:6]}", f"g-{uuid.uuid4().hex[:6]}"
    with Admin(bootstrap_servers=servers) as admin:
        admin.create_topic(topic, PARTITIONS)
    produce(connect, topic, 0, 60)
    return servers, topic, group


@pytest.mark.slow
@pytest.mark.parametrize("how", ["zookeeper", "bootstrap"])
def test_a_member_cannot_commit_partitions_the_group_gave_to_another(
    start_broker: Any, sparklog_connect: str, how: str
) -> None:
    """Kafka's CommitFailedException: after a rebalance a member's commit of a partition it no
    longer owns is refused and the new owner's committed offset stays."""
    servers, topic, group = _group_with_records(start_broker, sparklog_connect, "gm")

    def join() -> Consumer:
        if how == "bootstrap":
            return member(topic, group, servers)
        return Consumer(topic, group=group, zookeeper=sparklog_connect, auto_offset_reset="earliest")

    first = join()
    consumers = {"first": first}
    try:
        wait_for(lambda: split(consumers, [PARTITIONS]), 30, "the first member to own every partition", 0.1)
        first.commit({(topic, p): 1 for p in range(PARTITIONS)})  # owns them all: committed
        consumers["second"] = join()
        found = wait_for(lambda: split(consumers, [3, 3]), 30, "two members with three partitions each", 0.1)
        mine, theirs = found["first"], found["second"]
        consumers["second"].commit({(topic, p): 7 for p in theirs})

        with pytest.raises(CommitFailed, match=f"{topic}-{theirs[0]}.* not assigned to this member"):
            first.commit({(topic, p): 3 for p in range(PARTITIONS)})  # a zombie's old positions
        committed = first.committed()
        assert {p: committed[(topic, p)] for p in theirs} == dict.fromkeys(theirs, 7)  # not overwritten
        assert {p: committed[(topic, p)] for p in mine} == dict.fromkeys(mine, 1)  # nothing of the refused commit
        first.commit({(topic, p): 4 for p in mine})  # its own partitions: committed
        assert {p: first.committed()[(topic, p)] for p in mine} == dict.fromkeys(mine, 4)
        first.commit()  # its positions: only its partitions
    finally:
        for consumer in consumers.values():
            consumer.close()


@pytest.mark.slow
def test_a_group_s_offsets_are_not_reset_under_its_live_members(start_broker: Any, sparklog_connect: str) -> None:
    """Kafka resets only inactive groups: while a ZooKeeper-native and a bootstrap member of the
    group read the topic, ``groups describe --members`` (ZooKeeper or bootstrap admin alike) lists
    both and ``reset_group`` / ``sparklog groups reset`` are refused (NON_EMPTY_GROUP) with the
    committed offsets left as they are; once both closed, the reset goes through."""
    servers, topic, group = _group_with_records(start_broker, sparklog_connect, "gr")
    consumers = {
        "native": Consumer(topic, group=group, zookeeper=sparklog_connect, auto_offset_reset="earliest"),
        "hosted": member(topic, group, servers),
    }
    cli = [sys.executable, "-m", "sparklog.cli.main", "--zookeeper", sparklog_connect, "groups"]
    try:
        found = wait_for(lambda: split(consumers, [3, 3]), 30, "two members with three partitions each", 0.1)
        for name, consumer in consumers.items():
            consumer.commit({(topic, p): 5 for p in found[name]})
        with Admin(sparklog_connect) as zk_admin, Admin(bootstrap_servers=servers) as boot_admin:
            members = zk_admin.group_members(group)
            assert list(members) == [(topic,)] and len(members[(topic,)]) == 2, members
            assert boot_admin.group_members(group) == members
            for admin in (zk_admin, boot_admin):
                with pytest.raises(GroupNotEmpty, match=f"{group}.* 2 live member\\(s\\) reading '{topic}'"):
                    admin.reset_group(group, topic, to_earliest=True)
            listed = subprocess.run([*cli, "describe", group, "--members"], capture_output=True, text=True, timeout=60)
            assert listed.returncode == 0, listed.stderr
            rows = [line.split() for line in listed.stdout.splitlines()[1:] if line.strip()]
            assert sorted(r[0] for r in rows) == members[(topic,)] and {r[1] for r in rows} == {topic}, listed.stdout
            reset = subprocess.run(
                [*cli, "reset", group, "--topic", topic, "--to-earliest", "--execute"],
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert reset.returncode != 0 and "live member(s)" in reset.stderr, (reset.returncode, reset.stderr)
            assert zk_admin.describe_group(group) == [
                {"topic": topic, "partition": p, "committed_offset": 5, "log_end_offset": 10, "lag": 5}
                for p in range(PARTITIONS)
            ]
            for consumer in consumers.values():
                consumer.close()
            wait_for(lambda: not zk_admin.group_members(group), 30, "the members to leave", 0.2)
            new = boot_admin.reset_group(group, topic, to_earliest=True)
            assert new == {(topic, p): 0 for p in range(PARTITIONS)}
            assert {r["partition"]: r["committed_offset"] for r in zk_admin.describe_group(group)} == dict.fromkeys(
                range(PARTITIONS), 0
            )
    finally:
        for consumer in consumers.values():
            consumer.close()
