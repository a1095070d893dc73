"""Kafka clients on a secured cluster (``LocalCluster(secure=True)``, as ``sparklog up --secure``):
SASL_SSL Kafka listeners with SCRAM-SHA-256, the same users, ACLs and quotas as sparklog's own
clients. librdkafka (confluent-kafka) as the admin and as a user with few ACLs, raw connections as
a hostile client, and sparklog's own CLI reading what a Kafka client wrote.

The brokers ask for a new login every few seconds (``connections.max.reauth.ms``), so every client
of the module logs in again while it works (KIP-368)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import pytest
import scramp
from confluent_kafka import Consumer as KafkaConsumer
from confluent_kafka import KafkaError, TopicPartition
from confluent_kafka import Producer as KafkaProducer
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)
from kafka.protocol.metadata import ApiVersionsRequest, MetadataRequest
from kafka.protocol.sasl import SaslAuthenticateRequest, SaslHandshakeRequest

from kafka_wire import KafkaWire
from sparklog import Admin
from sparklog.fuzz.kafka_wire import CLOSED, client_tls
from sparklog.kafka import error_codes
from sparklog.local_cluster import LocalCluster
from sparklog.security.quotas import Quota
from waiting import wait_for

pytestmark = pytest.mark.timeout(300)

REAUTH_MS = 4000
CLI = [sys.executable, "-m", "sparklog.cli.main"]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    properties = {"connections.max.reauth.ms": str(REAUTH_MS)}
    with LocalCluster(
        tmp_path_factory.mktemp("kafka-secure"), brokers=2, secure=True, broker_properties=properties
    ) as c:
        yield c


@pytest.fixture(scope="module")
def admin_config(cluster: LocalCluster) -> dict[str, str]:
    return cluster.kafka_client_config()


@pytest.fixture(scope="module")
def kafka_admin(admin_config: dict[str, str]) -> AdminClient:
    return AdminClient(admin_config)


def as_user(admin_config: dict[str, str], user: str, password: str, **more: object) -> dict[str, object]:
    return {**admin_config, "sasl.username": user, "sasl.password": password, **more}


def wait_all(futures: dict) -> None:
    for future in futures.values():
        future.result(timeout=60)


def create_topic(kafka_admin: AdminClient, name: str, partitions: int = 2) -> None:
    wait_all(kafka_admin.create_topics([NewTopic(name, partitions, 2)]))


def add_user(kafka_admin: AdminClient, user: str, password: str) -> None:
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 8192)
    wait_all(kafka_admin.alter_user_scram_credentials([UserScramCredentialUpsertion(user, info, password.encode())]))


def allow(kafka_admin: AdminClient, user: str, operation: AclOperation, kind: ResourceType, name: str) -> AclBinding:
    binding = AclBinding(
        kind, name, ResourcePatternType.LITERAL, f"User:{user}", "*", operation, AclPermissionType.ALLOW
    )
    wait_all(kafka_admin.create_acls([binding]))
    return binding


def produce_all(config: dict[str, object], topic: str, values: list[bytes]) -> list[KafkaError | None]:
    """Each value's delivery outcome (None: acknowledged)."""
    outcomes: list[KafkaError | None] = []
    producer = KafkaProducer({"partitioner": "murmur2_random", "message.timeout.ms": 20000, **config})
    for value in values:
        producer.produce(topic, value=value, key=value, on_delivery=lambda err, _msg: outcomes.append(err))
    producer.flush(60)
    return outcomes


def first_error(
    config: dict[str, object], topic: str, partitions: int, group: str, subscribe: bool = False
) -> KafkaError | None:
    """The error a consumer gets reading ``topic``, if any, within a few seconds: assigned its
    partitions (it fetches at once), or subscribed (it must join ``group`` before any fetch)."""
    consumer = KafkaConsumer({**config, "group.id": group, "enable.auto.commit": False})
    try:
        if subscribe:
            consumer.subscribe([topic])
        else:
            consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is not None:
                return message.error()
        return None
    finally:
        consumer.close()


