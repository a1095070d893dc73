"""SCRAM-SHA-256 and PLAIN over Arrow Flight's handshake (the login itself:
:class:`~sparklog.security.sasl_exchange.SaslExchange`, against the credentials of
:mod:`sparklog.security.credentials`), and the session token a broker gives a client that passed it.

The handshake (Flight's ``Handshake`` call, messages in order):

1. client: ``{"mechanism": "SCRAM-SHA-256", "first": <client-first-message>}``
   (or ``{"mechanism": "PLAIN", "username": ..., "password": ...}``, then straight to 4.)
2. broker: the server-first message
3. client: the client-final message (its proof); broker: the server-final message (the broker's
   proof, which the client checks)
4. broker: the session token

Flight sends the token with every later call of that client, and the broker's ``is_valid`` turns it
back into the call's identity: the principal and the version of the credential it logged in with.
Tokens are signed with the broker's secret (HMAC-SHA256), so they live through a broker restart.
Each call, and each message of an open stream, checks that the version is still the user's
current one (:class:`CredentialVersions`), so removing a user or changing a password ends the
sessions made with the old credential at once, and a user removed and added again gets none of
its old sessions back.

An unknown user's SCRAM exchange looks like a real user's (Kafka's rule): the server-first message
carries a salt derived from a cluster secret and the name (the same on every broker, every time)
and the default iteration count, and the exchange fails at the proof like a wrong password, so the
port does not tell which users exist.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import secrets
from typing import Any

import pyarrow.flight as flight
import scramp

from sparklog.errors import AuthenticationFailed
from sparklog.security.client_config import ClientSecurity
from sparklog.security.credentials import SCRAM_SHA_256
from sparklog.security.principal import user_principal
from sparklog.security.sasl_exchange import MAX_MESSAGE, PLAIN, CredentialLookup, Decoys, SaslExchange
from sparklog.security.sessions import CredentialVersions, Identity, check_session

log = logging.getLogger(__name__)


class SessionTokens:
    """Signs and checks session tokens: ``<JSON of principal and credential version, base64>.<HMAC-SHA256
    of it, hex>``."""

    def __init__(self, secret: bytes) -> None:
        if len(secret) < 32:
            raise ValueError("a session secret needs at least 32 bytes")
        self._secret = secret

    def _sign(self, body: bytes) -> bytes:
        return hmac.new(self._secret, body, hashlib.sha256).hexdigest().encode()

    def issue(self, principal: str, version: int) -> bytes:
        """A token for ``principal``, logged in with version ``version`` of its credential."""
        claims = {"p": principal, "v": version, "n": secrets.token_hex(8)}
        body = base64.urlsafe_b64encode(json.dumps(claims).encode())
        return body + b"." + self._sign(body)

    def identity(self, token: bytes) -> Identity | None:
        """The principal and credential version a token was issued for, or None if this broker did
        not sign it (or it carries no version: a token of the time before versions)."""
        body, _, signature = bytes(token).partition(b".")
        if not body or not hmac.compare_digest(signature, self._sign(body)):
            return None
        try:
            claims = json.loads(base64.urlsafe_b64decode(body))
            principal, version = claims["p"], claims["v"]
        except (ValueError, KeyError, TypeError):
            return None
        if not isinstance(principal, str) or not isinstance(version, int) or isinstance(version, bool):
            return None
        return Identity(principal, version)


def _read(incoming: Any, what: str) -> bytes:
    message = incoming.read()
    if message is None:
        raise flight.FlightUnauthenticatedError(f"authentication failed: the client ended the handshake before {what}")
    data = bytes(message)
    if len(data) > MAX_MESSAGE:
        raise flight.FlightUnauthenticatedError(f"authentication failed: {what} is larger than {MAX_MESSAGE} bytes")
    return data


class SaslServerAuth(flight.ServerAuthHandler):
    """The broker's side of the handshake (a :class:`~sparklog.security.sasl_exchange.SaslExchange`
    over Flight's messages), and the check of every later call's token."""

    def __init__(
        self,
        credentials: CredentialLookup,
        versions: CredentialVersions,
        tokens: SessionTokens,
        mechanisms: tuple[str, ...],
        decoy_secret: bytes,
    ) -> None:
        """``credentials``: read at each handshake; ``versions``: asked at every call (cheap);
        ``decoy_secret``: the cluster's secret an unknown user's salt is derived from."""
        super().__init__()
        self.credentials = credentials
        self.versions = versions
        self.tokens = tokens
        self.mechanisms = mechanisms
        self.decoys = Decoys(decoy_secret)

    def authenticate(self, outgoing: Any, incoming: Any) -> None:
        try:
            self._authenticate(outgoing, incoming)
        except AuthenticationFailed as exc:
            raise flight.FlightUnauthenticatedError(str(exc)) from None
        except flight.FlightError:
            raise
        except Exception:  # a bug or a broken client: the reason stays in the broker's log
            log.exception("SASL handshake failed unexpectedly")
            raise flight.FlightUnauthenticatedError("authentication failed: the handshake could not be read") from None

    def _authenticate(self, outgoing: Any, incoming: Any) -> None:
        try:
            opening = json.loads(_read(incoming, "its first message"))
        except ValueError:
            raise flight.FlightUnauthenticatedError("authentication failed: the first message is not JSON") from None
        mechanism = opening.get("mechanism") if isinstance(opening, dict) else None
        if mechanism not in self.mechanisms:
            raise flight.FlightUnauthenticatedError(
                f"authentication failed: SASL mechanism {str(mechanism)[:40]!r} is not enabled on this listener "
                f"(enabled: {', '.join(self.mechanisms)})"
            )
        exchange = SaslExchange(mechanism, self.credentials, self.decoys)
        if mechanism == PLAIN:
            user, password = opening.get("username"), opening.get("password")
            if not isinstance(user, str) or not isinstance(password, str):
                raise AuthenticationFailed("authentication failed: PLAIN needs a username and a password")
            exchange.plain(user, password)
        else:
            first = opening.get("first")
            if not isinstance(first, str):
                raise AuthenticationFailed("authentication failed: SCRAM needs the client-first message")
            outgoing.write(exchange.step(first.encode()))
            outgoing.write(exchange.step(_read(incoming, "its proof")))
        outgoing.write(self.tokens.issue(user_principal(exchange.user), exchange.version))

    def is_valid(self, token: bytes) -> bytes:
        identity = self.tokens.identity(token) if token else None
        if identity is None:
            raise flight.FlightUnauthenticatedError(
                "this listener needs authentication: set security.protocol to SASL_SSL or SASL_PLAINTEXT with "
                "sasl.username and sasl.password"
            )
        try:
            check_session(self.versions, identity)
        except AuthenticationFailed as exc:
            raise flight.FlightUnauthenticatedError(str(exc)) from None
        return identity.encode()


class SaslClientAuth(flight.ClientAuthHandler):
    """The client's side of the handshake (``FlightClient.authenticate``)."""

    def __init__(self, security: ClientSecurity) -> None:
        super().__init__()
        self.security = security
        self._token = b""

    def authenticate(self, outgoing: Any, incoming: Any) -> None:
        user, password = self.security.username or "", self.security.password or ""
        if self.security.mechanism == PLAIN:
            outgoing.write(json.dumps({"mechanism": PLAIN, "username": user, "password": password}).encode())
        else:
            client = scramp.ScramClient([SCRAM_SHA_256], user, password)
            outgoing.write(json.dumps({"mechanism": SCRAM_SHA_256, "first": client.get_client_first()}).encode())
            client.set_server_first(_read(incoming, "the server-first message").decode())
            outgoing.write(client.get_client_final().encode())
            try:
                client.set_server_final(_read(incoming, "the broker's proof").decode())
            except scramp.ScramException as exc:  # the broker does not know the password: not the real one
                raise flight.FlightUnauthenticatedError(
                    f"the broker failed to prove it knows the credential: {exc}"
                ) from None
        self._token = _read(incoming, "the session token")

    def get_token(self) -> bytes:
        return self._token
