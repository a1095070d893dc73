"""What ``sparklog up --secure`` sets up under its data directory (``<data-dir>/security``): a CA
and a broker certificate, random passwords for the ``admin`` super user, the brokers' own user and
ZooKeeper's digest, the users in ZooKeeper, each broker's properties file (one SASL_SSL listener
for sparklog's clients and one for Kafka clients, ACLs on, ZooKeeper locked down, data
owner-only), ``<data-dir>/client.properties`` for ``admin`` and, with the same credentials for
Kafka clients, ``<data-dir>/kafka-client.properties`` (librdkafka's names, as confluent-kafka
takes them) and ``<data-dir>/kafka-java-client.properties`` (the Java client's: a PEM truststore
and ``sasl.jaas.config``, as Kafka's tools take them with ``--command-config``). Files holding
secrets are readable by their owner only. Run again on the same directory, it reuses them."""

from __future__ import annotations

import dataclasses
import os
import secrets
from pathlib import Path

from sparklog.coordination.cluster import ClusterMetadata
from sparklog.coordination.zk_layout import split_connect_string
from sparklog.coordination.zookeeper_acls import ZooKeeperDigest, lock_root
from sparklog.security.certificates import CertificateAuthority, CertificateFiles
from sparklog.security.client_config import load_properties
from sparklog.security.credential_store import CredentialStore

ADMIN = "admin"
BROKER_USER = "broker"
HOST = "127.0.0.1"


def _write_private(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(text)


def _properties(settings: dict[str, str]) -> str:
    return "".join(f"{key}={value}\n" for key, value in settings.items())


@dataclasses.dataclass(frozen=True)
class LocalSecurity:
    directory: Path
    ca: CertificateFiles
    broker: CertificateFiles
    passwords: dict[str, str]
    client_properties: Path
    kafka_client_properties: Path | None = None  # librdkafka's names (None: no Kafka listeners)
    kafka_java_client_properties: Path | None = None

    @property
    def zookeeper_digest(self) -> ZooKeeperDigest:
        return ZooKeeperDigest("sparklog", self.passwords["zookeeper"])

    def broker_config(
        self, broker_id: int, port: int, kafka_port: int | None = None, extra: dict[str, str] | None = None
    ) -> Path:
        """Broker ``broker_id``'s properties file (listening on ``port``, and for Kafka clients on
        ``kafka_port`` unless it is None; ``extra``: more settings, which win)."""
        path = self.directory / f"broker-{broker_id}.properties"
        kafka = {} if kafka_port is None else {"kafka.listeners": f"SASL_SSL://{HOST}:{kafka_port}"}
        settings = {
            "listeners": f"SASL_SSL://{HOST}:{port}",
            **kafka,
            "ssl.certificate.location": str(self.broker.certificate),
            "ssl.key.location": str(self.broker.key),
            "ssl.ca.location": str(self.ca.certificate),
            "sasl.enabled.mechanisms": "SCRAM-SHA-256",
            "security.inter.broker.protocol": "SASL_SSL",
            "inter.broker.sasl.username": BROKER_USER,
            "inter.broker.sasl.password": self.passwords[BROKER_USER],
            "super.users": f"User:{ADMIN};User:{BROKER_USER}",
            "authorizer.enabled": "true",
            "zookeeper.digest": f"sparklog:{self.passwords['zookeeper']}",
            "log.dirs.owner.only": "true",
            **(extra or {}),
        }
        _write_private(path, _properties(settings))
        return path


def prepare(
    data_dir: Path,
    zookeeper: str,
    broker_ports: list[int],
    lock_zookeeper_root: bool = False,
    kafka_ports: list[int] | None = None,
) -> LocalSecurity:
    """Certificates, passwords, users and client settings for a local secured cluster whose
    ZooKeeper is running at ``zookeeper`` and whose brokers listen on ``broker_ports`` (and for
    Kafka clients on ``kafka_ports``).
    ``lock_zookeeper_root``: that ZooKeeper is the cluster's own (``sparklog up`` started it): only
    sparklog's digest identity may create znodes at its root (:func:`lock_root`)."""
    directory = data_dir / "security"
    directory.mkdir(parents=True, exist_ok=True)
    secrets_file = directory / "secrets.properties"
    ca_files = CertificateFiles(directory / "ca.pem", directory / "ca-key.pem")
    if secrets_file.exists() and ca_files.key.exists():
        passwords = load_properties(secrets_file)
        authority = CertificateAuthority.load(ca_files)
    else:
        passwords = {name: secrets.token_urlsafe(18) for name in (ADMIN, BROKER_USER, "zookeeper")}
        _write_private(secrets_file, _properties(passwords))
        authority = CertificateAuthority.create("sparklog local CA")
        authority.write(directory)
    broker = authority.issue_files(directory, "broker", ("localhost", HOST))
    client_properties = data_dir / "client.properties"
    _write_private(
        client_properties,
        _properties(
            {
                "bootstrap.servers": ",".join(f"{HOST}:{port}" for port in broker_ports),
                "security.protocol": "SASL_SSL",
                "ssl.ca.location": str(ca_files.certificate.resolve()),
                "sasl.mechanism": "SCRAM-SHA-256",
                "sasl.username": ADMIN,
                "sasl.password": passwords[ADMIN],
            }
        ),
    )
    kafka_files = _kafka_client_files(data_dir, ca_files.certificate.resolve(), passwords[ADMIN], kafka_ports)
    setup = LocalSecurity(directory, ca_files, broker, passwords, client_properties, *kafka_files)
    if lock_zookeeper_root:  # before sparklog's tree is created: nobody else gets in first
        lock_root(split_connect_string(zookeeper)[0], setup.zookeeper_digest)
    with ClusterMetadata(zookeeper, digest=setup.zookeeper_digest) as meta:
        store = CredentialStore(meta.zk, meta.layout)
        for user in (ADMIN, BROKER_USER):
            store.upsert(user, passwords[user])
    return setup


def _kafka_client_files(
    data_dir: Path, ca: Path, password: str, kafka_ports: list[int] | None
) -> tuple[Path | None, Path | None]:
    """``admin``'s settings for Kafka clients: librdkafka's and the Java client's."""
    if not kafka_ports:
        return None, None
    bootstrap = ",".join(f"{HOST}:{port}" for port in kafka_ports)
    librdkafka = data_dir / "kafka-client.properties"
    _write_private(
        librdkafka,
        _properties(
            {
                "bootstrap.servers": bootstrap,
                "security.protocol": "SASL_SSL",
                "ssl.ca.location": str(ca),
                "sasl.mechanism": "SCRAM-SHA-256",
                "sasl.username": ADMIN,
                "sasl.password": password,
            }
        ),
    )
    java = data_dir / "kafka-java-client.properties"
    jaas = f'org.apache.kafka.common.security.scram.ScramLoginModule required username="{ADMIN}" password="{password}";'
    _write_private(
        java,
        _properties(
            {
                "bootstrap.servers": bootstrap,
                "security.protocol": "SASL_SSL",
                "ssl.truststore.type": "PEM",
                "ssl.truststore.location": str(ca),
                "sasl.mechanism": "SCRAM-SHA-256",
                "sasl.jaas.config": jaas,
            }
        ),
    )
    return librdkafka, java
