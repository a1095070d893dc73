"""A broker's Flight servers, one per listener (``listeners`` in the broker's config): TLS on the
``SSL`` and ``SASL_SSL`` ones, the SCRAM/PLAIN handshake on the ``SASL_*`` ones, checked against
the users in ZooKeeper; a session lasts while its user keeps the credential it logged in with."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from kazoo.client import KazooClient

from sparklog.broker.served_call import ServedBroker
from sparklog.broker.server import BrokerServer, CallThrottle, ListenerTls
from sparklog.coordination.zk_layout import ZkLayout
from sparklog.security.authorizer import Authorizer
from sparklog.security.broker_config import BrokerSecurity, Listener
from sparklog.security.credential_store import CredentialStore, CredentialWatch
from sparklog.security.replica_guard import ReplicaGuard
from sparklog.security.scram import SaslServerAuth, SessionTokens

SECRET_FILE = "session-secret"  # in the broker's data directory: signs its session tokens


def session_secret(data_dir: Path) -> bytes:
    """The broker's secret for signing session tokens, made once and kept (owner-only) so that
    clients' sessions survive a restart."""
    path = data_dir / SECRET_FILE
    try:
        secret = path.read_bytes()
        if len(secret) >= 32:
            return secret
    except FileNotFoundError:
        pass
    secret = secrets.token_bytes(32)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(secret)
    return secret


def open_listeners(
    broker: ServedBroker,
    security: BrokerSecurity,
    zk: KazooClient,
    layout: ZkLayout,
    data_dir: Path,
    max_calls_per_ip: int,
    guard: ReplicaGuard | None,
    authorizer: Authorizer | None = None,
    throttle: CallThrottle | None = None,
) -> list[tuple[Listener, BrokerServer]]:
    """Bind every listener (serving from then on); each with the port it got. ``authorizer``: the
    ACL check of every call (None: none); ``throttle``: client quotas (None: none)."""
    auth, sessions = None, None
    if security.authenticates:
        store = CredentialStore(zk, layout)
        sessions = CredentialWatch(zk, layout)
        tokens = SessionTokens(session_secret(data_dir))
        auth = SaslServerAuth(store.versioned_credential, sessions, tokens, security.mechanisms, store.scram_secret())
    tls = None
    if any(listener.tls for listener in security.listeners):
        certificate, key = security.pem(security.certificate_location), security.pem(security.key_location)
        assert certificate is not None and key is not None  # checked by BrokerSecurity
        tls = ListenerTls(certificate, key, security.pem(security.ca_location) if security.client_auth else None)
    opened: list[tuple[Listener, BrokerServer]] = []
    try:
        for listener in security.listeners:
            server = BrokerServer(
                broker,
                listener.bind_location,
                max_calls_per_ip,
                tls if listener.tls else None,
                auth if listener.sasl else None,
                guard,
                authorizer,
                throttle,
                sessions if listener.sasl else None,
            )
            opened.append((Listener(listener.protocol, listener.host, server.port), server))
    except BaseException:
        for _, server in opened:
            server.shutdown()
        raise
    return opened
