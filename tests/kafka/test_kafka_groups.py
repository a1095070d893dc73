"""Kafka's classic consumer group protocol on the Kafka listener of a live two-broker cluster,
driven by clients nobody here wrote (librdkafka through confluent-kafka, kafka-python): groups
form on the coordinator FindCoordinator names, split a topic's partitions, rebalance when a member
leaves or dies, and commit offsets that sparklog's own tools and consumers see."""

from __future__ import annotations

import json
import signal
import socket
import struct
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer as RdKafkaConsumer
from confluent_kafka import Producer as RdKafkaProducer
from confluent_kafka import TopicPartition
from kafka.protocol.admin import (
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    ListGroupsRequest,
    ListGroupsResponse,
)
from kafka.protocol.consumer import (
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetDeleteRequest,
    OffsetDeleteResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)
from kafka.protocol.metadata import FindCoordinatorRequest, FindCoordinatorResponse

from kafka import KafkaAdminClient, KafkaConsumer
from kafka import TopicPartition as KafkaPythonPartition
from sparklog import Admin
from sparklog.bench.kafka_peer import COMMAND_JVM_OPTS, kafka_classpath, run_java
from sparklog.errors import KafkaNotInstalled, UnknownGroup
from sparklog.kafka import error_codes as ec
from sparklog.local_cluster import LocalCluster
from waiting import wait_for

pytestmark = pytest.mark.timeout(300)

SESSION_TIMEOUT_MS = 6_000  # the coordinator's smallest (Kafka's group.min.session.timeout.ms)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path_factory.mktemp("kafka-groups"), brokers=2) as running:
        yield running


@pytest.fixture(scope="module")
def admin(cluster: LocalCluster) -> Iterator[Admin]:
    with Admin(bootstrap_servers=cluster.bootstrap_servers) as client:
        yield client


def new_topic(admin: Admin, partitions: int = 4) -> str:
    name = f"groups-{uuid.uuid4().hex[:8]}"
    admin.create_topic(name, partitions=partitions, replication_factor=1)
    return name


def produce(cluster: LocalCluster, topic: str, count: int, start: int = 0) -> None:
    """``count`` records spread over every partition (values ``v<n>``), all acknowledged."""
    producer = RdKafkaProducer({"bootstrap.servers": cluster.kafka_bootstrap_servers, "acks": "all"})
    failed: list[str] = []
    for n in range(start, start + count):
        producer.produce(
            topic,
            key=str(n).encode(),
            value=f"v{n}".encode(),
            on_delivery=lambda err, _msg: failed.append(str(err)) if err else None,
        )
    assert producer.flush(60) == 0 and not failed, failed


def group_consumer(cluster: LocalCluster, group: str, **settings: Any) -> RdKafkaConsumer:
    config = {
        "bootstrap.servers": cluster.kafka_bootstrap_servers,
        "group.id": group,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "session.timeout.ms": SESSION_TIMEOUT_MS,
        "heartbeat.interval.ms": 500,
    }
    config.update(settings)
    return RdKafkaConsumer(config)


class Member:
    """A librdkafka group consumer, its assignment as its rebalance callbacks report it, and what
    it read."""

    def __init__(self, consumer: RdKafkaConsumer, topic: str) -> None:
        self.consumer = consumer
        self.assigned: set[int] = set()
        self.values: list[str] = []
        consumer.subscribe([topic], on_assign=self._assign, on_revoke=self._revoke)

    def _assign(self, _consumer: RdKafkaConsumer, partitions: list[TopicPartition]) -> None:
        self.assigned = {tp.partition for tp in partitions}

    def _revoke(self, _consumer: RdKafkaConsumer, _partitions: list[TopicPartition]) -> None:
        self.assigned = set()

    def poll(self, timeout: float = 0.1) -> None:
        for message in self.consumer.consume(1000, timeout):
            assert message.error() is None, message.error()
            self.values.append(message.value().decode())


