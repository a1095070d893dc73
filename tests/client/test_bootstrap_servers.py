"""Clients that bootstrap from brokers (issue 17, part 1): ``bootstrap.servers`` only, no ZooKeeper.

Real ZooKeeper, real broker processes, real SparkSession. Group offsets committed through brokers
land in the same znodes as before (read here with kazoo); bad input to the new cluster actions gets
a typed error and the broker keeps serving; a leader killed with -9 while producing ``acks=all``
through bootstrap servers loses and duplicates nothing; the CLI works with an unreachable
``--zookeeper``; and a Spark job reading (batch and availableNow stream) a 12-partition topic, and
writing through the exactly-once sink, opens no ZooKeeper session (counted with ``cons``).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.flight as flight
import pytest

from sparklog import Admin, Consumer, Producer
from sparklog.client.broker_view import BrokerView
from sparklog.client.cluster_client import ClusterClient
from sparklog.coordination.cluster import ClusterMetadata
from sparklog.coordination.zookeeper_server import four_letter_word
from sparklog.errors import (
    CoordinatorNotAvailable,
    InvalidConfig,
    InvalidGroupId,
    InvalidRequest,
    InvalidTopic,
    SparklogError,
    TopicExists,
    UnknownTopic,
)
from sparklog.local_cluster import LocalCluster
from sparklog.protocol import wire
from waiting import wait_for

HOST = "127.0.0.1"


def bootstrap_of(*brokers: Any) -> str:
    return ",".join(f"{HOST}:{b.port}" for b in brokers)


def read_all(consumer: Consumer, count: int, timeout: float = 30.0) -> list[Any]:
    out: list[Any] = []
    deadline = time.monotonic() + timeout
    while len(out) < count:
        assert time.monotonic() < deadline, f"read {len(out)} of {count} records"
        out += consumer.poll(0.5)
    return out


# ------------------------------------------------------------------------------------------ Python clients
def test_clients_need_only_bootstrap_servers(start_broker: Any, sparklog_connect: str) -> None:
    broker = start_broker(1)
    servers = bootstrap_of(broker)
    topic, group = f"boot-{uuid.uuid4().hex[:6]}", f"g-{uuid.uuid4().hex[:6]}"

    client = ClusterClient(bootstrap_servers=servers)
    try:
        assert isinstance(client.view, BrokerView)  # no kazoo client at all
        with pytest.raises(InvalidRequest, match="ZooKeeper"):
            _ = client.cluster
    finally:
        client.close()

    with Admin(config={"bootstrap.servers": servers}) as admin:
        admin.create_topic(topic, 3, 1, {"retention.ms": "3600000"})
        with pytest.raises(TopicExists):
            admin.create_topic(topic, 3, 1)
        assert topic in admin.list_topics()
        described = admin.describe_topic(topic)
        assert [p["leader"] for p in described["partitions"]] == [1, 1, 1]
        assert described["configs"] == {"retention.ms": "3600000", "partitioner": "murmur2"}
        assert described["partitioner"] == "murmur2"
        assert admin.alter_topic(topic, {"retention.ms": "7200000"}).configs["retention.ms"] == "7200000"
        with pytest.raises(InvalidTopic):
            admin.create_topic("__sparklog_mine", 1, 1)
        with pytest.raises(InvalidRequest, match=r"brokers \[7\] are not live"):  # through a broker now
            admin.reassign_partitions(topic, {0: [7]})

    with Producer(bootstrap_servers=servers, acks="all") as producer:
        futures = [producer.send(topic, value=f"v{i}".encode(), partition=i % 3) for i in range(30)]
        acked = [f.result(timeout=30) for f in futures]
    assert len(acked) == 30

    with Consumer(topic, group=group, bootstrap_servers=servers, auto_offset_reset="earliest") as consumer:
        assert sorted(consumer.assignment()) == [(topic, p) for p in range(3)]
        first = read_all(consumer, 30)
        consumer.commit()
        assert consumer.committed() == {(topic, p): 10 for p in range(3)}
    assert sorted(r.value for r in first) == sorted(f"v{i}".encode() for i in range(30))

    # the same znodes as the ZooKeeper path: consumers/<g>/offsets/<t>/<p>
    with ClusterMetadata(sparklog_connect) as meta:
        for p in range(3):
            data, _ = meta.zk.get(meta.layout.committed_offset(group, topic, p))
            assert data == b"10"

    with Producer(bootstrap_servers=servers, acks="all") as producer:
        for i in range(30, 36):
            producer.send(topic, value=f"v{i}".encode(), partition=i % 3).result(timeout=30)
    with Consumer(topic, group=group, bootstrap_servers=servers, auto_offset_reset="earliest") as consumer:
        resumed = read_all(consumer, 6)  # from the committed offsets, not from the beginning
        time.sleep(0.5)
        resumed += consumer.poll(0.5)
    assert sorted(r.value for r in resumed) == sorted(f"v{i}".encode() for i in range(30, 36))

    with Admin(bootstrap_servers=servers) as admin:
        assert group in admin.list_groups()
        assert {r["partition"]: r["lag"] for r in admin.describe_group(group)} == {0: 2, 1: 2, 2: 2}
        admin.reset_group(group, topic, to_earliest=True)
        admin.delete_topic(topic)
        assert topic not in admin.list_topics()
        with pytest.raises(UnknownTopic):
            admin.describe_topic(topic)
    with ClusterMetadata(sparklog_connect) as meta:
        assert meta.committed_offsets(group) == {(topic, p): 0 for p in range(3)}


def test_bad_bootstrap_settings_are_clear() -> None:
    for bad in ("", "nohost", "h:0", "h:99999", "h:x"):
        with pytest.raises(InvalidConfig, match="bootstrap.servers"):
            Producer(bootstrap_servers=bad)
    with pytest.raises(InvalidConfig, match="unknown client setting"):
        Admin(config={"bootstrap.server": "127.0.0.1:1"})
    with pytest.raises(InvalidConfig, match="contradict"):
        Admin(bootstrap_servers="127.0.0.1:1", config={"bootstrap.servers": "127.0.0.1:2"})


# ------------------------------------------------------------------------------------------ bad input
def _action(location: str, name: str, body: bytes) -> SparklogError | dict[str, Any]:
    client = wire.flight_client(location)
    try:
        results = list(client.do_action(flight.Action(name, body)))
        return wire.decode(results[0].body)
    except flight.FlightError as exc:
        return wire.from_flight_error(exc, location)
    finally:
        client.close()


def test_bad_cluster_actions_get_clear_errors_and_the_broker_keeps_serving(start_broker: Any) -> None:
    broker = start_broker(1)
    loc = broker.location
    cases: list[tuple[str, bytes, type[SparklogError], str]] = [
        (wire.METADATA, b"{not json", InvalidRequest, "not valid JSON"),
        (wire.METADATA, b"[1, 2]", InvalidRequest, "JSON object"),
        (wire.METADATA, b'{"topics": "events"}', InvalidRequest, "'topics'"),
        (wire.METADATA, b'{"topics": ["../x"]}', InvalidTopic, "invalid topic name"),
        (wire.METADATA, b'{"topics": [], "describe": "yes"}', InvalidRequest, "'describe'"),
        (wire.OFFSET_COMMIT, b'{"group": "a/b", "offsets": {}}', InvalidGroupId, "invalid group name"),
        (wire.OFFSET_COMMIT, b'{"group": "g", "offsets": []}', InvalidRequest, "'offsets'"),
        (wire.OFFSET_COMMIT, b'{"group": "g", "offsets": {"t": {"x": 1}}}', InvalidRequest, "partition"),
        (wire.OFFSET_COMMIT, b'{"group": "g", "offsets": {"t": {"0": "1"}}}', InvalidRequest, "64-bit integer"),
        (wire.OFFSET_COMMIT, b'{"group": "g", "offsets": {"t": {"0": -5}}}', InvalidRequest, "negative"),
        (wire.OFFSET_COMMIT, b'{"group": "g", "offsets": {"t": {"0": 1e400}}}', InvalidRequest, "64-bit"),
        (wire.OFFSET_FETCH, b'{"group": 7}', InvalidGroupId, "not a string"),
        (wire.CREATE_TOPIC, b'{"name": "t", "partitions": "3"}', InvalidRequest, "'partitions'"),
        (wire.CREATE_TOPIC, b'{"name": "t", "partitions": 0}', InvalidRequest, "at least 1"),
        (
            wire.CREATE_TOPIC,
            b'{"name": "t", "partitions": 1, "configs": {"retention.ms": [1]}}',
            InvalidRequest,
            "config",
        ),
        (wire.CREATE_TOPIC, b'{"name": "t", "partitions": 1, "configs": {"bogus.key": "1"}}', InvalidConfig, "bogus"),
        (wire.CREATE_TOPIC, b'{"name": "t", "partitions": 1, "internal": "yes"}', InvalidRequest, "'internal'"),
        (wire.CREATE_TOPIC, b'{"name": "t", "partitions": 1, "value_schema": 5}', InvalidRequest, "value_schema"),
        (wire.DELETE_TOPIC, b'{"name": "no-such-topic"}', UnknownTopic, "unknown topic"),
        (wire.ALTER_CONFIGS, b'{"name": "t"}', InvalidRequest, "'configs'"),
        (wire.REGISTER_SCHEMA, b'{"topic": "no-such-topic", "schema": "{}"}', UnknownTopic, "unknown topic"),
        (wire.SINK_STATE, b'{"op": "read", "sink": "../../brokers"}', InvalidRequest, "invalid transactional id"),
        (wire.SINK_STATE, b'{"op": "burn", "sink": "s"}', InvalidRequest, "'op'"),
        (wire.SINK_STATE, b'{"op": "write", "sink": "s", "state": 3}', InvalidRequest, "'state'"),
    ]
    for name, body, error, fragment in cases:
        answer = _action(loc, name, body)
        assert isinstance(answer, error), (name, body, answer)
        assert fragment in str(answer), (name, body, str(answer))
        assert "Traceback" not in str(answer) and len(str(answer)) < 1100
    # a config value the topic rules refuse, and an unknown config name, through the typed client too
    with Admin(bootstrap_servers=bootstrap_of(broker)) as admin:
        with pytest.raises(SparklogError, match="retention.ms"):
            admin.create_topic("t-bad-config", 1, 1, {"retention.ms": "soon"})
        admin.create_topic("t-ok", 2, 1)
    answer = _action(loc, wire.METADATA, wire.encode({"topics": ["t-ok", "missing"]}))
    assert isinstance(answer, dict)
    assert [t["name"] for t in answer["topics"]] == ["t-ok", "missing"]
    assert len(answer["topics"][0]["partitions"]) == 2 and answer["topics"][1]["error"] == UnknownTopic.code
    address = f"{HOST}:{broker.port}"
    assert answer["brokers"] == [{"id": 1, "host": HOST, "port": broker.port, "endpoints": {"PLAINTEXT": address}}]
    assert _action(loc, wire.PING, b"") == {"broker_id": 1}  # still serving


# ------------------------------------------------------------------------------------------ failover
@pytest.mark.slow
def test_leader_kill_9_while_producing_acks_all_through_bootstrap_servers(cluster: Any) -> None:
    servers = bootstrap_of(*cluster.brokers.values())
    topic = "boot-failover"
    with Admin(bootstrap_servers=servers) as admin:
        admin.create_topic(topic, 3, 3, {"min.insync.replicas": "2"})
    cluster.wait_full_isr(topic)

    acked: list[tuple[int, int, bytes]] = []
    failed: list[bytes] = []
    stop = threading.Event()

    def write() -> None:
        with Producer(bootstrap_servers=servers, acks="all", linger_ms=1, delivery_timeout_s=60) as producer:
            n = 0
            while not stop.is_set():
                block = [f"r{n + i}".encode() for i in range(20)]
                n += len(block)
                futures = [(v, producer.send(topic, value=v, key=v)) for v in block]
                for value, future in futures:
                    try:
                        _t, partition, offset = future.result(timeout=90)
                    except SparklogError:
                        failed.append(value)
                        continue
                    acked.append((partition, offset, value))

    def acked_at_least(n: int, timeout: float, failure: str) -> None:
        wait_for(lambda: len(acked) >= n or not writer.is_alive(), timeout, failure)
        assert len(acked) >= n, f"{failure}: the writer ended"

    writer = threading.Thread(target=write, name="boot-writer", daemon=True)
    writer.start()
    try:
        acked_at_least(200, 30, "progress before the kill")
        leader = cluster.state(topic, 0).leader
        victim = cluster[leader]
        victim.kill()
        # writes go on with the leader dead (and it in the bootstrap list)
        acked_at_least(len(acked) + 300, 60, f"progress after killing broker {leader}")
        victim.restart()
        cluster.wait_full_isr(topic)
        acked_at_least(len(acked) + 100, 60, "progress after the restart")
    finally:
        stop.set()
        writer.join(120)
    assert not writer.is_alive()

    ends: dict[int, int] = {}
    for p, o, _v in acked:
        ends[p] = max(ends.get(p, 0), o + 1)
    read: list[tuple[int, int, bytes]] = []
    with Consumer(topic, bootstrap_servers=servers, auto_offset_reset="earliest", max_wait_ms=200) as consumer:
        deadline = time.monotonic() + 60
        while any(consumer.position(p) < end for p, end in ends.items()):
            assert time.monotonic() < deadline, "could not read back what was acknowledged"
            read += [(r.partition, r.offset, r.value) for r in consumer.poll(0.5)]
        read += [(r.partition, r.offset, r.value) for r in consumer.poll(0.5)]
    at = {(p, o): v for p, o, v in read}
    counts: dict[bytes, int] = {}
    for _p, _o, v in read:
        counts[v] = counts.get(v, 0) + 1
    assert len(at) == len(read), "an offset was read twice"
    lost = [(p, o, v) for p, o, v in acked if at.get((p, o)) != v]
    assert not lost, f"{len(lost)} acknowledged records not read back at their offsets, e.g. {lost[:3]}"
    assert all(counts[v] == 1 for _p, _o, v in acked), "an acknowledged record was stored twice"
    assert all(counts.get(v, 0) <= 1 for v in failed)


# ------------------------------------------------------------------------------------------ CLI
def _cli(*args: str, stdin: str | None = None, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("SPARKLOG_ZOOKEEPER", "SPARKLOG_DEBUG")}
    command = [sys.executable, "-m", "sparklog.cli.main", "--zookeeper", f"{HOST}:1", *args]
    return subprocess.run(command, input=stdin, capture_output=True, text=True, timeout=timeout, env=env)


def _ok(*args: str, stdin: str | None = None) -> str:
    result = _cli(*args, stdin=stdin)
    assert result.returncode == 0, f"sparklog {' '.join(args)}: {result.stderr}"
    assert "Traceback" not in result.stderr
    return result.stdout


def test_cli_with_bootstrap_server_and_no_reachable_zookeeper(start_broker: Any, sparklog_connect: str) -> None:
    broker = start_broker(1)
    servers = bootstrap_of(broker)
    b = ("--bootstrap-server", servers)
    _ok("topics", "create", "cli-boot", "--partitions", "2", "--replication-factor", "1", *b)
    assert "cli-boot" in _ok("--bootstrap-server", servers, "topics", "list").split()
    described = _ok("topics", "describe", "cli-boot", *b)
    assert "Partitions: 2" in described
    _ok("produce", "cli-boot", "--partition", "1", "--acks", "all", *b, stdin="a\nb\nc\n")
    out = _ok("consume", "cli-boot", "--group", "cg", "--from-beginning", "--max-messages", "3", *b)
    assert out.split() == ["a", "b", "c"]
    assert re.search(r"cli-boot\s+1\s+3\s+3\s+0", _ok("groups", "describe", "cg", *b))
    with ClusterMetadata(sparklog_connect) as meta:
        assert meta.committed_offsets("cg")[("cli-boot", 1)] == 3
    env_run = subprocess.run(
        [sys.executable, "-m", "sparklog.cli.main", "--zookeeper", f"{HOST}:1", "groups", "list"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "SPARKLOG_BOOTSTRAP_SERVERS": servers},
    )
    assert env_run.returncode == 0 and "cg" in env_run.stdout.split(), env_run.stderr
    _ok("topics", "delete", "cli-boot", *b)
    assert "cli-boot" not in _ok("topics", "list", *b).split()
    gone = _cli("topics", "list", "--bootstrap-server", f"{HOST}:2")
    assert gone.returncode == 1 and gone.stderr.count("\n") == 1 and "bootstrap.servers" in gone.stderr


# ------------------------------------------------------------------------------------------ Spark
_CONS = re.compile(r"/\[?([0-9a-fA-F:.]+?)\]?:(\d+)\[\d+\]\((.*)\)")


def zookeeper_sessions(zookeeper: Any) -> dict[int, str]:
    """Client port -> session id of every ZooKeeper connection with a session (``cons``)."""
    host, port = zookeeper.connect_string.split(":")
    out: dict[int, str] = {}
    for line in four_letter_word(host, int(port), "cons").splitlines():
        found = _CONS.search(line)
        sid = re.search(r"sid=(0x[0-9a-f]+)", found.group(3)) if found else None
        if found and sid:
            out[int(found.group(2))] = sid.group(1)
    return out


def socket_owners(ports: set[int]) -> dict[int, int]:
    """Local TCP port -> pid of the process holding that socket (Linux /proc)."""
    inodes: dict[str, int] = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            local_port = int(fields[1].rsplit(":", 1)[1], 16)
            if local_port in ports:
                inodes[fields[9]] = local_port
    owners: dict[int, int] = {}
    for pid_dir in Path("/proc").iterdir():
        if not pid_dir.name.isdigit():
            continue
        try:
            for fd in (pid_dir / "fd").iterdir():
                link = os.readlink(fd)
                if link.startswith("socket:[") and link[8:-1] in inodes:
                    owners[inodes[link[8:-1]]] = int(pid_dir.name)
        except OSError:
            continue
    return owners


class SessionWatch(threading.Thread):
    """Samples ``cons`` until stopped: every session seen (client port -> session id)."""

    def __init__(self, zookeeper: Any) -> None:
        super().__init__(daemon=True)
        self.zookeeper = zookeeper
        self.seen: dict[int, str] = {}
        self.owners: dict[int, int] = {}
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            sessions = zookeeper_sessions(self.zookeeper)
            fresh = set(sessions) - set(self.seen)
            self.seen.update(sessions)
            if fresh:
                self.owners.update(socket_owners(fresh))  # while the socket is still open
            self.done.wait(0.05)


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="needs Linux /proc to tell who holds a socket")
def test_spark_job_through_bootstrap_servers_opens_no_zookeeper_session(
    spark: Any, spark_cluster: Any, zookeeper: Any, tmp_path: Path
) -> None:
    from spark_helpers import run_available_now, unique

    servers = bootstrap_of(*spark_cluster.brokers.values())
    topic, target, group = unique("boot12"), unique("boot-target"), unique("boot-group")
    with Admin(bootstrap_servers=servers) as admin:
        admin.create_topic(topic, 12, 1)
        admin.create_topic(target, 3, 1)
    with Producer(bootstrap_servers=servers, acks="all") as producer:
        for p in range(12):
            values = pa.array([f"p{p}-{i}".encode() for i in range(25)], pa.binary())
            producer.send_batch(topic, pa.table({"value": values}), partition=p)
    broker_pids = {b.process.pid for b in spark_cluster.brokers.values() if b.process is not None}

    before = zookeeper_sessions(zookeeper)
    watch = SessionWatch(zookeeper)
    watch.start()
    try:
        batch = spark.read.format("sparklog").option("bootstrap.servers", servers).option("subscribe", topic).load()
        assert batch.count() == 300
        assert batch.select("partition").distinct().count() == 12

        stream = (
            spark.readStream.format("sparklog")
            .option("kafka.bootstrap.servers", servers)
            .option("subscribe", topic)
            .option("startingOffsets", "earliest")
            .option("group", group)
            .load()
        )
        name = f"boot_{uuid.uuid4().hex[:8]}"
        run_available_now(stream, str(tmp_path / "ckpt"), query_name=name)
        assert spark.sql(f"select count(*) from {name}").collect()[0][0] == 300

        (
            batch.selectExpr("value")
            .write.format("sparklog")
            .mode("append")
            .option("bootstrap.servers", servers)
            .option("topic", target)
            .save()
        )
        written = spark.read.format("sparklog").option("kafka.bootstrap.servers", servers).option("topic", target)
        assert written.load().count() == 300
        time.sleep(0.5)  # one more sample after the job
    finally:
        watch.done.set()
        watch.join(10)
    after = zookeeper_sessions(zookeeper)

    new_ports = (set(watch.seen) | set(after)) - set(before)
    owners = {**watch.owners, **socket_owners(new_ports & set(after))}
    spark_side = {port: owners.get(port) for port in new_ports if owners.get(port) not in broker_pids}
    assert not spark_side, f"ZooKeeper sessions opened during the Spark job (client port: pid): {spark_side}"

    with ClusterMetadata(spark_cluster.zookeeper) as meta:  # the stream's group commits, in ZooKeeper
        assert meta.committed_offsets(group) == {(topic, p): 25 for p in range(12)}


def test_a_produce_while_zookeeper_is_down_names_zookeeper(tmp_path: Path) -> None:
    """With the cluster's ZooKeeper stopped, a broker answers what needs ZooKeeper at once with
    COORDINATOR_NOT_AVAILABLE naming it (kazoo would hold the call until its client's deadline,
    which then blamed the broker for not answering), so a producer through bootstrap servers fails
    after its delivery timeout saying that the broker is cut off from ZooKeeper."""
    cluster = LocalCluster(tmp_path / "data", brokers=1)
    cluster.lock_data_dir()
    try:
        assert cluster.embedded is not None
        cluster.embedded.start()
        for broker in cluster.brokers.values():
            broker.start()
        cluster.wait_for_brokers([1], 60)
        with Admin(cluster.zookeeper) as admin:
            admin.create_topic("cut", 1, 1)
        servers = ",".join(f"127.0.0.1:{b.port}" for b in cluster.brokers.values())
        cluster.embedded.stop()
        with (
            pytest.raises(CoordinatorNotAvailable, match="cut off from ZooKeeper"),
            Producer(bootstrap_servers=servers, acks="all", delivery_timeout_s=8) as producer,
        ):
            producer.send("cut", b"x").result(60)
    finally:
        cluster.stop()
