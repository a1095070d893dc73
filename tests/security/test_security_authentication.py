"""TLS and SASL on real broker processes: certificates made by the test, users in the test's
ZooKeeper root, clients over SASL_SSL (issue 17)."""

from __future__ import annotations

import time
from pathlib import Path

import pyarrow.flight as flight
import pytest

from broker_helpers import BrokerProcess
from security_helpers import SecureSetup
from sparklog.client.admin import Admin
from sparklog.client.consumer import Consumer
from sparklog.client.producer import Producer
from sparklog.errors import AuthenticationFailed, BrokerNotAvailable, InvalidConfig
from sparklog.protocol import wire
from sparklog.security.certificates import CertificateAuthority
from sparklog.security.client_config import ClientSecurity

TOPIC = "secured"


@pytest.fixture
def secure(sparklog_connect: str, tmp_path: Path) -> SecureSetup:
    return SecureSetup.create(tmp_path / "security", sparklog_connect)


@pytest.fixture
def secure_broker(secure: SecureSetup, sparklog_connect: str, child_processes, tmp_path: Path) -> BrokerProcess:
    return secure.start_broker(tmp_path, child_processes)


def read_all(consumer: Consumer, expected: int) -> list[bytes]:
    values: list[bytes] = []
    for _ in range(200):
        for batch in consumer.poll_batches(timeout=0.2):
            values.extend(batch.column("value").to_pylist())
        if len(values) >= expected:
            break
    return values


def test_a_user_produces_and_consumes_over_sasl_ssl(secure: SecureSetup, secure_broker: BrokerProcess) -> None:
    with Admin(secure.connect, config=secure.client("admin")) as admin:
        admin.create_topic(TOPIC, 2, 1)
    values = [f"v{i}".encode() for i in range(500)]
    with Producer(secure.connect, acks="all", config=secure.client("alice")) as producer:
        for value in values:
            producer.send(TOPIC, value)
    with Consumer(TOPIC, zookeeper=secure.connect, auto_offset_reset="earliest", config=secure.client("alice")) as c:
        got = read_all(c, len(values))
    assert sorted(got) == sorted(values)


def test_plaintext_and_wrong_credentials_are_refused(secure: SecureSetup, secure_broker: BrokerProcess) -> None:
    location = f"grpc+tls://127.0.0.1:{secure_broker.port}"
    for user, password in (("alice", "wrong"), ("mallory", "anything")):
        security = ClientSecurity.from_config(secure.client(user, password))
        with pytest.raises(AuthenticationFailed, match="unknown user or wrong password"):
            wire.flight_client(location, security=security)
    # TLS without SASL on a SASL listener: every call needs a session first
    tls_only = ClientSecurity.from_config({"security.protocol": "SSL", "ssl.ca.location": str(secure.ca.certificate)})
    client = wire.flight_client(location, security=tls_only)
    with pytest.raises(flight.FlightUnauthenticatedError, match="needs authentication"):
        list(client.do_action(flight.Action(wire.PING, b"{}")))
    # plaintext to the TLS listener: no answer (the TLS handshake fails)
    plain = flight.FlightClient(f"grpc+tcp://127.0.0.1:{secure_broker.port}")
    with pytest.raises(flight.FlightUnavailableError):
        list(plain.do_action(flight.Action(wire.PING, b"{}"), flight.FlightCallOptions(timeout=5)))
    # a certificate from another CA is not trusted
    other = CertificateAuthority.create("someone else").write(secure.directory / "other")
    untrusted = ClientSecurity.from_config({**secure.client("alice"), "ssl.ca.location": str(other.certificate)})
    with pytest.raises(BrokerNotAvailable, match="not reachable"):  # gRPC: the TLS handshake failed
        wire.flight_client(location, security=untrusted)
    # the producer names the problem: no PLAINTEXT listener
    with Admin(secure.connect, config=secure.client("admin")) as admin:
        admin.create_topic(TOPIC, 1, 1)
    with pytest.raises(InvalidConfig, match="no PLAINTEXT listener"), Producer(secure.connect) as producer:
        producer.send(TOPIC, b"x").result(10)


def test_a_removed_user_loses_its_session(secure: SecureSetup, secure_broker: BrokerProcess) -> None:
    location = f"grpc+tls://127.0.0.1:{secure_broker.port}"
    client = wire.flight_client(location, security=ClientSecurity.from_config(secure.client("bob")))
    assert list(client.do_action(flight.Action(wire.PING, b"{}")))
    with secure.store() as store:
        assert store.remove("bob")
    for _ in range(50):
        try:
            list(client.do_action(flight.Action(wire.PING, b"{}")))
        except flight.FlightUnauthenticatedError as exc:
            assert "no longer exists" in str(exc)
            return
        time.sleep(0.1)
    raise AssertionError("bob's session still works after bob was removed")