def poll_until(members: list[Member], condition: Callable[[], bool], timeout: float, what: str) -> None:
    """Poll every member (their heartbeats and rebalances run inside polls) until ``condition``."""

    def step() -> bool:
        for member in members:
            member.poll()
        return condition()

    wait_for(step, timeout, lambda: f"{what}: {[(sorted(m.assigned), len(m.values)) for m in members]}")


class Wire:
    """One raw connection to a Kafka listener: kafka-python's generated messages, one at a time."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.correlation_id = 0

    def close(self) -> None:
        self.sock.close()

    def request(self, request: Any, response_class: Any) -> Any:
        self.correlation_id += 1
        request.with_header(correlation_id=self.correlation_id, client_id="groups-test")
        self.sock.sendall(bytes(request.encode(header=True, framed=True)))
        (size,) = struct.unpack(">i", self._exactly(4))
        return response_class.decode(self._exactly(size), version=request.API_VERSION, header=True)

    def _exactly(self, size: int) -> bytes:
        out = bytearray()
        while len(out) < size:
            chunk = self.sock.recv(size - len(out))
            assert chunk, "the broker closed the connection"
            out += chunk
        return bytes(out)


# ----------------------------------------------------------------------------------------- librdkafka
def test_librdkafka_consumers_share_partitions_rebalance_and_commit_where_sparklog_sees_it(
    cluster: LocalCluster, admin: Admin
) -> None:
    """Two consumers of one group split a 4-partition topic and both read; one closes (LeaveGroup)
    and the other takes all four; the commits are what a new member starts from, what sparklog's
    Admin reports, and an offset sparklog moves is where a Kafka consumer resumes."""
    topic, group = new_topic(admin), f"rd-{uuid.uuid4().hex[:6]}"
    first, second = Member(group_consumer(cluster, group), topic), Member(group_consumer(cluster, group), topic)
    members = [first, second]
    poll_until(members, lambda: len(first.assigned) == len(second.assigned) == 2, 60, "two partitions each")
    produce(cluster, topic, 400)
    poll_until(members, lambda: len(first.values) + len(second.values) == 400, 60, "every record read")
    assert first.assigned.isdisjoint(second.assigned) and first.assigned | second.assigned == {0, 1, 2, 3}
    assert first.values and second.values
    assert sorted(first.values + second.values) == sorted(f"v{n}" for n in range(400))  # each record once
    for member in members:
        member.consumer.commit(asynchronous=False)

    second.consumer.close()  # leaves the group: the other member rebalances at once
    poll_until([first], lambda: first.assigned == {0, 1, 2, 3}, 60, "the remaining member taking every partition")
    produce(cluster, topic, 40, start=400)
    poll_until([first], lambda: len(first.values) + len(second.values) == 440, 60, "the records produced since")
    first.consumer.commit(asynchronous=False)
    committed = first.consumer.committed([TopicPartition(topic, p) for p in range(4)], timeout=30)
    ends = {(r["topic"], r["partition"]): r["log_end_offset"] for r in admin.describe_group(group)}
    assert {(tp.topic, tp.partition): tp.offset for tp in committed} == ends
    assert {r["committed_offset"] for r in admin.describe_group(group)} == set(ends.values())
    assert sum(ends.values()) == 440
    first.consumer.close()

    admin.reset_group(group, topic, to_offset=5)  # sparklog moves the group's offsets: Kafka consumers follow
    again = Member(group_consumer(cluster, group), topic)
    poll_until([again], lambda: len(again.values) >= 440 - 4 * 5, 60, "a new member resuming at the reset offsets")
    again.poll(0.5)
    assert len(again.values) == 440 - 4 * 5  # from offset 5 of each partition, not from 0 nor the end
    again.consumer.close()


def test_kafka_python_consumer_group_reads_commits_and_is_described(cluster: LocalCluster, admin: Admin) -> None:
    topic, group = new_topic(admin), f"kp-{uuid.uuid4().hex[:6]}"
    produce(cluster, topic, 100)
    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=cluster.kafka_bootstrap_servers,
        group_id=group,
        client_id="kp-client",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        session_timeout_ms=SESSION_TIMEOUT_MS,
        heartbeat_interval_ms=500,
    )
    client = KafkaAdminClient(bootstrap_servers=cluster.kafka_bootstrap_servers)
    try:
        values: list[bytes] = []
        deadline = time.monotonic() + 60
        while len(values) < 100 and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                values.extend(r.value for r in records)
        assert sorted(values) == sorted(f"v{n}".encode() for n in range(100))
        assert {tp.partition for tp in consumer.assignment()} == {0, 1, 2, 3}
        consumer.commit()
        ends = {(r["topic"], r["partition"]): r["log_end_offset"] for r in admin.describe_group(group)}
        assert {(r["topic"], r["partition"]): r["committed_offset"] for r in admin.describe_group(group)} == ends
        fetched = client.list_group_offsets(group)[group]  # OffsetFetch, every topic the group committed
        assert {(tp.topic, tp.partition): meta.offset for tp, meta in fetched.items()} == ends
        assert consumer.committed(KafkaPythonPartition(topic, 0)) == ends[(topic, 0)]

        described = client.describe_groups([group])[group]
        assert described["error"] is None
        assert (described["group_state"], described["protocol_type"], described["protocol_data"]) == (
            "Stable",
            "consumer",
            "range",
        )
        (member,) = described["members"]
        assert (member["client_id"], member["client_host"]) == ("kp-client", "/127.0.0.1")
        assert group in {g["group_id"] for g in client.list_groups()}
    finally:
        consumer.close()  # leaves the group
        client.close()
    assert admin.describe_group(group)  # leaving keeps the committed offsets


# ----------------------------------------------------------------------------------------- Kafka's Java client
def java_tool(main_class: str, args: list[str]) -> str:
    """One of Kafka's command-line tools, run to completion; its stdout."""
    return run_java(main_class, args, timeout=120, jvm_opts=COMMAND_JVM_OPTS)


