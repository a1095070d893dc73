"""ZooKeeper stopped and started again (same port, same data dir) under a running consumer group.

A user restarting ZooKeeper for a few seconds, less than the clients' session timeouts, must not
lose a consumer: the sessions survive (ZooKeeper keeps them in its data dir and gives each its
whole timeout again once it is back), so the group's members, their locks and the brokers'
registrations are all still there. What a member may do is pause while ZooKeeper is away (its
group cannot tell it whether it still owns its partitions), then go on.

The module runs its own ZooKeeper (the session-wide one is shared by every other test and must
never restart) and two broker processes, shared by its tests. Each test makes a topic of six
partitions (two replicas each) and a group of three member processes
(``broker_helpers.py group-member``: poll, write every record as a JSON line, commit), either
ZooKeeper-native members or members hosted by brokers (``bootstrap.servers``). A producer thread
sends numbered records all along; ZooKeeper is stopped, left down for a few seconds, and started
again while it does. Checked on the data:

- every record acknowledged is consumed by the group, at least once, with its value;
- no member exits or reports an error (a traceback in its output) while this happens, and each
  ends cleanly on SIGTERM;
- no broker thread dies ("Exception in thread" in a broker's output) and the brokers still serve
  the group: a fourth member joins through a broker afterwards, gets a share, and leaves.

How long consumption stalls around the restart is measured and printed (``-s``), never asserted.

Besides, a ZooKeeper-native client's view of partition leaders follows them again after the
restart (kazoo drops every watch with its connection), and a ZooKeeper-native member whose session
did expire (ZooKeeper away for longer) joins its group again rather than failing its polls.
"""

from __future__ import annotations

import json
import queue
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient

from broker_helpers import HELPER_SCRIPT, BrokerProcess, ProcessGroup, read_jsonl
from sparklog import Admin, Consumer, Producer
from sparklog.client.zookeeper_view import ZooKeeperView
from sparklog.coordination.cluster import ClusterMetadata, PartitionState
from sparklog.coordination.ports import free_port
from sparklog.coordination.zookeeper_server import EmbeddedZooKeeper
from sparklog.errors import CommitFailed, SparklogError
from waiting import wait_for

HOST = "127.0.0.1"
PARTITIONS = 6
MEMBERS = 3
SESSION_S = 10.0  # the members' session timeout (ZooKeeper's, or at the broker hosting them)
ZOOKEEPER_DOWN_S = 3.0  # from the stop's end to the start; the start itself adds the JVM's startup
RECORDS_PER_TICK = PARTITIONS  # one record per partition ...
TICK_S = 0.1  # ... every tenth of a second


@dataclass
class RestartableCluster:
    """A ZooKeeper of this module's own and two brokers registered in it."""

    zookeeper: EmbeddedZooKeeper
    connect: str
    brokers: list[BrokerProcess]

    @property
    def servers(self) -> str:
        return ",".join(f"{HOST}:{b.port}" for b in self.brokers)

    def log_paths(self) -> list[Path]:
        return [b.log_path for b in self.brokers] + [self.zookeeper.log_path]


@pytest.fixture(scope="module")
def restartable(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RestartableCluster]:
    base = tmp_path_factory.mktemp("zookeeper-restart")
    zookeeper = EmbeddedZooKeeper(base / "zookeeper", port=free_port())
    zookeeper.start(timeout=60.0)
    processes = ProcessGroup()
    connect = f"{zookeeper.connect_string}/sparklog"
    brokers = [BrokerProcess(i, base / f"broker-{i}", connect, processes) for i in (1, 2)]
    try:
        for broker in brokers:
            broker.start()
        yield RestartableCluster(zookeeper, connect, brokers)
        for broker in brokers:
            broker.stop_or_kill()
    finally:
        processes.close()
        zookeeper.stop()


def restart(zookeeper: EmbeddedZooKeeper) -> tuple[float, float]:
    """Stop ZooKeeper, leave it down ``ZOOKEEPER_DOWN_S``, start it again on the same port and data
    dir; (when it stopped, when it served again), wall-clock."""
    stopped = time.time()
    zookeeper.stop()
    time.sleep(ZOOKEEPER_DOWN_S)
    zookeeper.start(timeout=60.0)
    return stopped, time.time()


