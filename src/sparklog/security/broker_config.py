"""A broker's listeners and security settings, with Kafka's names where they exist, from a
properties file (``sparklog broker --config server.properties``):

- ``listeners``: ``PROTOCOL://host:port,...`` with PROTOCOL one of PLAINTEXT, SSL,
  SASL_PLAINTEXT, SASL_SSL (the listener's name is its protocol: one listener per protocol);
  port 0 picks a free port. Default: ``PLAINTEXT://<--host>:<--port>``.
- ``advertised.listeners``: what clients and other brokers are told, same form (default: the
  listeners; a listener bound to ``0.0.0.0`` needs one).
- ``ssl.certificate.location``, ``ssl.key.location``: the broker's certificate and key (PEM), for
  its TLS listeners; ``ssl.ca.location``: the CA it trusts for client certificates and for other
  brokers; ``ssl.client.auth``: ``required`` (mutual TLS) or ``none`` (default).
- ``sasl.enabled.mechanisms``: ``SCRAM-SHA-256`` (default) and/or ``PLAIN``.
- ``super.users``: ``User:admin;User:broker`` — allowed everything.
- ``zookeeper.digest``: ``user:password``: authenticate to ZooKeeper and create znodes only that
  identity may change (:mod:`sparklog.coordination.zookeeper_acls`).
- ``authorizer.enabled``: ``true`` to check ACLs (ZooKeeper, ``sparklog acls``) on every call;
  then a call that no ACL allows is refused (Kafka's ``allow.everyone.if.no.acl.found=false``).
- ``log.dirs.owner.only``: ``true`` to keep the data owner-only: the broker runs with umask 077
  (segments, indexes, Delta tables created 0600 in 0700 directories) and makes its data directory
  so on start (:mod:`sparklog.file_modes`; ``sparklog up --secure`` sets it).
- ``kafka.listeners`` / ``kafka.advertised.listeners``: the Kafka-protocol listeners, same form, any
  of the four protocols (names other than protocols through ``listener.security.protocol.map``,
  ``CLIENT:SASL_SSL``); they share the certificates, users, ACLs and quotas above.
  ``connections.max.reauth.ms``: how long a Kafka client's SASL login lasts before it must log in
  again (0, the default: as long as its connection). Without the authorizer, a Kafka listener
  that lets anyone in is refused on a broker whose Flight listeners all authenticate.
- ``auto.create.topics.enable``: Kafka clients' Metadata requests create unknown topics (default true).
- ``security.inter.broker.protocol``: the listener brokers use among themselves (default
  PLAINTEXT); with SASL, ``inter.broker.sasl.username`` / ``inter.broker.sasl.password`` are the
  credentials this broker authenticates with (its principal, registered in ZooKeeper), and
  ``sasl.mechanism.inter.broker.protocol`` the mechanism (default SCRAM-SHA-256).

:data:`BROKER_PROPERTIES` names every one of them; a file's other keys are ignored with a warning
in the broker's log, as Kafka warns about settings it does not know (docs/operations.md lists
them all, and a test keeps the two in step).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from pathlib import Path

from sparklog.coordination.zookeeper_acls import ZooKeeperDigest
from sparklog.errors import InvalidConfig
from sparklog.security.certificates import certificate_name
from sparklog.security.client_config import MECHANISMS, PROTOCOLS, ClientSecurity
from sparklog.security.principal import parse_principal, user_principal

TLS_PROTOCOLS = ("SSL", "SASL_SSL")
SASL_PROTOCOLS = ("SASL_PLAINTEXT", "SASL_SSL")

BROKER_PROPERTIES = (
    "listeners",
    "advertised.listeners",
    "ssl.certificate.location",
    "ssl.key.location",
    "ssl.ca.location",
    "ssl.client.auth",
    "sasl.enabled.mechanisms",
    "super.users",
    "authorizer.enabled",
    "zookeeper.digest",
    "log.dirs.owner.only",
    "security.inter.broker.protocol",
    "sasl.mechanism.inter.broker.protocol",
    "inter.broker.sasl.username",
    "inter.broker.sasl.password",
    "kafka.listeners",
    "kafka.advertised.listeners",
    "listener.security.protocol.map",
    "connections.max.reauth.ms",
    "auto.create.topics.enable",
)
"""Every key of a broker's properties file that :meth:`BrokerSecurity.from_properties` reads."""

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Listener:
    protocol: str
    host: str
    port: int

    @property
    def tls(self) -> bool:
        return self.protocol in TLS_PROTOCOLS

    @property
    def sasl(self) -> bool:
        return self.protocol in SASL_PROTOCOLS

    @property
    def bind_location(self) -> str:
        return f"{'grpc+tls' if self.tls else 'grpc+tcp'}://{self.host}:{self.port}"