def test_kafka_java_console_consumer_and_group_tool(cluster: LocalCluster, admin: Admin) -> None:
    """Kafka 4's own tools (the Java client, classic protocol): a console consumer in a group
    reads and commits; ``kafka-consumer-groups`` lists, describes and deletes the group."""
    try:
        kafka_classpath(fetch=False)
    except KafkaNotInstalled as exc:
        pytest.skip(str(exc))
    topic, group = new_topic(admin), f"java-{uuid.uuid4().hex[:6]}"
    produce(cluster, topic, 100)
    boot = ["--bootstrap-server", cluster.kafka_bootstrap_servers]
    consumed = java_tool(
        "org.apache.kafka.tools.consumer.ConsoleConsumer",
        [*boot, "--topic", topic, "--group", group, "--from-beginning", "--max-messages", "100"],
    )
    assert sorted(consumed.split()) == sorted(f"v{n}" for n in range(100))
    assert {r["lag"] for r in admin.describe_group(group)} == {0}  # committed on close
    tool = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"
    assert group in java_tool(tool, [*boot, "--list"]).split()
    rows = [line.split() for line in java_tool(tool, [*boot, "--describe", "--group", group]).splitlines()]
    described = {(r[1], int(r[2])): (int(r[3]), int(r[4])) for r in rows if len(r) > 4 and r[0] == group}
    assert described == {
        (r["topic"], r["partition"]): (r["committed_offset"], r["log_end_offset"]) for r in admin.describe_group(group)
    }
    java_tool(tool, [*boot, "--delete", "--group", group])
    assert group not in admin.list_groups()


