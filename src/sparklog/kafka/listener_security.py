"""How one Kafka-protocol listener secures its connections, with Kafka's security protocols:

- ``PLAINTEXT``: no TLS, no login; every client is ``User:ANONYMOUS``.
- ``SSL``: TLS (the broker's certificate); with a client certificate required (``ssl.client.auth``)
  the client is ``User:<name>``, the certificate's name as the Flight listener takes it, else
  ``User:ANONYMOUS``.
- ``SASL_PLAINTEXT`` / ``SASL_SSL``: a SASL login (SaslHandshake, then SaslAuthenticate) before any
  other request but ApiVersions; the client is the user who logged in.

The broker builds one :class:`ListenerSecurity` per listener from its settings, with the same
users, ACLs and quotas as its Flight listeners, so one set of rules covers both protocols.
"""

from __future__ import annotations

import dataclasses
import ssl
from typing import Literal, Protocol

from sparklog.errors import InvalidConfig
from sparklog.kafka.authorization import Authorize
from sparklog.security.sasl_exchange import CredentialLookup, Decoys
from sparklog.security.sessions import CredentialVersions

QuotaKind = Literal["produce", "fetch", "request"]
SASL_MAX_RECEIVE_BYTES = 512 * 1024  # Kafka's sasl.server.max.receive.size: a frame's limit before login


class Throttle(Protocol):
    """Client quotas: the seconds a principal's request must wait after taking ``amount`` of ``kind``."""

    def delay(self, principal: str, kind: QuotaKind, amount: float) -> float: ...


@dataclasses.dataclass(frozen=True)
class SaslLogin:
    """What a SASL listener logs users in with: the mechanisms it enables, the users' credentials
    (read at each login), their current versions (asked at every request: a removed user or a
    changed password ends its connections), the decoys unknown users get, and Kafka's
    ``connections.max.reauth.ms`` (0: a login lasts as long as its connection; else the client
    must log in again within that time, KIP-368)."""

    mechanisms: tuple[str, ...]
    credentials: CredentialLookup
    versions: CredentialVersions
    decoys: Decoys
    reauth_ms: int = 0


@dataclasses.dataclass(frozen=True)
class ListenerSecurity:
    protocol: str = "PLAINTEXT"
    tls: ssl.SSLContext | None = None  # a server context (SSL, SASL_SSL)
    sasl: SaslLogin | None = None  # SASL_PLAINTEXT, SASL_SSL
    authorizer: Authorize | None = None  # None: every principal may do everything
    throttle: Throttle | None = None  # None: no quotas

    def __post_init__(self) -> None:
        wants_tls, wants_sasl = self.protocol in ("SSL", "SASL_SSL"), self.protocol.startswith("SASL_")
        if wants_tls != (self.tls is not None) or wants_sasl != (self.sasl is not None):
            raise InvalidConfig(
                f"a {self.protocol} Kafka listener takes {'TLS' if wants_tls else 'no TLS'} and "
                f"{'a SASL login' if wants_sasl else 'no SASL login'}"
            )


PLAINTEXT = ListenerSecurity()


def server_tls(certificate: str, key: str, client_ca: str | None) -> ssl.SSLContext:
    """A TLS server context with the broker's certificate and key (PEM files); with ``client_ca``,
    a client certificate signed by that CA is required (mutual TLS)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(certificate, key)
    if client_ca is not None:
        context.load_verify_locations(client_ca)
        context.verify_mode = ssl.CERT_REQUIRED
    return context