class PacedProducer:
    """Sends one numbered record to each partition every ``TICK_S`` until stopped, without waiting
    for acknowledgments (so it keeps sending while ZooKeeper is away); a second thread collects
    them. ``acknowledged``: (partition, offset) -> (value, send time); ``failed``: records whose
    send failed (never acknowledged: nothing to consume)."""

    def __init__(self, servers: str, topic: str) -> None:
        self.producer = Producer(bootstrap_servers=servers, acks="all", linger_ms=2)
        self.topic = topic
        self.acknowledged: dict[tuple[int, int], tuple[str, float]] = {}
        self.ack_times: list[float] = []
        self.failed: list[tuple[str, str]] = []
        self._sent: queue.SimpleQueue[tuple[str, Any, float] | None] = queue.SimpleQueue()
        self._stop = threading.Event()
        self._sender = threading.Thread(target=self._send, name="paced-producer", daemon=True)
        self._collector = threading.Thread(target=self._collect, name="paced-producer-acks", daemon=True)

    def start(self) -> None:
        self._sender.start()
        self._collector.start()

    def _send(self) -> None:
        seq = 0
        try:
            while not self._stop.is_set():
                now = time.time()
                for _ in range(RECORDS_PER_TICK):
                    value = f"r{seq}"
                    future = self.producer.send(self.topic, value.encode(), partition=seq % PARTITIONS)
                    self._sent.put((value, future, now))
                    seq += 1
                self._stop.wait(TICK_S)
        finally:
            self._sent.put(None)

    def _collect(self) -> None:
        while (item := self._sent.get()) is not None:
            value, future, sent = item
            try:
                meta = future.result(120)
            except (SparklogError, TimeoutError) as exc:
                self.failed.append((value, repr(exc)))
                continue
            self.acknowledged[(meta.partition, meta.offset)] = (value, sent)
            self.ack_times.append(time.time())

    def stop(self) -> None:
        self._stop.set()
        self._sender.join(10)
        self._collector.join(180)
        self.producer.close()


def spawn_member(mode: str, cluster: RestartableCluster, topic: str, group: str, out: Path, processes: Any) -> Any:
    address = f"--zookeeper={cluster.connect}" if mode == "zookeeper" else f"--bootstrap-servers={cluster.servers}"
    args = [
        sys.executable,
        str(HELPER_SCRIPT),
        "group-member",
        address,
        f"--topic={topic}",
        f"--group={group}",
        f"--out={out}",
        f"--session-timeout={SESSION_S}",
    ]
    return processes.spawn(args, out.with_suffix(".log"))


def last_assignment(events: list[dict[str, Any]]) -> list[int] | None:
    assigned = [e["partitions"] for e in events if e.get("event") == "assigned"]
    return assigned[-1] if assigned else None


def consumed(outs: list[Path]) -> list[dict[str, Any]]:
    return [e for out in outs for e in read_jsonl(out) if "p" in e]