def test_a_user_the_admin_adds_writes_what_its_acls_allow_and_nothing_more(
    cluster: LocalCluster, admin_config: dict[str, str], kafka_admin: AdminClient
) -> None:
    create_topic(kafka_admin, "sec-events")
    create_topic(kafka_admin, "sec-hidden")
    add_user(kafka_admin, "alice", "alice-secret")
    allow(kafka_admin, "alice", AclOperation.WRITE, ResourceType.TOPIC, "sec-events")
    alice = as_user(admin_config, "alice", "alice-secret")

    values = [f"event-{i}".encode() for i in range(200)]
    assert produce_all(alice, "sec-events", values) == [None] * len(values)

    no_group = first_error(alice, "sec-events", 2, "alices-group", subscribe=True)
    assert no_group is not None and no_group.code() == KafkaError.GROUP_AUTHORIZATION_FAILED, no_group
    allow(kafka_admin, "alice", AclOperation.READ, ResourceType.GROUP, "alices-group")
    refused = first_error(alice, "sec-events", 2, "alices-group")
    assert refused is not None and refused.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, refused

    alice_admin = AdminClient(alice)
    listed = alice_admin.list_topics(timeout=20).topics
    assert "sec-events" in listed and "sec-hidden" not in listed  # Write implies Describe; nothing else

    created = alice_admin.create_topics([NewTopic("sec-alices-own", 1, 1)])
    with pytest.raises(Exception) as denied:
        wait_all(created)
    assert denied.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED

    # what the Kafka client wrote, sparklog's own CLI reads (over its SASL_SSL Flight listener)
    assert cluster.security is not None
    read = subprocess.run(
        [*CLI, "consume", "sec-events", "--from-beginning", "--max-messages", "200", "--timeout-ms", "20000"]
        + ["--command-config", str(cluster.security.client_properties), "--quiet"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert read.returncode == 0, read.stderr
    assert sorted(read.stdout.split()) == sorted(v.decode() for v in values)


def test_a_group_consumer_needs_read_on_topic_and_group(admin_config: dict[str, str], kafka_admin: AdminClient) -> None:
    create_topic(kafka_admin, "sec-orders")
    values = [f"order-{i}".encode() for i in range(100)]
    assert produce_all(admin_config, "sec-orders", values) == [None] * len(values)
    add_user(kafka_admin, "bob", "bob-secret")
    allow(kafka_admin, "bob", AclOperation.READ, ResourceType.TOPIC, "sec-orders")
    bob = as_user(admin_config, "bob", "bob-secret")

    def subscribe(group: str) -> tuple[list[bytes], KafkaError | None]:
        consumer = KafkaConsumer({**bob, "group.id": group, "auto.offset.reset": "earliest"})
        got: list[bytes] = []
        try:
            consumer.subscribe(["sec-orders"])
            deadline = time.monotonic() + 40
            while len(got) < len(values) and time.monotonic() < deadline:
                message = consumer.poll(0.5)
                if message is None:
                    continue
                if message.error() is not None:
                    return got, message.error()
                got.append(message.value())
            return got, None
        finally:
            consumer.close()

    got, error = subscribe("bobs-group")
    assert got == [] and error is not None and error.code() == KafkaError.GROUP_AUTHORIZATION_FAILED, error
    allow(kafka_admin, "bob", AclOperation.READ, ResourceType.GROUP, "bobs-group")
    got, error = subscribe("bobs-group")
    assert error is None and sorted(got) == sorted(values)


def test_a_wrong_password_is_refused(admin_config: dict[str, str]) -> None:
    errors: list[KafkaError] = []
    wrong = {**admin_config, "sasl.password": "not-the-password", "error_cb": errors.append}
    outcomes = produce_all({**wrong, "message.timeout.ms": 5000}, "sec-events", [b"never"])
    assert outcomes and outcomes[0] is not None  # not delivered
    assert any(e.code() == KafkaError._AUTHENTICATION for e in errors), errors
    assert any("unknown user or wrong password" in e.str() for e in errors), errors


def test_a_plaintext_client_gets_nothing_from_the_sasl_ssl_port(cluster: LocalCluster) -> None:
    port = cluster.brokers[1].kafka_port
    assert port is not None
    with KafkaWire("127.0.0.1", port, timeout=10) as plain:
        answer = plain.exchange(ApiVersionsRequest[3](client_software_name="x", client_software_version="1"))
        assert answer.response is None  # a TLS listener does not answer a plaintext request


def tls_wire(cluster: LocalCluster, broker_id: int = 1) -> KafkaWire:
    assert cluster.security is not None
    port = cluster.brokers[broker_id].kafka_port
    assert port is not None
    return KafkaWire("127.0.0.1", port, timeout=10, tls=client_tls(str(cluster.security.ca.certificate)))


def test_a_client_that_skips_or_breaks_the_login_is_closed_and_the_broker_serves_on(
    cluster: LocalCluster, admin_config: dict[str, str]
) -> None:
    with tls_wire(cluster) as skipped:  # Metadata before any login
        assert skipped.exchange(MetadataRequest[12](topics=None)).problem == CLOSED

    with tls_wire(cluster) as early:  # SaslAuthenticate before SaslHandshake
        answer = early.request(SaslAuthenticateRequest[2](auth_bytes=b"n,,n=admin,r=abc"))
        assert answer.error_code == error_codes.ILLEGAL_SASL_STATE
        assert early.closed_by_broker(timeout=5)

    with tls_wire(cluster) as unknown_mechanism:
        answer = unknown_mechanism.request(SaslHandshakeRequest[1](mechanism="GSSAPI"))
        assert answer.error_code == error_codes.UNSUPPORTED_SASL_MECHANISM
        assert "SCRAM-SHA-256" in answer.mechanisms
        assert unknown_mechanism.closed_by_broker(timeout=5)

    with tls_wire(cluster) as oversize_token:
        oversize_token.request(SaslHandshakeRequest[1](mechanism="SCRAM-SHA-256"))
        answer = oversize_token.request(SaslAuthenticateRequest[2](auth_bytes=b"n,,n=admin,r=" + b"x" * 10_000))
        assert answer.error_code == error_codes.SASL_AUTHENTICATION_FAILED
        assert oversize_token.closed_by_broker(timeout=5)

    with tls_wire(cluster) as oversize_frame:  # refused before it is read: the body is never sent
        oversize_frame.send_bytes((600 * 1024).to_bytes(4, "big") + b"\x00\x24\x00\x02")
        assert oversize_frame.closed_by_broker(timeout=5)

    password = admin_config["sasl.password"]
    with tls_wire(cluster) as first:  # a login whose messages are then replayed on another connection
        client = scramp.ScramClient(["SCRAM-SHA-256"], "admin", password)
        first.request(SaslHandshakeRequest[1](mechanism="SCRAM-SHA-256"))
        client_first = client.get_client_first().encode()
        server_first = first.request(SaslAuthenticateRequest[2](auth_bytes=client_first))
        client.set_server_first(bytes(server_first.auth_bytes).decode())
        client_final = client.get_client_final().encode()
        assert first.request(SaslAuthenticateRequest[2](auth_bytes=client_final)).error_code == 0
    with tls_wire(cluster) as replay:
        replay.request(SaslHandshakeRequest[1](mechanism="SCRAM-SHA-256"))
        again = replay.request(SaslAuthenticateRequest[2](auth_bytes=client_first))
        assert bytes(again.auth_bytes) != bytes(server_first.auth_bytes)  # a new server nonce
        answer = replay.request(SaslAuthenticateRequest[2](auth_bytes=client_final))
        assert answer.error_code == error_codes.SASL_AUTHENTICATION_FAILED
        assert replay.closed_by_broker(timeout=5)

    assert produce_all(admin_config, "sec-events", [b"after-the-hostile-ones"]) == [None]


def test_a_session_must_log_in_again_within_its_lifetime(cluster: LocalCluster, admin_config: dict[str, str]) -> None:
    password = admin_config["sasl.password"]
    with tls_wire(cluster) as stale:
        login = stale.login("admin", password)
        assert login.response is not None and login.response.error_code == 0
        assert login.response.session_lifetime_ms == REAUTH_MS
        assert stale.request(MetadataRequest[12](topics=None)).brokers  # served while the session holds
        time.sleep(REAUTH_MS / 1000 + 0.5)
        assert stale.exchange(MetadataRequest[12](topics=None)).problem == CLOSED

    with tls_wire(cluster) as renewed:
        assert renewed.login("admin", password).response.error_code == 0
        time.sleep(REAUTH_MS / 2000)
        assert renewed.login("admin", password).response.error_code == 0  # a new login renews it
        time.sleep(REAUTH_MS / 1000 * 0.7)  # past the first login's lifetime, within the second's
        assert renewed.request(MetadataRequest[12](topics=None)).brokers


def test_a_new_login_as_another_user_is_refused(
    cluster: LocalCluster, admin_config: dict[str, str], kafka_admin: AdminClient
) -> None:
    add_user(kafka_admin, "carol", "carol-secret")
    with tls_wire(cluster) as wire:
        assert wire.login("admin", admin_config["sasl.password"]).response.error_code == 0
        answer = wire.login("carol", "carol-secret").response
        assert answer.error_code == error_codes.SASL_AUTHENTICATION_FAILED
        assert "User:admin" in answer.error_message
        assert wire.closed_by_broker(timeout=5)


def test_librdkafka_logs_in_again_while_it_produces(admin_config: dict[str, str], kafka_admin: AdminClient) -> None:
    """Over three session lifetimes, librdkafka logs in again on its open connections: none is
    closed by the broker (which would close one whose session ran out) and every record lands."""
    create_topic(kafka_admin, "sec-long")
    stats: list[dict] = []
    config = {**admin_config, "statistics.interval.ms": 1000, "stats_cb": lambda text: stats.append(json.loads(text))}
    producer = KafkaProducer({**config, "partitioner": "murmur2_random"})
    outcomes: list[KafkaError | None] = []
    sent = 0
    deadline = time.monotonic() + 3 * REAUTH_MS / 1000
    while time.monotonic() < deadline:
        producer.produce("sec-long", value=f"{sent}".encode(), on_delivery=lambda err, _m: outcomes.append(err))
        sent += 1
        producer.poll(0.02)
    producer.flush(60)
    producer.poll(1.5)  # one more statistics report
    assert len(outcomes) == sent and all(o is None for o in outcomes)
    brokers = [b for b in stats[-1]["brokers"].values() if b["nodeid"] >= 0 and b["connects"] > 0]
    assert brokers and all(b["disconnects"] == 0 for b in brokers), [
        (b["name"], b["connects"], b["disconnects"]) for b in stats[-1]["brokers"].values()
    ]


def test_a_removed_user_loses_its_open_connections(
    cluster: LocalCluster, admin_config: dict[str, str], kafka_admin: AdminClient
) -> None:
    add_user(kafka_admin, "dave", "dave-secret")
    with tls_wire(cluster) as wire:
        assert wire.login("dave", "dave-secret").response.error_code == 0
        assert wire.request(MetadataRequest[12](topics=None)).brokers
        info = ScramMechanism.SCRAM_SHA_256
        wait_all(kafka_admin.alter_user_scram_credentials([UserScramCredentialDeletion("dave", info)]))
        ended = lambda: wire.exchange(MetadataRequest[12](topics=None)).problem == CLOSED  # noqa: E731
        wait_for(ended, 10, "the removed user's connection to close")
    with tls_wire(cluster) as again:
        assert again.login("dave", "dave-secret").response.error_code == error_codes.SASL_AUTHENTICATION_FAILED


def test_a_user_over_its_quota_is_throttled(
    cluster: LocalCluster, admin_config: dict[str, str], kafka_admin: AdminClient
) -> None:
    create_topic(kafka_admin, "sec-quota", partitions=1)
    add_user(kafka_admin, "erin", "erin-secret")
    allow(kafka_admin, "erin", AclOperation.WRITE, ResourceType.TOPIC, "sec-quota")
    with Admin(config=cluster.client_config()) as admin:
        admin.set_client_quota("erin", Quota(producer_byte_rate=50_000))
    throttled: list[int] = []
    lock = threading.Lock()

    def on_throttle(event: object) -> None:
        with lock:
            throttled.append(int(event.throttle_time * 1000))  # type: ignore[attr-defined]

    erin = as_user(admin_config, "erin", "erin-secret", throttle_cb=on_throttle, **{"linger.ms": 5})
    values = [bytes(1000) for _ in range(400)]  # 400 KB against 50 KB/s
    assert produce_all(erin, "sec-quota", values) == [None] * len(values)
    assert throttled and max(throttled) > 0, throttled