# ----------------------------------------------------------------------------------------- session timeouts
KILLED_MEMBER = """
import json, sys
from confluent_kafka import Consumer
bootstrap, group, topic, session = sys.argv[1:5]
consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                     "session.timeout.ms": int(session), "heartbeat.interval.ms": 500})
def assigned(_consumer, partitions):
    print(json.dumps(sorted(tp.partition for tp in partitions)), flush=True)
consumer.subscribe([topic], on_assign=assigned)
while True:
    consumer.poll(0.1)
"""


def test_a_consumer_killed_without_leaving_loses_its_partitions_after_its_session_timeout(
    cluster: LocalCluster, admin: Admin, child_processes: Any, tmp_path: Path
) -> None:
    topic, group = new_topic(admin), f"kill-{uuid.uuid4().hex[:6]}"
    log = tmp_path / "killed-member.log"
    args = [cluster.kafka_bootstrap_servers, group, topic, str(SESSION_TIMEOUT_MS)]
    process = child_processes.spawn([sys.executable, "-c", KILLED_MEMBER, *args], log)

    def killed_members_assignment() -> list[int] | None:
        lines = [line for line in log.read_text().splitlines() if line.startswith("[")]
        return json.loads(lines[-1]) if lines else None

    wait_for(
        lambda: killed_members_assignment() == [0, 1, 2, 3], 60, lambda: f"the subprocess member: {log.read_text()}"
    )
    survivor = Member(group_consumer(cluster, group), topic)
    poll_until(
        [survivor],
        lambda: len(survivor.assigned) == 2 and len(killed_members_assignment() or []) == 2,
        60,
        "the partitions split between the two members",
    )
    process.send_signal(signal.SIGKILL)  # no LeaveGroup: only its missing heartbeats tell
    process.wait(10)
    killed_at = time.monotonic()
    poll_until([survivor], lambda: survivor.assigned == {0, 1, 2, 3}, 60, "the survivor taking every partition")
    waited = time.monotonic() - killed_at
    assert waited > SESSION_TIMEOUT_MS / 1000 - 2, f"taken over after {waited:.1f} s: before the session timed out"
    survivor.consumer.close()