def parse_listeners(text: str, setting: str = "listeners") -> tuple[Listener, ...]:
    listeners: list[Listener] = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        protocol, sep, address = item.partition("://")
        host, colon, port = address.rpartition(":")
        if not sep or not colon or not port.isdigit() or not 0 <= int(port) < 65536:
            raise InvalidConfig(f"{setting}: {item!r:.80} is not PROTOCOL://host:port")
        protocol = protocol.upper()
        if protocol not in PROTOCOLS:
            raise InvalidConfig(f"{setting}: protocol {protocol!r:.40} is not one of {', '.join(PROTOCOLS)}")
        if any(listener.protocol == protocol for listener in listeners):
            raise InvalidConfig(f"{setting}: {protocol} is listed twice (one listener per protocol)")
        listeners.append(Listener(protocol, host.strip("[]") or "0.0.0.0", int(port)))
    if not listeners:
        raise InvalidConfig(f"{setting} is empty")
    return tuple(listeners)


@dataclasses.dataclass(frozen=True)
class BrokerSecurity:
    listeners: tuple[Listener, ...]
    advertised: tuple[Listener, ...]
    certificate_location: str | None = None
    key_location: str | None = None
    ca_location: str | None = None
    client_auth: bool = False
    mechanisms: tuple[str, ...] = ("SCRAM-SHA-256",)
    super_users: frozenset[str] = frozenset()
    inter_broker: ClientSecurity = ClientSecurity()
    authorizer: bool = False
    zookeeper_digest: ZooKeeperDigest | None = None
    owner_only: bool = False
    kafka_listeners: tuple[Listener, ...] = ()  # the Kafka-protocol listeners (kafka.listeners)
    kafka_advertised: tuple[Listener, ...] = ()
    auto_create_topics: bool = True  # auto.create.topics.enable (Kafka's default): Kafka clients' Metadata creates
    reauth_ms: int = 0  # connections.max.reauth.ms: a Kafka client's SASL login lasts this long (0: its connection)

    @classmethod
    def plaintext(cls, host: str, port: int, kafka_port: int | None = None) -> BrokerSecurity:
        """One plaintext Flight listener on ``host``:``port``, and a plaintext Kafka listener on
        ``kafka_port`` unless it is None (0: any free port)."""
        listener = Listener("PLAINTEXT", host, port)
        kafka = (Listener("PLAINTEXT", host, kafka_port),) if kafka_port is not None else ()
        return cls((listener,), (listener,), kafka_listeners=kafka, kafka_advertised=kafka)

    def with_kafka_port(self, host: str, kafka_port: int | None) -> BrokerSecurity:
        """These settings, plus a plaintext Kafka listener on ``kafka_port`` when none is configured
        (``--kafka-port``; None: none)."""
        if self.kafka_listeners or kafka_port is None:
            return self
        if self.authorizer or self.authenticates or any(listener.tls for listener in self.listeners):
            raise InvalidConfig(
                "--kafka-port opens a plaintext Kafka listener, which would let anyone past this secured "
                "broker's TLS and SASL: configure kafka.listeners instead"
            )
        kafka = (Listener("PLAINTEXT", host, kafka_port),)
        return dataclasses.replace(self, kafka_listeners=kafka, kafka_advertised=kafka)

    @classmethod
    def from_properties(cls, properties: Mapping[str, str], host: str, port: int) -> BrokerSecurity:
        """The settings among ``properties`` (see the module's docstring); ``host``/``port``: the
        default plaintext listener. Keys not in :data:`BROKER_PROPERTIES` are ignored, with a warning."""
        unknown = sorted(key for key in properties if key not in BROKER_PROPERTIES)
        if unknown:
            log.warning(
                "broker properties: ignoring %s, which sparklog does not know (it reads: %s)",
                ", ".join(repr(key[:80]) for key in unknown),
                ", ".join(BROKER_PROPERTIES),
            )
        listeners = parse_listeners(properties.get("listeners") or f"PLAINTEXT://{host}:{port}")
        advertised = listeners
        if properties.get("advertised.listeners"):
            advertised = parse_listeners(properties["advertised.listeners"], "advertised.listeners")
            if sorted(a.protocol for a in advertised) != sorted(b.protocol for b in listeners):
                raise InvalidConfig("advertised.listeners must name the same protocols as listeners")
        else:
            for listener in listeners:
                if listener.host in ("0.0.0.0", "::", ""):
                    raise InvalidConfig(
                        f"listener {listener.protocol} binds {listener.host!r}: set advertised.listeners to the "
                        "address clients should use"
                    )
        certificate, key = properties.get("ssl.certificate.location"), properties.get("ssl.key.location")
        ca = properties.get("ssl.ca.location")
        if any(listener.tls for listener in listeners) and not (certificate and key):
            raise InvalidConfig("a TLS listener needs ssl.certificate.location and ssl.key.location")
        client_auth = properties.get("ssl.client.auth", "none").lower()
        if client_auth not in ("none", "required"):
            raise InvalidConfig(f"ssl.client.auth must be 'required' or 'none', got {client_auth!r:.40}")
        if client_auth == "required" and not ca:
            raise InvalidConfig("ssl.client.auth=required needs ssl.ca.location (the CA of client certificates)")
        mechanisms = tuple(
            m.strip().upper()
            for m in properties.get("sasl.enabled.mechanisms", "SCRAM-SHA-256").split(",")
            if m.strip()
        )
        for mechanism in mechanisms:
            if mechanism not in MECHANISMS:
                raise InvalidConfig(f"sasl.enabled.mechanisms: {mechanism!r:.40} is not one of {', '.join(MECHANISMS)}")
        super_users = frozenset(
            parse_principal(p.strip()) for p in properties.get("super.users", "").split(";") if p.strip()
        )
        authorizer = _boolean(properties, "authorizer.enabled")
        owner_only = _boolean(properties, "log.dirs.owner.only")
        protocol = properties.get("security.inter.broker.protocol", "PLAINTEXT").upper()
        if protocol not in (listener.protocol for listener in listeners):
            raise InvalidConfig(f"security.inter.broker.protocol is {protocol} but no listener uses it")
        inter = {
            "security.protocol": protocol,
            "sasl.mechanism": properties.get("sasl.mechanism.inter.broker.protocol", "SCRAM-SHA-256"),
            "sasl.username": properties.get("inter.broker.sasl.username"),
            "sasl.password": properties.get("inter.broker.sasl.password"),
            "ssl.ca.location": ca,
        }
        if client_auth == "required":
            inter["ssl.certificate.location"], inter["ssl.key.location"] = certificate, key
        try:
            inter_broker = ClientSecurity.from_config(inter)
        except InvalidConfig as exc:
            raise InvalidConfig(f"inter-broker settings: {exc} (inter.broker.sasl.username/password)") from None
        kafka_listeners, kafka_advertised = _kafka_listeners(properties)
        if kafka_listeners and not authorizer:
            _refuse_open_kafka_listeners(listeners, kafka_listeners, client_auth == "required")
        if any(listener.tls for listener in kafka_listeners) and not (certificate and key):
            raise InvalidConfig("a TLS Kafka listener needs ssl.certificate.location and ssl.key.location")
        reauth_ms = properties.get("connections.max.reauth.ms", "0")
        if not reauth_ms.isdigit():
            raise InvalidConfig(f"connections.max.reauth.ms must be 0 or more milliseconds, got {reauth_ms!r:.40}")
        return cls(
            listeners,
            advertised,
            certificate,
            key,
            ca,
            client_auth == "required",
            mechanisms,
            super_users,
            inter_broker,
            authorizer,
            ZooKeeperDigest.parse(properties["zookeeper.digest"]) if properties.get("zookeeper.digest") else None,
            owner_only,
            kafka_listeners,
            kafka_advertised,
            _boolean(properties, "auto.create.topics.enable", "true"),
            int(reauth_ms),
        )

    @property
    def broker_principal(self) -> str | None:
        """Whom this broker authenticates as to other brokers: its SASL user, or over mutual TLS its
        certificate's name (None: it does not authenticate)."""
        if self.inter_broker.sasl and self.inter_broker.username:
            return user_principal(self.inter_broker.username)
        if self.inter_broker.protocol == "SSL" and self.client_auth and self.certificate_location:
            return f"User:{certificate_name(Path(self.certificate_location).read_bytes())}"
        return None

    @property
    def authenticates(self) -> bool:
        return any(listener.sasl for listener in self.listeners)

    def pem(self, location: str | None) -> bytes | None:
        return Path(location).read_bytes() if location else None


