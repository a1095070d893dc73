"""A broker's Kafka listeners as its properties file sets them: every security protocol, names
mapped by ``listener.security.protocol.map``, and the settings refused with a message naming the
problem (a Kafka listener that would let anyone past an authenticating broker, TLS without a
certificate, a bad session lifetime). ``BROKER_PROPERTIES`` names exactly the keys the loader
reads, and a key it does not know is ignored with a warning naming it."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from sparklog.errors import InvalidConfig
from sparklog.security.broker_config import BROKER_PROPERTIES, BrokerSecurity, Listener

TLS = {"ssl.certificate.location": "/etc/b.pem", "ssl.key.location": "/etc/b-key.pem", "ssl.ca.location": "/etc/ca.pem"}
SECURED = {
    **TLS,
    "listeners": "SASL_SSL://127.0.0.1:9092",
    "security.inter.broker.protocol": "SASL_SSL",
    "inter.broker.sasl.username": "broker",
    "inter.broker.sasl.password": "broker-secret",
}


def test_every_security_protocol_is_a_kafka_listener() -> None:
    security = BrokerSecurity.from_properties(
        {
            **SECURED,
            "kafka.listeners": "SASL_SSL://127.0.0.1:19092,SSL://127.0.0.1:19093,SASL_PLAINTEXT://127.0.0.1:19094",
            "connections.max.reauth.ms": "60000",
            "ssl.client.auth": "required",  # SSL clients present certificates: no anonymous way in
        },
        "127.0.0.1",
        9092,
    )
    assert security.kafka_listeners == (
        Listener("SASL_SSL", "127.0.0.1", 19092),
        Listener("SSL", "127.0.0.1", 19093),
        Listener("SASL_PLAINTEXT", "127.0.0.1", 19094),
    )
    assert security.kafka_advertised == security.kafka_listeners and security.reauth_ms == 60000


def test_listener_names_map_to_protocols() -> None:
    security = BrokerSecurity.from_properties(
        {
            **SECURED,
            "kafka.listeners": "CLIENT://0.0.0.0:19092,REPLICATION://127.0.0.1:19093",
            "kafka.advertised.listeners": "CLIENT://broker1.example.com:19092,REPLICATION://127.0.0.1:19093",
            "listener.security.protocol.map": "CLIENT:SASL_SSL, replication:SSL",
            "ssl.client.auth": "required",
        },
        "127.0.0.1",
        9092,
    )
    assert [(listener.protocol, listener.port) for listener in security.kafka_listeners] == [
        ("SASL_SSL", 19092),
        ("SSL", 19093),
    ]
    assert security.kafka_advertised[0] == Listener("SASL_SSL", "broker1.example.com", 19092)


@pytest.mark.parametrize(
    "properties, named",
    [
        ({"kafka.listeners": "CLIENT://127.0.0.1:19092"}, "CLIENT"),  # a name without a mapping
        ({"kafka.listeners": "CLIENT://127.0.0.1:19092", "listener.security.protocol.map": "CLIENT"}, "NAME:PROTOCOL"),
        (
            {"kafka.listeners": "CLIENT://127.0.0.1:1", "listener.security.protocol.map": "CLIENT:KERBEROS"},
            "NAME:PROTOCOL",
        ),
        ({"kafka.listeners": "PLAINTEXT://127.0.0.1:19092"}, "past this broker's authentication"),
        ({"kafka.listeners": "SSL://127.0.0.1:19092"}, "ssl.client.auth=required"),  # SSL without client certificates
        ({"kafka.listeners": "SASL_SSL://127.0.0.1:1", "connections.max.reauth.ms": "-5"}, "connections.max.reauth.ms"),
        ({"kafka.listeners": "SASL_SSL://0.0.0.0:19092"}, "kafka.advertised.listeners"),
    ],
)
def test_bad_kafka_listener_settings_are_refused_by_name(properties: dict[str, str], named: str) -> None:
    with pytest.raises(InvalidConfig, match=named):
        BrokerSecurity.from_properties({**SECURED, **properties}, "127.0.0.1", 9092)


def test_a_tls_kafka_listener_needs_the_brokers_certificate() -> None:
    with pytest.raises(InvalidConfig, match="ssl.certificate.location"):
        BrokerSecurity.from_properties(
            {"authorizer.enabled": "true", "kafka.listeners": "SSL://127.0.0.1:19092"}, "127.0.0.1", 9092
        )


def test_with_acls_on_an_anonymous_kafka_listener_is_the_administrators_choice() -> None:
    """``User:ANONYMOUS`` is held to the ACLs like anyone (Kafka allows such a listener too)."""
    security = BrokerSecurity.from_properties(
        {**SECURED, "authorizer.enabled": "true", "kafka.listeners": "PLAINTEXT://127.0.0.1:19092"}, "127.0.0.1", 9092
    )
    assert security.kafka_listeners == (Listener("PLAINTEXT", "127.0.0.1", 19092),)


def test_kafka_port_opens_no_plaintext_listener_on_a_secured_broker() -> None:
    secured = BrokerSecurity.from_properties(SECURED, "127.0.0.1", 9092)
    with pytest.raises(InvalidConfig, match="kafka.listeners"):
        secured.with_kafka_port("127.0.0.1", 19092)
    plain = BrokerSecurity.plaintext("127.0.0.1", 9092)
    assert plain.with_kafka_port("127.0.0.1", 19092).kafka_listeners == (Listener("PLAINTEXT", "127.0.0.1", 19092),)


class _Recorded(dict[str, str]):
    """Properties that remember which keys were looked up."""

    def __init__(self, values: dict[str, str]) -> None:
        super().__init__(values)
        self.looked_up: set[str] = set()

    def get(self, key: str, default: Any = None) -> Any:
        self.looked_up.add(key)
        return super().get(key, default)

    def __getitem__(self, key: str) -> str:
        self.looked_up.add(key)
        return super().__getitem__(key)

    def __contains__(self, key: object) -> bool:
        self.looked_up.add(str(key))
        return super().__contains__(key)


EVERY_SETTING = {
    **SECURED,
    "listeners": "SASL_SSL://0.0.0.0:9092",
    "advertised.listeners": "SASL_SSL://broker1.example.com:9092",
    "ssl.client.auth": "none",
    "sasl.enabled.mechanisms": "SCRAM-SHA-256,PLAIN",
    "super.users": "User:admin;User:broker",
    "authorizer.enabled": "true",
    "zookeeper.digest": "sparklog:zookeeper-secret",
    "log.dirs.owner.only": "true",
    "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-256",
    "kafka.listeners": "CLIENT://0.0.0.0:19092",
    "kafka.advertised.listeners": "CLIENT://broker1.example.com:19092",
    "listener.security.protocol.map": "CLIENT:SASL_SSL",
    "connections.max.reauth.ms": "3600000",
    "auto.create.topics.enable": "false",
}


def test_broker_properties_names_every_key_the_loader_reads(caplog: pytest.LogCaptureFixture) -> None:
    """Given every setting, the loader looks up exactly ``BROKER_PROPERTIES`` (the table
    docs/operations.md is checked against), and warns about none of them."""
    assert len(set(BROKER_PROPERTIES)) == len(BROKER_PROPERTIES)
    assert set(EVERY_SETTING) == set(BROKER_PROPERTIES)
    properties = _Recorded(EVERY_SETTING)
    with caplog.at_level(logging.WARNING, logger="sparklog.security.broker_config"):
        security = BrokerSecurity.from_properties(properties, "127.0.0.1", 9092)
    assert properties.looked_up == set(BROKER_PROPERTIES)
    assert not caplog.records
    assert security.authorizer and security.owner_only and not security.auto_create_topics
    assert security.broker_principal == "User:broker" and security.mechanisms == ("SCRAM-SHA-256", "PLAIN")


def test_an_unknown_key_is_ignored_with_a_warning_naming_it(caplog: pytest.LogCaptureFixture) -> None:
    """A typo (``authorizer.enable``) or a Kafka setting sparklog takes elsewhere (``broker.id`` is
    ``--id``) changes nothing, and the broker's log says so."""
    with caplog.at_level(logging.WARNING, logger="sparklog.security.broker_config"):
        security = BrokerSecurity.from_properties(
            {**SECURED, "authorizer.enable": "true", "broker.id": "2"}, "127.0.0.1", 9092
        )
    assert not security.authorizer
    (warning,) = caplog.records
    assert "'authorizer.enable'" in warning.getMessage() and "'broker.id'" in warning.getMessage()