def longest_gap(times: list[float], since: float) -> tuple[float, float]:
    """The longest time between consecutive ``times`` from ``since`` on (and when it began)."""
    ordered = sorted(t for t in times if t >= since)
    if len(ordered) < 2:
        return 0.0, since
    return max((b - a, a) for a, b in zip(ordered, ordered[1:], strict=False))


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["zookeeper", "bootstrap"])
def test_a_group_of_three_reads_every_record_through_a_zookeeper_restart(
    restartable: RestartableCluster, child_processes: Any, tmp_path: Path, mode: str
) -> None:
    cluster = restartable
    child_processes.log_paths.extend(cluster.log_paths())  # shown if the test fails
    for broker in cluster.brokers:
        assert broker.alive, f"broker {broker.broker_id} is not running (an earlier test?):\n{broker.output()[-3000:]}"
    broker_output_before = {b.broker_id: len(b.output()) for b in cluster.brokers}
    topic, group = f"zr-{mode}-{uuid.uuid4().hex[:6]}", f"g-{uuid.uuid4().hex[:6]}"
    with Admin(bootstrap_servers=cluster.servers) as admin:
        admin.create_topic(topic, PARTITIONS, replication_factor=2)

    outs = [tmp_path / f"member-{m}.jsonl" for m in range(MEMBERS)]
    procs = [spawn_member(mode, cluster, topic, group, outs[m], child_processes) for m in range(MEMBERS)]

    def split() -> bool:
        found = [last_assignment(read_jsonl(out)) for out in outs]
        return all(found) and sorted(p for a in found for p in a or []) == list(range(PARTITIONS))

    def members_alive() -> None:
        for m, proc in enumerate(procs):
            assert proc.poll() is None, (
                f"member {m} exited with {proc.returncode}:\n{outs[m].with_suffix('.log').read_text()[-3000:]}"
            )

    wait_for(split, 60, "three members sharing the six partitions", 0.1)
    producer = PacedProducer(cluster.servers, topic)
    producer.start()
    try:
        wait_for(lambda: len(consumed(outs)) >= 10 * PARTITIONS, 60, "the group to consume records", 0.1)
        time.sleep(2.0)  # a steady flow before the restart
        members_alive()

        stopped, back = restart(cluster.zookeeper)
        wait_for(
            lambda: members_alive() or bool(producer.ack_times) and producer.ack_times[-1] > back + 5.0,
            120,
            "records acknowledged again after the restart",
            0.2,
        )
        time.sleep(3.0)  # more records after the restart
    finally:
        producer.stop()
    acknowledged = producer.acknowledged
    assert acknowledged, "nothing was acknowledged"

    def everything_consumed() -> bool:
        members_alive()
        return {(e["p"], e["o"]) for e in consumed(outs)} >= set(acknowledged)

    wait_for(
        everything_consumed,
        120,
        lambda: (
            f"every acknowledged record to be consumed (missing: "
            f"{sorted(set(acknowledged) - {(e['p'], e['o']) for e in consumed(outs)})[:10]})"
        ),
        0.2,
    )
    members_alive()

    # the brokers still host group members: a fourth joins, gets a share, and leaves
    newcomer = Consumer(
        topic,
        group=group,
        bootstrap_servers=cluster.servers,
        auto_offset_reset="earliest",
        session_timeout_s=SESSION_S,
    )
    try:
        wait_for(lambda: newcomer.assignment(), 60, "a new member to get partitions after the restart", 0.1)
    finally:
        newcomer.close()
    wait_for(split, 60, "the three members to share the partitions again", 0.1)
    members_alive()

    for proc in procs:
        proc.terminate()
    for m, proc in enumerate(procs):
        log = outs[m].with_suffix(".log")
        assert proc.wait(30) == 0, log.read_text()[-3000:]
        assert "Traceback" not in log.read_text(), log.read_text()[-3000:]
        assert read_jsonl(outs[m])[-1]["event"] == "closed"

    records = consumed(outs)
    for e in records:
        value, _sent = acknowledged.get((e["p"], e["o"]), (None, 0.0))
        assert value is None or value == e["v"], f"{e} is not the record acknowledged at that offset ({value})"
    missing = set(acknowledged) - {(e["p"], e["o"]) for e in records}
    assert not missing, f"acknowledged records never consumed: {sorted(missing)[:10]}"

    for broker in cluster.brokers:
        assert broker.alive, f"broker {broker.broker_id} exited:\n{broker.output()[-3000:]}"
        output = broker.output()[broker_output_before[broker.broker_id] :]
        assert "Exception in thread" not in output, f"a thread of broker {broker.broker_id} died:\n{output[-5000:]}"

    # how long the restart held things up: measured, not asserted
    first_read: dict[tuple[int, int], float] = {}
    for e in records:
        key = (e["p"], e["o"])
        first_read[key] = min(first_read.get(key, e["t"]), e["t"])
    slowest = max(first_read[k] - sent for k, (_v, sent) in acknowledged.items())
    stall, stall_from = longest_gap([e["t"] for e in records], stopped - 5.0)
    ack_stall, _ = longest_gap(producer.ack_times, stopped - 5.0)
    twice = len(records) - len(first_read)
    print(
        f"\n[{mode}] ZooKeeper down {back - stopped:.1f} s (stop + {ZOOKEEPER_DOWN_S:.0f} s + start); "
        f"consumption stalled {stall:.1f} s (from {stall_from - stopped:+.1f} s after the stop); "
        f"acknowledgments stalled {ack_stall:.1f} s; slowest record {slowest:.1f} s from send to consumption; "
        f"{len(acknowledged)} records acknowledged, {len(producer.failed)} sends failed, {twice} read twice"
    )