# ----------------------------------------------------------------------------------------- coordinators
def test_find_coordinator_names_one_broker_and_the_other_refuses_the_group(cluster: LocalCluster, admin: Admin) -> None:
    topic, group = new_topic(admin, partitions=1), f"wire-{uuid.uuid4().hex[:6]}"
    ports = {broker_id: broker.kafka_port for broker_id, broker in cluster.brokers.items()}
    wires = {broker_id: Wire(port) for broker_id, port in ports.items()}  # type: ignore[arg-type]
    try:
        answers = set()
        for wire in wires.values():
            old = wire.request(FindCoordinatorRequest[3](key=group, key_type=0), FindCoordinatorResponse)
            assert old.error_code == ec.NONE
            answers.add((old.node_id, old.host, old.port))
            batch = wire.request(
                FindCoordinatorRequest[4](key_type=0, coordinator_keys=[group, "other"]), FindCoordinatorResponse
            )
            assert [c.key for c in batch.coordinators] == [group, "other"]
            assert (batch.coordinators[0].node_id, batch.coordinators[0].port) == (old.node_id, old.port)
            txn = wire.request(FindCoordinatorRequest[3](key="tx", key_type=1), FindCoordinatorResponse)
            assert txn.error_code == ec.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        ((coordinator_id, host, port),) = answers  # both brokers name the same one
        assert ports[coordinator_id] == port and host == "127.0.0.1"
        at = wires[coordinator_id]
        elsewhere = wires[next(b for b in wires if b != coordinator_id)]

        # the coordinator: MEMBER_ID_REQUIRED, then a generation of one
        protocol = JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"\x00\x00\x00\x00\x00\x00")
        join = {"group_id": group, "session_timeout_ms": SESSION_TIMEOUT_MS, "rebalance_timeout_ms": 10_000}
        join |= {"protocol_type": "consumer", "protocols": [protocol], "group_instance_id": None, "reason": None}
        first = at.request(JoinGroupRequest[9](member_id="", **join), JoinGroupResponse)
        assert first.error_code == ec.MEMBER_ID_REQUIRED and first.member_id.startswith("groups-test-")
        joined = at.request(JoinGroupRequest[9](member_id=first.member_id, **join), JoinGroupResponse)
        assert (joined.error_code, joined.generation_id, joined.leader) == (ec.NONE, 1, first.member_id)
        assert joined.protocol_name == "range" and [m.member_id for m in joined.members] == [first.member_id]
        sync = SyncGroupRequest[5](
            group_id=group,
            generation_id=1,
            member_id=first.member_id,
            group_instance_id=None,
            protocol_type="consumer",
            protocol_name="range",
            assignments=[SyncGroupRequest.SyncGroupRequestAssignment(member_id=first.member_id, assignment=b"mine")],
        )
        synced = at.request(sync, SyncGroupResponse)
        assert (synced.error_code, synced.assignment) == (ec.NONE, b"mine")
        beat = HeartbeatRequest[4](group_id=group, generation_id=1, member_id=first.member_id, group_instance_id=None)
        assert at.request(beat, HeartbeatResponse).error_code == ec.NONE
        stale = HeartbeatRequest[4](group_id=group, generation_id=0, member_id=first.member_id, group_instance_id=None)
        assert at.request(stale, HeartbeatResponse).error_code == ec.ILLEGAL_GENERATION

        commit = OffsetCommitRequest[8](
            group_id=group,
            generation_id_or_member_epoch=1,
            member_id=first.member_id,
            group_instance_id=None,
            topics=[
                OffsetCommitRequest.OffsetCommitRequestTopic(
                    name=topic,
                    partitions=[
                        OffsetCommitRequest.OffsetCommitRequestTopic.OffsetCommitRequestPartition(
                            partition_index=p, committed_offset=0, committed_leader_epoch=-1, committed_metadata="m"
                        )
                        for p in (0, 7)  # partition 7 does not exist
                    ],
                )
            ],
        )
        committed = at.request(commit, OffsetCommitResponse)
        assert [p.error_code for p in committed.topics[0].partitions] == [ec.NONE, ec.UNKNOWN_TOPIC_OR_PARTITION]
        fetch = OffsetFetchRequest[8](
            groups=[
                OffsetFetchRequest.OffsetFetchRequestGroup(
                    group_id=group,
                    topics=[
                        OffsetFetchRequest.OffsetFetchRequestGroup.OffsetFetchRequestTopics(
                            name=topic, partition_indexes=[0, 3]
                        )
                    ],
                ),
                OffsetFetchRequest.OffsetFetchRequestGroup(group_id=group, topics=None),
            ],
            require_stable=False,
        )
        fetched = at.request(fetch, OffsetFetchResponse)
        named, every = fetched.groups
        assert [(p.partition_index, p.committed_offset, p.metadata) for p in named.topics[0].partitions] == [
            (0, 0, ""),
            (3, -1, ""),  # no commit: -1
        ]
        assert [(t.name, [p.partition_index for p in t.partitions]) for t in every.topics] == [(topic, [0])]
        assert admin.describe_group(group)[0]["committed_offset"] == 0

        (described,) = at.request(DescribeGroupsRequest[5](groups=[group]), DescribeGroupsResponse).groups
        assert (described.group_state, described.protocol_data) == ("Stable", "range")
        assert [(m.member_id, m.member_assignment) for m in described.members] == [(first.member_id, b"mine")]
        listed = at.request(ListGroupsRequest[4](states_filter=["stable"]), ListGroupsResponse)
        assert [(g.group_id, g.group_state, g.protocol_type) for g in listed.groups] == [(group, "Stable", "consumer")]

        # the other broker: NOT_COORDINATOR for every group request
        assert elsewhere.request(JoinGroupRequest[9](member_id="", **join), JoinGroupResponse).error_code == (
            ec.NOT_COORDINATOR
        )
        assert elsewhere.request(beat, HeartbeatResponse).error_code == ec.NOT_COORDINATOR
        assert elsewhere.request(sync, SyncGroupResponse).error_code == ec.NOT_COORDINATOR
        refused = elsewhere.request(commit, OffsetCommitResponse)
        assert {p.error_code for p in refused.topics[0].partitions} == {ec.NOT_COORDINATOR}
        assert {g.error_code for g in elsewhere.request(fetch, OffsetFetchResponse).groups} == {ec.NOT_COORDINATOR}
        (other,) = elsewhere.request(DescribeGroupsRequest[5](groups=[group]), DescribeGroupsResponse).groups
        assert other.error_code == ec.NOT_COORDINATOR
        assert group not in {g.group_id for g in elsewhere.request(ListGroupsRequest[4](), ListGroupsResponse).groups}

        leave = LeaveGroupRequest[5](
            group_id=group,
            members=[LeaveGroupRequest.MemberIdentity(member_id=first.member_id, group_instance_id=None, reason=None)],
        )
        assert elsewhere.request(leave, LeaveGroupResponse).error_code == ec.NOT_COORDINATOR
        left = at.request(leave, LeaveGroupResponse)
        assert (left.error_code, [m.error_code for m in left.members]) == (ec.NONE, [ec.NONE])
        (empty,) = at.request(DescribeGroupsRequest[5](groups=[group]), DescribeGroupsResponse).groups
        assert (empty.group_state, list(empty.members)) == ("Empty", [])  # its offsets remain

        # offsets and groups deleted
        Delete = OffsetDeleteRequest.OffsetDeleteRequestTopic
        offset_delete = OffsetDeleteRequest[0](
            group_id=group,
            topics=[Delete(name=topic, partitions=[Delete.OffsetDeleteRequestPartition(partition_index=0)])],
        )
        assert elsewhere.request(offset_delete, OffsetDeleteResponse).error_code == ec.NOT_COORDINATOR
        deleted = at.request(offset_delete, OffsetDeleteResponse)
        assert (deleted.error_code, deleted.topics[0].partitions[0].error_code) == (ec.NONE, ec.NONE)
        with pytest.raises(UnknownGroup):  # no committed offsets left
            admin.describe_group(group)
        assert at.request(fetch, OffsetFetchResponse).groups[0].topics[0].partitions[0].committed_offset == -1
        stale_commit = at.request(commit, OffsetCommitResponse)  # generation 1 is over
        assert {p.error_code for p in stale_commit.topics[0].partitions} == {ec.ILLEGAL_GENERATION}
        commit.generation_id_or_member_epoch, commit.member_id = -1, ""  # from outside group management
        assert {p.error_code for p in at.request(commit, OffsetCommitResponse).topics[0].partitions} == {
            ec.NONE,
            ec.UNKNOWN_TOPIC_OR_PARTITION,
        }
        assert admin.describe_group(group)[0]["committed_offset"] == 0
        delete = DeleteGroupsRequest[2](groups_names=[group])
        assert [r.error_code for r in elsewhere.request(delete, DeleteGroupsResponse).results] == [ec.NOT_COORDINATOR]
        assert [r.error_code for r in at.request(delete, DeleteGroupsResponse).results] == [ec.NONE]
        assert group not in admin.list_groups()
        assert [r.error_code for r in at.request(delete, DeleteGroupsResponse).results] == [ec.GROUP_ID_NOT_FOUND]
        (gone,) = at.request(DescribeGroupsRequest[6](groups=[group]), DescribeGroupsResponse).groups
        assert (gone.error_code, gone.group_state) == (ec.GROUP_ID_NOT_FOUND, "Dead")
        (gone,) = at.request(DescribeGroupsRequest[5](groups=[group]), DescribeGroupsResponse).groups
        assert (gone.error_code, gone.group_state) == (ec.NONE, "Dead")
    finally:
        for wire in wires.values():
            wire.close()
