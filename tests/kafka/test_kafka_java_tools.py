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
from sparklog.bench.kafka_peer import java_command
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
        java_command(main_class, list(args)), input=stdin, capture_output=True, text=True, timeout=timeout
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
