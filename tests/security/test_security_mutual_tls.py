"""Mutual TLS (issue 17): on an SSL listener with ``ssl.client.auth=required`` a client needs a
certificate from the CA, and its certificate's name is its principal (``User:alice``) for ACLs;
brokers replicate over the same listener as their own certificate's principal. Kafka clients on
the brokers' SSL Kafka listeners are named by the same certificates."""

from __future__ import annotations

from pathlib import Path

import pyarrow.flight as flight
import pytest
from confluent_kafka import KafkaError
from confluent_kafka import Producer as KafkaProducer

from replication_helpers import Cluster
from security_helpers import SecureSetup
from sparklog.client.admin import Admin
from sparklog.client.consumer import Consumer
from sparklog.client.producer import Producer
from sparklog.coordination.ports import free_port
from sparklog.errors import AuthorizationFailed
from sparklog.protocol import wire
from sparklog.security.acl_store import AclStore
from sparklog.security.acls import AclBinding, ResourcePattern
from sparklog.security.client_config import ClientSecurity
from waiting import wait_for

TOPIC = "mtls"
pytestmark = pytest.mark.slow


def test_certificate_names_are_principals_and_brokers_replicate_over_mutual_tls(
    sparklog_connect: str, child_processes, tmp_path: Path
) -> None:
    secure = SecureSetup.create(tmp_path / "security", sparklog_connect)
    directory = secure.directory
    alice = secure.authority.issue_files(directory, "alice", hosts=())  # named by its common name only
    admin = secure.authority.issue_files(directory, "admin", hosts=())

    kafka_ports = {1: free_port(), 2: free_port()}

    def broker_args(broker_id: int, port: int) -> tuple[str, ...]:
        path = secure.broker_config(
            port,
            {
                "listeners": f"SSL://127.0.0.1:{port}",
                "kafka.listeners": f"SSL://127.0.0.1:{kafka_ports[broker_id]}",
                "ssl.client.auth": "required",
                "security.inter.broker.protocol": "SSL",
                "super.users": "User:admin;User:localhost",  # the broker certificate's name
                "authorizer.enabled": "true",
            },
        )
        return ("--config", str(path))

    def client(files) -> dict[str, str]:
        return {
            "security.protocol": "SSL",
            "ssl.ca.location": str(secure.ca.certificate),
            "ssl.certificate.location": str(files.certificate),
            "ssl.key.location": str(files.key),
            "bootstrap.servers": bootstrap,
        }

    cluster = Cluster(sparklog_connect, tmp_path, child_processes, brokers=2, broker_args=broker_args).start()
    try:
        bootstrap = f"127.0.0.1:{cluster.brokers[1].port}"
        with Admin(config=client(admin)) as a:
            a.create_topic(TOPIC, 1, 2, {"min.insync.replicas": "2"})
        wait_for(lambda: sorted(cluster.meta.partition_state(TOPIC, 0).isr) == [1, 2], 30, "both replicas in sync")

        denied = f"User:alice may not (Write|Describe) topic '{TOPIC}'"
        with (
            pytest.raises(AuthorizationFailed, match=denied),
            Producer(acks="all", config=client(alice), delivery_timeout_s=10) as producer,
        ):
            producer.send(TOPIC, b"denied").result(30)
        with secure.store() as store:
            pattern = ResourcePattern.parse("topic", TOPIC)
            AclStore(store.zk, store.layout).add(
                [AclBinding.parse(pattern, "User:alice", "*", op, "Allow") for op in ("Write", "Read")]
            )
        values = [f"m{i}".encode() for i in range(200)]

        def produce() -> bool:
            try:
                with Producer(acks="all", config=client(alice), delivery_timeout_s=10) as producer:
                    for future in [producer.send(TOPIC, v, partition=0) for v in values]:
                        future.result(30)
                return True
            except AuthorizationFailed:
                return False

        wait_for(produce, 20, "alice's Write ACL to apply")  # acks=all: broker 2 replicated over mutual TLS
        with Consumer(TOPIC, auto_offset_reset="earliest", config=client(alice)) as consumer:
            got: list[bytes] = []
            for _ in range(100):
                for batch in consumer.poll_batches(timeout=0.2):
                    got.extend(batch.column("value").to_pylist())
                if len(got) >= len(values):
                    break
        assert got[-len(values) :] == values

        no_certificate = ClientSecurity.from_config(
            {"security.protocol": "SSL", "ssl.ca.location": str(secure.ca.certificate)}
        )
        client_without = wire.flight_client(f"grpc+tls://{bootstrap}", security=no_certificate)
        with pytest.raises(flight.FlightUnavailableError):  # the TLS handshake fails: no client certificate
            list(client_without.do_action(flight.Action(wire.PING, b"{}"), flight.FlightCallOptions(timeout=5)))

        # Kafka clients on the SSL Kafka listeners: the same certificates name the same principals
        kafka = ",".join(f"127.0.0.1:{p}" for p in kafka_ports.values())

        def kafka_client(files, **more: object) -> dict[str, object]:
            config: dict[str, object] = {"bootstrap.servers": kafka, "security.protocol": "SSL"}
            config.update({"ssl.ca.location": str(secure.ca.certificate), "message.timeout.ms": 15000})
            if files is not None:
                config.update({"ssl.certificate.location": str(files.certificate), "ssl.key.location": str(files.key)})
            return {**config, **more}

        def kafka_produce(config: dict[str, object], value: bytes) -> object:
            outcome: list[object] = []
            producer = KafkaProducer(config)
            producer.produce(TOPIC, value=value, partition=0, on_delivery=lambda err, _msg: outcome.append(err))
            producer.flush(30)
            return outcome[0] if outcome else "not delivered"

        assert kafka_produce(kafka_client(alice, acks="all"), b"from-kafka") is None
        bob = secure.authority.issue_files(directory, "bob", hosts=())  # a valid certificate, no ACLs
        refused = kafka_produce(kafka_client(bob), b"never")
        assert refused is not None and refused.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, refused
        assert kafka_produce(kafka_client(None, **{"message.timeout.ms": 5000}), b"never") is not None  # no certificate
        with Consumer(TOPIC, auto_offset_reset="earliest", config=client(alice)) as consumer:
            seen: list[bytes] = []
            for _ in range(100):
                for batch in consumer.poll_batches(timeout=0.2):
                    seen.extend(batch.column("value").to_pylist())
                if b"from-kafka" in seen:
                    break
        assert seen.count(b"from-kafka") == 1 and b"never" not in seen
    finally:
        cluster.close()
