"""Kafka's own tools and Spark's Kafka connector against a secured cluster (``LocalCluster(secure=True)``,
what ``sparklog up --secure`` runs): every client speaks SASL_SSL with SCRAM-SHA-256 to the Kafka
listeners, configured only with the files the cluster writes for them (``kafka-java-client.properties``
for the Java tools, ``kafka-client.properties`` for librdkafka, ``client.properties`` for sparklog's
own CLI and data source), and the authorizer is on. What a team moving from a secured Kafka runs on
day one: topics, console producer and consumer, consumer groups, ACLs and SCRAM users, Spark.

One cluster (two brokers) for the module: a secured one is expensive to start. Each JVM launch costs
seconds, so each test runs few of them."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, KafkaError, TopicPartition
from confluent_kafka import Consumer as KafkaConsumer
from confluent_kafka import Producer as KafkaProducer

from sparklog import Admin
from sparklog.bench.kafka_peer import COMMAND_JVM_OPTS, java_command
from sparklog.local_cluster import LocalCluster
from sparklog.security.acls import AclBinding, ResourcePattern
from sparklog.security.client_config import load_properties

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

TOPIC_COMMAND = "org.apache.kafka.tools.TopicCommand"
CONSOLE_PRODUCER = "org.apache.kafka.tools.ConsoleProducer"
CONSOLE_CONSUMER = "org.apache.kafka.tools.consumer.ConsoleConsumer"
GROUP_COMMAND = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"
ACL_COMMAND = "org.apache.kafka.tools.AclCommand"
CONFIG_COMMAND = "kafka.admin.ConfigCommand"
CLI = [sys.executable, "-m", "sparklog.cli.main"]
# settings in the environment that would point sparklog's CLI elsewhere than its arguments
SPARKLOG_ENV = ("SPARKLOG_ZOOKEEPER", "SPARKLOG_ZOOKEEPER_DIGEST", "SPARKLOG_BOOTSTRAP_SERVERS")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path_factory.mktemp("kafka-security") / "data", brokers=2, secure=True) as running:
        yield running


@pytest.fixture(scope="module")
def java_config(cluster: LocalCluster) -> str:
    """The admin's Java client properties, as the cluster wrote them for Kafka's tools."""
    assert cluster.security is not None and cluster.security.kafka_java_client_properties is not None
    return str(cluster.security.kafka_java_client_properties)


@pytest.fixture(scope="module")
def admin(cluster: LocalCluster) -> Iterator[Admin]:
    with Admin(config=cluster.client_config()) as client:
        yield client


def run_tool(
    main_class: str, *args: str, stdin: str | None = None, timeout: float = 120.0
) -> subprocess.CompletedProcess[str]:
    """One of Kafka's tools, run to completion (killed at ``timeout``)."""
    return subprocess.run(
        java_command(main_class, list(args), COMMAND_JVM_OPTS),
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def tool(main_class: str, *args: str, stdin: str | None = None) -> str:
    """One of Kafka's tools, which must succeed; its stdout."""
    done = run_tool(main_class, *args, stdin=stdin)
    assert done.returncode == 0, f"{main_class} exited {done.returncode}:\n{done.stderr[-3000:]}\n{done.stdout[-2000:]}"
    return done.stdout


def java_properties_of(cluster: LocalCluster, user: str, password: str, directory: Path) -> str:
    """A Java client properties file logging in as ``user``: the admin's, with another JAAS login."""
    assert cluster.security is not None and cluster.security.kafka_java_client_properties is not None
    settings = load_properties(cluster.security.kafka_java_client_properties)
    settings["sasl.jaas.config"] = (
        f'org.apache.kafka.common.security.scram.ScramLoginModule required username="{user}" password="{password}";'
    )
    path = directory / f"{user}-java.properties"
    path.write_text("".join(f"{key}={value}\n" for key, value in settings.items()))
    return str(path)


def produce(
    cluster: LocalCluster, topic: str, records: list[tuple[int, bytes, bytes]], config: dict[str, str] | None = None
) -> None:
    """``(partition, key, value)`` records written by confluent-kafka over SASL_SSL as admin (or as
    the user of ``config``)."""
    producer = KafkaProducer({**(config or cluster.kafka_client_config()), "linger.ms": 5, "acks": "all"})
    failed: list[Any] = []
    for partition, key, value in records:
        producer.produce(topic, value, key, partition, on_delivery=lambda err, _m: err and failed.append(err))
    assert producer.flush(60) == 0
    assert not failed, failed


def consume(
    cluster: LocalCluster, topic: str, expected: int, group: str, *, commit: bool = False
) -> list[tuple[int, int, bytes, bytes]]:
    """``(partition, offset, key, value)`` of ``expected`` records read by a confluent-kafka consumer
    of ``group`` over SASL_SSL (subscribed: a group member), committed at the end with ``commit``."""
    consumer = KafkaConsumer(
        {
            **cluster.kafka_client_config(),
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    got: list[tuple[int, int, bytes, bytes]] = []
    try:
        consumer.subscribe([topic])
        for _ in range(120):
            for message in consumer.consume(1000, 0.5):
                assert message.error() is None, message.error()
                got.append((message.partition(), message.offset(), message.key(), message.value()))
            if len(got) >= expected:
                break
        if commit:
            consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    return got


def kafka_errors(config: dict[str, str], topic: str, until: int, timeout_s: float = 30.0) -> set[int]:
    """The error codes a confluent-kafka consumer of ``config`` meets reading partition 0 of
    ``topic`` from its start, until it meets ``until`` (or ``timeout_s``): errors of the
    partition and of the client (a failed login, the group refused)."""
    seen: set[int] = set()
    consumer = KafkaConsumer({**config, "error_cb": lambda error: seen.add(error.code())})
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        deadline = time.monotonic() + timeout_s
        while until not in seen and time.monotonic() < deadline:
            seen.update(m.error().code() for m in consumer.consume(100, 0.5) if m.error() is not None)
    finally:
        consumer.close()
    return seen


# ----------------------------------------------------------------- kafka-topics


def test_topic_command_creates_and_describes_over_sasl_ssl(
    cluster: LocalCluster, java_config: str, admin: Admin
) -> None:
    """``kafka-topics --create`` then ``--describe`` with the admin's ``--command-config``: the topic
    has the partitions, replicas and config asked for, as the tool and sparklog both see it."""
    topic = "ktls-topics"
    servers = cluster.kafka_bootstrap_servers
    common = ["--bootstrap-server", servers, "--command-config", java_config, "--topic", topic]
    created = tool(
        TOPIC_COMMAND, "--create", *common, "--partitions", "3", "--replication-factor", "2",
        "--config", "retention.ms=3600000",
    )  # fmt: skip
    assert f"Created topic {topic}." in created
    described = tool(TOPIC_COMMAND, "--describe", *common)
    header = next(line for line in described.splitlines() if "PartitionCount" in line)
    assert f"Topic: {topic}" in header and "PartitionCount: 3" in header and "ReplicationFactor: 2" in header
    assert "retention.ms=3600000" in header
    rows: dict[int, tuple[int, list[str], list[str]]] = {}
    for line in described.splitlines():
        found = re.search(r"Partition: (\d+)\s+Leader: (\d+)\s+Replicas: ([\d,]+)\s+Isr: ([\d,]+)", line)
        if found:
            rows[int(found[1])] = (int(found[2]), found[3].split(","), found[4].split(","))
    assert sorted(rows) == [0, 1, 2], described
    for leader, replicas, isr in rows.values():
        assert sorted(replicas) == ["1", "2"] and str(leader) in replicas and set(isr) <= set(replicas)

    meta = admin.describe_topic(topic)
    assert [p["partition"] for p in meta["partitions"]] == [0, 1, 2]
    assert all(len(p["replicas"]) == 2 for p in meta["partitions"])
    assert str(meta["configs"]["retention.ms"]) == "3600000"


# ----------------------------------------------------------------- console producer and consumer


def test_console_producer_and_consumer_over_sasl_ssl_and_sparklog_consume_reads_the_same(
    cluster: LocalCluster, java_config: str, admin: Admin
) -> None:
    """Lines written by ``kafka-console-producer --command-config`` (Kafka 4.3's name for
    ``--producer.config``) are read back in order by ``kafka-console-consumer --command-config``
    (``--consumer.config``), keys and values, and by ``sparklog consume --command-config`` through
    sparklog's own SASL_SSL listener."""
    topic = "ktls-console"
    admin.create_topic(topic, 1, 2)
    lines = [f"key{i}:line {i}" for i in range(300)]
    servers = cluster.kafka_bootstrap_servers
    tool(
        CONSOLE_PRODUCER, "--bootstrap-server", servers, "--command-config", java_config, "--topic", topic,
        "--reader-property", "parse.key=true", "--reader-property", "key.separator=:",
        "--command-property", "acks=all",
        stdin="\n".join(lines) + "\n",
    )  # fmt: skip
    read = tool(
        CONSOLE_CONSUMER, "--bootstrap-server", servers, "--command-config", java_config, "--topic", topic,
        "--from-beginning", "--max-messages", str(len(lines)), "--timeout-ms", "60000",
        "--formatter-property", "print.key=true", "--formatter-property", "key.separator=:",
    )  # fmt: skip
    assert read.splitlines() == lines

    assert cluster.security is not None
    env = {k: v for k, v in os.environ.items() if k not in SPARKLOG_ENV}
    done = subprocess.run(
        [
            *CLI, "consume", topic, "--from-beginning", "--max-messages", str(len(lines)), "--timeout-ms", "30000",
            "--print-key", "--key-separator", ":", "--quiet",
            "--bootstrap-server", cluster.client_config()["bootstrap.servers"],
            "--command-config", str(cluster.security.client_properties),
        ],
        capture_output=True, text=True, timeout=120, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == lines


# ----------------------------------------------------------------- kafka-consumer-groups


def test_consumer_groups_describe_and_reset_over_sasl_ssl(
    cluster: LocalCluster, java_config: str, admin: Admin
) -> None:
    """A group that consumed and committed over SASL_SSL: ``kafka-consumer-groups --describe`` shows
    its committed offsets and the lag of what was written since; ``--reset-offsets --to-earliest
    --execute`` moves it to the start, where its next consumer reads everything again."""
    topic, group = "ktls-groups", "ktls-group"
    admin.create_topic(topic, 2, 2)
    first = [(i % 2, f"k{i}".encode(), f"v{i}".encode()) for i in range(100)]
    produce(cluster, topic, first)
    consumed = consume(cluster, topic, len(first), group, commit=True)
    assert sorted(value for *_, value in consumed) == sorted(value for *_, value in first)
    later = [(0, b"late", f"late{i}".encode()) for i in range(7)]  # partition 0 only: lag 7 there
    produce(cluster, topic, later)

    servers = cluster.kafka_bootstrap_servers
    common = ["--bootstrap-server", servers, "--command-config", java_config, "--group", group]
    described = tool(GROUP_COMMAND, "--describe", *common)
    rows = {int(row[2]): row for row in (line.split() for line in described.splitlines()) if row[:2] == [group, topic]}
    assert sorted(rows) == [0, 1], described
    # GROUP TOPIC PARTITION CURRENT-OFFSET LOG-END-OFFSET LAG ...
    assert [rows[p][3:6] for p in (0, 1)] == [["50", "57", "7"], ["50", "50", "0"]], described

    reset = tool(GROUP_COMMAND, "--reset-offsets", "--to-earliest", "--execute", "--topic", topic, *common)
    new_offsets = {
        int(row[2]): row[3] for row in (line.split() for line in reset.splitlines()) if row[:2] == [group, topic]
    }
    assert new_offsets == {0: "0", 1: "0"}, reset
    again = consume(cluster, topic, len(first) + len(later), group)
    assert len(again) == len(first) + len(later)
    assert {(p, o) for p, o, *_ in again} == {(0, o) for o in range(57)} | {(1, o) for o in range(50)}


# ----------------------------------------------------------------- users, ACLs: kafka-acls, kafka-configs


def test_a_java_client_logs_in_as_its_own_user_and_is_held_to_her_acls(
    cluster: LocalCluster, admin: Admin, tmp_path: Path
) -> None:
    """alice (a SCRAM user with Write on one topic, made with sparklog's Admin), logging in with her
    own JAAS config: her Java producer writes the topic, her console consumer is refused with
    TopicAuthorizationException, and her login with a wrong password is refused."""
    topic, password = "ktls-alice", "alice-secret-1"
    admin.create_topic(topic, 1, 2)
    admin.upsert_scram_credential("alice", password)
    admin.create_acls([AclBinding.parse(ResourcePattern.parse("topic", topic), "User:alice", "*", "Write", "Allow")])
    servers = cluster.kafka_bootstrap_servers

    alice = java_properties_of(cluster, "alice", password, tmp_path)
    lines = [f"from alice {i}" for i in range(20)]
    tool(
        CONSOLE_PRODUCER, "--bootstrap-server", servers, "--command-config", alice, "--topic", topic,
        "--command-property", "acks=all", stdin="\n".join(lines) + "\n",
    )  # fmt: skip
    stored = consume(cluster, topic, len(lines), "ktls-alice-check")
    assert [value.decode() for *_, value in stored] == lines

    refused = run_tool(
        CONSOLE_CONSUMER, "--bootstrap-server", servers, "--command-config", alice, "--topic", topic,
        "--partition", "0", "--offset", "earliest", "--max-messages", "1", "--timeout-ms", "30000",
    )  # fmt: skip
    assert "TopicAuthorizationException" in refused.stderr, refused.stderr[-3000:]
    assert topic in refused.stderr
    assert not refused.stdout.strip()  # nothing was read

    wrong = java_properties_of(cluster, "alice", "not-her-password", tmp_path)
    denied = run_tool(TOPIC_COMMAND, "--bootstrap-server", servers, "--command-config", wrong, "--list")
    assert denied.returncode != 0
    assert "SaslAuthenticationException" in denied.stderr + denied.stdout, denied.stderr[-3000:]
    assert topic not in denied.stdout


def test_kafka_configs_makes_a_scram_user_and_kafka_acls_lets_him_write(
    cluster: LocalCluster, java_config: str, admin: Admin
) -> None:
    """``kafka-configs --alter --add-config SCRAM-SHA-256=[iterations=8192,password=...]`` makes a
    user and ``kafka-acls --add`` lets him write a topic (``--list`` shows it), both stored as
    sparklog's own users and ACLs: he logs in, writes the topic, is refused reading it, and a wrong
    password does not log in."""
    topic, password = "ktls-bob", "bob-secret-1"
    admin.create_topic(topic, 1, 2)
    admin_args = ["--bootstrap-server", cluster.kafka_bootstrap_servers, "--command-config", java_config]
    altered = tool(
        CONFIG_COMMAND, *admin_args, "--alter", "--entity-type", "users", "--entity-name", "bob",
        "--add-config", f"SCRAM-SHA-256=[iterations=8192,password={password}]",
    )  # fmt: skip
    assert "bob" in altered
    tool(ACL_COMMAND, *admin_args, "--add", "--allow-principal", "User:bob", "--operation", "Write", "--topic", topic)
    listed = tool(ACL_COMMAND, *admin_args, "--list", "--topic", topic)
    assert f"name={topic}" in listed and "principal=User:bob" in listed and "operation=WRITE" in listed, listed
    assert "permissionType=ALLOW" in listed
    assert admin.describe_scram_credentials(["bob"]) == {"bob": 8192}
    expected = AclBinding.parse(ResourcePattern.parse("topic", topic), "User:bob", "*", "Write", "Allow")
    assert expected in admin.describe_acls()

    bob = {**cluster.kafka_client_config(), "sasl.username": "bob", "sasl.password": password}
    produce(cluster, topic, [(0, b"k", b"from bob")], config=bob)
    assert [value for *_, value in consume(cluster, topic, 1, "ktls-bob-check")] == [b"from bob"]
    refused = KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert refused in kafka_errors({**bob, "group.id": "ktls-bob"}, topic, refused)
    wrong = {**bob, "sasl.password": "not-his-password", "group.id": "ktls-bob"}
    assert KafkaError._AUTHENTICATION in kafka_errors(wrong, topic, KafkaError._AUTHENTICATION)


# ----------------------------------------------------------------- Spark


def test_spark_kafka_connector_and_format_sparklog_read_over_sasl_ssl(
    spark: Any, cluster: LocalCluster, admin: Admin
) -> None:
    """Spark's ``format("kafka")`` with Kafka's SASL_SSL settings (a PEM truststore, a SCRAM JAAS
    login) reads every record confluent-kafka wrote, keys and values; ``format("sparklog")`` with
    sparklog's client settings reads the same records."""
    topic = "ktls-spark"
    admin.create_topic(topic, 3, 2)
    records = [(i % 3, f"k{i}".encode(), f"v{i}".encode()) for i in range(3000)]
    produce(cluster, topic, records)
    assert cluster.security is not None
    settings = cluster.kafka_client_config()
    jaas = (
        "org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="{settings["sasl.username"]}" password="{settings["sasl.password"]}";'
    )
    kafka = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", cluster.kafka_bootstrap_servers)
        .option("kafka.security.protocol", "SASL_SSL")
        .option("kafka.sasl.mechanism", "SCRAM-SHA-256")
        .option("kafka.sasl.jaas.config", jaas)
        .option("kafka.ssl.truststore.type", "PEM")
        .option("kafka.ssl.truststore.location", str(cluster.security.ca.certificate))
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .load()
    )
    native = spark.read.format("sparklog").options(**cluster.client_config()).option("subscribe", topic).load()

    def rows(df: Any) -> list[tuple[int, int, bytes, bytes]]:
        return sorted(
            (r["partition"], r["offset"], bytes(r["key"]), bytes(r["value"]))
            for r in df.select("partition", "offset", "key", "value").collect()
        )

    read = rows(kafka)
    assert sorted((p, k, v) for p, _, k, v in read) == sorted(records)
    assert rows(native) == read
