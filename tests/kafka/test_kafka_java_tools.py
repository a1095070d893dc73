"""Kafka's own Java tools (from the Kafka jars ``make install`` fetches) against the Kafka listener
of a live cluster: what a team moving from Kafka runs on day one. JVM launches cost seconds, so
each test runs few of them."""

from __future__ import annotations

import json
import subprocess
from collections import Counter
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer as KafkaConsumer
from confluent_kafka import TopicPartition

from sparklog import Admin
from sparklog.bench.kafka_peer import COMMAND_JVM_OPTS, java_command
from sparklog.local_cluster import LocalCluster

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path_factory.mktemp("kafka-tools"), brokers=3) as running:
        yield running


@pytest.fixture(scope="module")
def admin(cluster: LocalCluster) -> Iterator[Admin]:
    with Admin(bootstrap_servers=cluster.bootstrap_servers) as client:
        yield client


def tool(main_class: str, *args: str, stdin: str | None = None, timeout: float = 180.0) -> str:
    """Run one of Kafka's tools to completion; its stdout."""
    done = subprocess.run(
        java_command(main_class, list(args), COMMAND_JVM_OPTS),
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, f"{main_class} exited {done.returncode}:\n{done.stderr[-3000:]}\n{done.stdout[-2000:]}"
    return done.stdout


def events(output: str) -> list[dict]:
    """The JSON lines a Verifiable* tool printed."""
    return [json.loads(line) for line in output.splitlines() if line.startswith("{")]


def read_values(cluster: LocalCluster, topic: str, partitions: int, expected: int) -> list[bytes]:
    consumer = KafkaConsumer({"bootstrap.servers": cluster.kafka_bootstrap_servers, "group.id": "check"})
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        out: list[bytes] = []
        for _ in range(60):
            out += [m.value() for m in consumer.consume(10_000, 0.5) if m.error() is None]
            if len(out) >= expected:
                break
        return out
    finally:
        consumer.close()


def test_console_producer_lines_are_records(cluster: LocalCluster, admin: Admin) -> None:
    topic = "java-console"
    admin.create_topic(topic, 2, 3, {"min.insync.replicas": "2"})
    lines = [f"key{i}:value{i}" for i in range(200)]
    tool(
        "org.apache.kafka.tools.ConsoleProducer",
        "--bootstrap-server",
        cluster.kafka_bootstrap_servers,
        "--topic",
        topic,
        "--reader-property",
        "parse.key=true",
        "--reader-property",
        "key.separator=:",
        "--producer-property",
        "acks=all",
        stdin="\n".join(lines) + "\n",
    )
    assert sorted(read_values(cluster, topic, 2, 200)) == sorted(f"value{i}".encode() for i in range(200))


def test_verifiable_producer_acknowledges_what_is_stored(cluster: LocalCluster, admin: Admin) -> None:
    """Kafka's VerifiableProducer (idempotent, acks=all): every record it reports acknowledged is
    stored once, at the offset it was told."""
    topic = "java-verifiable"
    admin.create_topic(topic, 3, 3, {"min.insync.replicas": "2"})
    output = tool(
        "org.apache.kafka.tools.VerifiableProducer",
        "--bootstrap-server",
        cluster.kafka_bootstrap_servers,
        "--topic",
        topic,
        "--max-messages",
        "5000",
        "--acks",
        "-1",
        "--throughput",
        "-1",
        "--producer.config",
        "/dev/null",
    )
    acked = [e for e in events(output) if e["name"] == "producer_send_success"]
    assert not [e for e in events(output) if e["name"] == "producer_send_error"]
    assert len(acked) == 5000
    stored = read_values(cluster, topic, 3, 5000)
    counts = Counter(stored)
    assert all(counts[e["value"].encode()] == 1 for e in acked)
    assert len(stored) == 5000


def test_verifiable_consumer_reads_every_acknowledged_record_once_and_the_group_tool_resets_it(
    cluster: LocalCluster, admin: Admin
) -> None:
    """What VerifiableProducer had acknowledged, VerifiableConsumer (a classic group member, commits
    after each batch) consumes exactly once; `kafka-consumer-groups --describe` then shows no lag,
    and `--reset-offsets --to-earliest --execute` moves the group back to the start."""
    topic, group = "java-verifiable-group", "verifiable"
    admin.create_topic(topic, 3, 3, {"min.insync.replicas": "2"})
    produced = events(
        tool(
            "org.apache.kafka.tools.VerifiableProducer",
            "--bootstrap-server",
            cluster.kafka_bootstrap_servers,
            "--topic",
            topic,
            "--max-messages",
            "3000",
            "--acks",
            "-1",
            "--throughput",
            "-1",
        )
    )
    acked = Counter(e["value"] for e in produced if e["name"] == "producer_send_success")
    assert sum(acked.values()) == 3000
    consumed_events = events(
        tool(
            "org.apache.kafka.tools.VerifiableConsumer",
            "--bootstrap-server",
            cluster.kafka_bootstrap_servers,
            "--topic",
            topic,
            "--group-id",
            group,
            "--max-messages",
            "3000",
            "--verbose",
        )
    )
    consumed = Counter(e["value"] for e in consumed_events if e["name"] == "record_data")
    assert consumed == acked  # every acknowledged record, once
    commits = [e for e in consumed_events if e["name"] == "offsets_committed"]
    assert commits and all(e["success"] for e in commits)

    describe = tool(
        "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
        "--bootstrap-server",
        cluster.kafka_bootstrap_servers,
        "--describe",
        "--group",
        group,
    )
    rows = [line.split() for line in describe.splitlines() if line.startswith(group)]
    filled = {e["partition"] for e in produced if e["name"] == "producer_send_success"}
    # VerifiableConsumer commits the partitions it consumed from: each with no lag
    assert sorted(int(row[2]) for row in rows) == sorted(filled), describe
    assert all(row[5] == "0" for row in rows), describe  # the LAG column
    tool(
        "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
        "--bootstrap-server",
        cluster.kafka_bootstrap_servers,
        "--reset-offsets",
        "--to-earliest",
        "--execute",
        "--group",
        group,
        "--topic",
        topic,
    )
    rows_after = admin.describe_group(group)
    assert [(r["partition"], r["committed_offset"]) for r in rows_after] == [(0, 0), (1, 0), (2, 0)]


def test_client_compatibility_test(cluster: LocalCluster, admin: Admin) -> None:
    """Kafka's own ClientCompatibilityTest, with the flags that say what this listener supports
    (DescribeAcls included: the test checks it answers)."""
    tool(
        "org.apache.kafka.tools.ClientCompatibilityTest",
        "--bootstrap-server",
        cluster.kafka_bootstrap_servers,
        "--topic",
        "java-compatibility",
        "--offsets-for-times-supported",
        "true",
        "--cluster-id-supported",
        "true",
        "--expect-record-too-large-exception",
        "false",
        "--num-cluster-nodes",
        "3",
        "--create-topics-supported",
        "true",
        "--describe-acls-supported",
        "true",
        "--describe-configs-supported",
        "true",
        "--idempotent-producer-supported",
        "true",
    )