def _kafka_listeners(properties: Mapping[str, str]) -> tuple[tuple[Listener, ...], tuple[Listener, ...]]:
    """``kafka.listeners`` and ``kafka.advertised.listeners`` (Kafka's syntax: the Kafka-protocol
    listeners beside the Flight ones; none when unset). A listener may be named other than its
    protocol (``CLIENT://:9092``) when ``listener.security.protocol.map`` says which protocol the
    name is (``CLIENT:SASL_SSL``); one listener per protocol."""
    text = properties.get("kafka.listeners", "").strip()
    if not text:
        if properties.get("kafka.advertised.listeners"):
            raise InvalidConfig("kafka.advertised.listeners is set but kafka.listeners is not")
        return (), ()
    names = _protocol_map(properties.get("listener.security.protocol.map", ""))
    listeners = parse_listeners(_by_protocol(text, names), "kafka.listeners")
    advertised = listeners
    if properties.get("kafka.advertised.listeners"):
        advertised_text = _by_protocol(properties["kafka.advertised.listeners"], names)
        advertised = parse_listeners(advertised_text, "kafka.advertised.listeners")
        if sorted(a.protocol for a in advertised) != sorted(b.protocol for b in listeners):
            raise InvalidConfig("kafka.advertised.listeners must name the same listeners as kafka.listeners")
    elif any(listener.host in ("0.0.0.0", "::", "") for listener in listeners):
        raise InvalidConfig("a Kafka listener binds every address: set kafka.advertised.listeners")
    return listeners, advertised


