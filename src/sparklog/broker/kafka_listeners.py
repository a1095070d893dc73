"""A broker's Kafka-protocol listeners (``kafka.listeners``), each secured with its own protocol
from the broker's one set of settings: the broker's certificate and CA for TLS (a client
certificate required with ``ssl.client.auth=required``), the users in ZooKeeper for SASL logins
(the same credential store as the Flight listeners, no second user database), and the broker's
authorizer and quotas for every request."""

from __future__ import annotations

from kazoo.client import KazooClient

from sparklog.broker.access_control import AccessControl
from sparklog.coordination.zk_layout import ZkLayout
from sparklog.kafka.broker_access import KafkaBroker
from sparklog.kafka.coordinator import GroupCoordinator
from sparklog.kafka.listener_security import ListenerSecurity, SaslLogin, server_tls
from sparklog.kafka.server import KafkaListener, RequestMeter
from sparklog.security.broker_config import BrokerSecurity, Listener
from sparklog.security.credential_store import CredentialStore, CredentialWatch
from sparklog.security.sasl_exchange import Decoys


def listener_securities(
    security: BrokerSecurity, access: AccessControl, zk: KazooClient, layout: ZkLayout
) -> dict[str, ListenerSecurity]:
    """Each Kafka listener's security, by protocol."""
    login = None
    if any(listener.sasl for listener in security.kafka_listeners):
        store = CredentialStore(zk, layout)
        login = SaslLogin(
            security.mechanisms,
            store.versioned_credential,
            CredentialWatch(zk, layout),
            Decoys(store.scram_secret()),
            security.reauth_ms,
        )
    tls = None
    if any(listener.tls for listener in security.kafka_listeners):
        assert security.certificate_location is not None and security.key_location is not None  # checked
        client_ca = security.ca_location if security.client_auth else None
        tls = server_tls(security.certificate_location, security.key_location, client_ca)
    return {
        listener.protocol: ListenerSecurity(
            listener.protocol,
            tls if listener.tls else None,
            login if listener.sasl else None,
            access.authorizer,
            access.throttle,
        )
        for listener in security.kafka_listeners
    }


def open_kafka_listeners(
    gateway: KafkaBroker,
    security: BrokerSecurity,
    access: AccessControl,
    zk: KazooClient,
    layout: ZkLayout,
    max_connections_per_ip: int,
    meter: RequestMeter | None = None,
) -> tuple[list[KafkaListener], list[Listener]]:
    """Bind and start every Kafka listener; the listeners and the endpoints they advertise.
    ``meter``: where they count the requests they answer."""
    securities = listener_securities(security, access, zk, layout)
    groups = GroupCoordinator()  # one per broker, whichever listener a group's members come through
    started: list[KafkaListener] = []
    ports: dict[str, int] = {}
    try:
        for listener in security.kafka_listeners:
            kafka = KafkaListener(
                gateway,
                listener.host,
                listener.port,
                max_connections_per_ip=max_connections_per_ip,
                groups=groups,
                auto_create_topics=security.auto_create_topics,
                security=securities[listener.protocol],
                meter=meter,
            )
            started.append(kafka.start())
            ports[listener.protocol] = kafka.port
    except BaseException:
        for kafka in started:
            kafka.stop()
        raise
    endpoints = [Listener(a.protocol, a.host, a.port or ports[a.protocol]) for a in security.kafka_advertised]
    return started, endpoints
