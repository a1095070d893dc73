"""A secured cluster for tests: a CA and broker certificate made by the test, SCRAM users in the
test's ZooKeeper root, and each broker's properties file (one SASL_SSL listener on its port, and
brokers authenticating to each other as ``User:broker``)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from kazoo.client import KazooClient

from broker_helpers import BrokerProcess, ProcessGroup
from sparklog.coordination.zk_layout import ZkLayout, split_connect_string
from sparklog.coordination.zookeeper_acls import ZooKeeperDigest, client_options
from sparklog.security.acl_store import AclStore
from sparklog.security.acls import AclBinding, ResourcePattern
from sparklog.security.certificates import CertificateAuthority, CertificateFiles
from sparklog.security.credential_store import CredentialStore

HOST = "127.0.0.1"
PASSWORDS = {"admin": "admin-secret", "broker": "broker-secret", "alice": "alice-secret", "bob": "bob-secret"}


@dataclasses.dataclass
class SecureSetup:
    """Certificates and users of one secured test cluster."""

    directory: Path
    connect: str
    ca: CertificateFiles
    broker_cert: CertificateFiles
    authority: CertificateAuthority
    extra: dict[str, str] = dataclasses.field(default_factory=dict)  # more broker settings
    bootstrap: str = ""  # host:port of a broker, once the test knows it
    zookeeper_digest: ZooKeeperDigest | None = None  # ZooKeeper locked down to this identity

    @classmethod
    def create(
        cls,
        directory: Path,
        connect: str,
        users: dict[str, str] = PASSWORDS,
        zookeeper_digest: ZooKeeperDigest | None = None,
    ) -> SecureSetup:
        directory.mkdir(parents=True, exist_ok=True)
        authority = CertificateAuthority.create("test CA")
        setup = cls(
            directory, connect, authority.write(directory), authority.issue_files(directory, "broker"), authority
        )
        setup.zookeeper_digest = zookeeper_digest
        if zookeeper_digest is not None:
            setup.extra["zookeeper.digest"] = f"{zookeeper_digest.username}:{zookeeper_digest.password}"
        with setup.store() as store:
            for user, password in users.items():
                store.upsert(user, password, iterations=4096)
        return setup

    def store(self) -> _Store:
        return _Store(self.connect, self.zookeeper_digest)

    def _acl(self, resource: str, name: str, operation: str, user: str) -> AclBinding:
        return AclBinding.parse(ResourcePattern.parse(resource, name), f"User:{user}", "*", operation, "Allow")

    def allow(self, resource: str, name: str, operation: str, user: str = "alice") -> None:
        """Add an ACL allowing ``user`` ``operation`` on a literal resource (e.g. ``topic``, ``orders``)."""
        with self.store() as store:
            AclStore(store.zk, store.layout).add([self._acl(resource, name, operation, user)])

    def disallow(self, resource: str, name: str, operation: str, user: str = "alice") -> None:
        """Remove the ACL :meth:`allow` adds."""
        with self.store() as store:
            AclStore(store.zk, store.layout).remove([self._acl(resource, name, operation, user)])

    def broker_config(self, port: int, extra: dict[str, str] | None = None) -> Path:
        """The properties file of a broker listening (SASL_SSL) on ``port``."""
        settings = {
            "listeners": f"SASL_SSL://{HOST}:{port}",
            "ssl.certificate.location": str(self.broker_cert.certificate),
            "ssl.key.location": str(self.broker_cert.key),
            "ssl.ca.location": str(self.ca.certificate),
            "sasl.enabled.mechanisms": "SCRAM-SHA-256,PLAIN",
            "super.users": "User:admin;User:broker",
            "security.inter.broker.protocol": "SASL_SSL",
            "inter.broker.sasl.username": "broker",
            "inter.broker.sasl.password": PASSWORDS["broker"],
            **(extra or {}),
        }
        path = self.directory / f"server-{port}.properties"
        path.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
        return path

    def start_broker(self, base: Path, processes: ProcessGroup, broker_id: int = 1) -> BrokerProcess:
        """A started broker process with this setup's properties file (data under ``base``)."""
        process = BrokerProcess(broker_id, base / f"broker-{broker_id}", self.connect, processes)
        process.extra_args = list(self.broker_args(broker_id, process.port))
        return process.start()

    def broker_args(self, _broker_id: int, port: int) -> tuple[str, ...]:
        return ("--config", str(self.broker_config(port, self.extra)))

    def client(self, user: str = "admin", password: str | None = None, **more: str) -> dict[str, str]:
        """Client settings of ``user`` (SASL_SSL, SCRAM-SHA-256)."""
        return {
            "security.protocol": "SASL_SSL",
            "ssl.ca.location": str(self.ca.certificate),
            "sasl.mechanism": "SCRAM-SHA-256",
            "sasl.username": user,
            "sasl.password": PASSWORDS.get(user, "") if password is None else password,
            **more,
        }


class _Store:
    """A :class:`CredentialStore` on its own ZooKeeper session (a context manager)."""

    def __init__(self, connect: str, digest: ZooKeeperDigest | None = None) -> None:
        hosts, root = split_connect_string(connect)
        self.zk = KazooClient(hosts=hosts, timeout=10.0, **client_options(digest))
        self.layout = ZkLayout(root)

    def __enter__(self) -> CredentialStore:
        self.zk.start(timeout=15.0)
        return CredentialStore(self.zk, self.layout)

    def __exit__(self, *_: object) -> None:
        self.zk.stop()
        self.zk.close()