@pytest.mark.slow
def test_a_zookeeper_view_follows_partition_leaders_again_after_a_restart(restartable: RestartableCluster) -> None:
    """kazoo drops a client's watches with its connection: the view reads the partition states it
    follows anew once connected again, so a leader that changes after the restart is seen (not
    only after fetches refused by the old one)."""
    connect = f"{restartable.zookeeper.connect_string}/view-{uuid.uuid4().hex[:6]}"  # no broker lives here
    with ClusterMetadata(connect) as cluster:
        topic = {"replicas": [[1, 2]], "configs": {}}
        cluster.zk.create(cluster.layout.topic("t"), json.dumps(topic).encode(), makepath=True)
        cluster.zk.create(cluster.layout.partition_state("t", 0), PartitionState(1, 0, [1, 2]).to_json(), makepath=True)
        view = ZooKeeperView(connect)
        try:
            assert view.leader("t", 0)[0] == 1  # followed by a watch from now on
            restart(restartable.zookeeper)
            cluster.set_partition_state("t", 0, PartitionState(2, 1, [2]))  # once reconnected
            wait_for(lambda: view.cluster.zk.connected, 30, "the view to be connected again", 0.1)
            wait_for(lambda: view.leader("t", 0)[0] == 2, 30, "the view to see the new leader", 0.1)
        finally:
            view.close()


def expire_session(zk: KazooClient, hosts: str) -> None:
    """End ``zk``'s ZooKeeper session as an expiry would, while it stays connected: another
    client takes the session over (its id and password) and closes it."""
    thief = KazooClient(hosts=hosts, client_id=zk.client_id, timeout=10.0)
    thief.start(timeout=15.0)
    thief.stop()
    thief.close()


@pytest.mark.slow
def test_a_zookeeper_native_member_whose_session_expired_joins_its_group_again(
    restartable: RestartableCluster,
) -> None:
    """kazoo's ``SetPartitioner`` fails for good when its session is lost; the consumer joins the
    group again with a new one on its next poll (as a Kafka consumer rejoins) and reads on from the
    committed offsets, instead of raising 'lost membership' from every poll."""
    topic, group = f"zx-{uuid.uuid4().hex[:6]}", f"g-{uuid.uuid4().hex[:6]}"
    with Admin(bootstrap_servers=restartable.servers) as admin:
        admin.create_topic(topic, PARTITIONS)
    produced: dict[tuple[int, int], str] = {}

    def produce(start: int, n: int) -> None:
        with Producer(bootstrap_servers=restartable.servers, linger_ms=2) as producer:
            futures = [
                (f"v{i}", producer.send(topic, f"v{i}".encode(), partition=i % PARTITIONS))
                for i in range(start, start + n)
            ]
            for value, future in futures:
                meta = future.result(30)
                produced[(meta.partition, meta.offset)] = value

    consumer = Consumer(
        topic, group=group, zookeeper=restartable.connect, auto_offset_reset="earliest", session_timeout_s=SESSION_S
    )
    read: dict[tuple[int, int], str] = {}
    refused_commits = []

    def poll_and_commit() -> bool:
        for record in consumer.poll(0.2):
            read[(record.partition, record.offset)] = record.value.decode()
        try:
            consumer.commit()
        except CommitFailed as exc:  # the session was lost between the poll and the commit
            refused_commits.append(exc)
        return set(read) >= set(produced)

    try:
        produce(0, 60)
        wait_for(poll_and_commit, 60, "the member to read every record", 0.0)
        zk = consumer._client.cluster.zk
        old_session = zk.client_id[0]
        expire_session(zk, restartable.zookeeper.connect_string)
        wait_for(lambda: zk.connected and zk.client_id[0] != old_session, 30, "a new session", 0.1)
        produce(60, 60)
        wait_for(poll_and_commit, 60, "the member to read on after its session expired", 0.0)
        assert sorted(p for _t, p in consumer.assignment()) == list(range(PARTITIONS))
    finally:
        consumer.close()
    for key, value in read.items():
        assert produced[key] == value
    assert len(refused_commits) <= 1, refused_commits