def _protocol_map(text: str) -> dict[str, str]:
    """``listener.security.protocol.map``: ``NAME:PROTOCOL,...``."""
    names: dict[str, str] = {}
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        name, sep, protocol = item.partition(":")
        if not sep or protocol.strip().upper() not in PROTOCOLS:
            raise InvalidConfig(
                f"listener.security.protocol.map: {item!r:.80} is not NAME:PROTOCOL (PROTOCOL one of "
                f"{', '.join(PROTOCOLS)})"
            )
        names[name.strip().upper()] = protocol.strip().upper()
    return names


def _by_protocol(text: str, names: Mapping[str, str]) -> str:
    """``text``'s listeners with each name replaced by its protocol."""
    items = []
    for item in (part.strip() for part in text.split(",") if part.strip()):
        name, sep, address = item.partition("://")
        protocol = names.get(name.upper(), name) if sep else name
        items.append(f"{protocol}{sep}{address}")
    return ",".join(items)


def _refuse_open_kafka_listeners(
    listeners: tuple[Listener, ...], kafka_listeners: tuple[Listener, ...], client_auth: bool
) -> None:
    """Without ACLs, a Kafka listener that lets anyone in (PLAINTEXT, or SSL without client
    certificates) would let any client past a broker whose Flight listeners authenticate."""
    authenticated = all(listener.sasl or (listener.tls and client_auth) for listener in listeners)
    for listener in kafka_listeners:
        if authenticated and not (listener.sasl or (listener.tls and client_auth)):
            raise InvalidConfig(
                f"kafka.listeners: a {listener.protocol} Kafka listener would let any client past this broker's "
                "authentication: use SASL_SSL (or SSL with ssl.client.auth=required), or enable the authorizer"
            )


def _boolean(properties: Mapping[str, str], setting: str, default: str = "false") -> bool:
    value = properties.get(setting, default).lower()
    if value not in ("true", "false"):
        raise InvalidConfig(f"{setting} must be true or false, got {value!r:.40}")
    return value == "true"
