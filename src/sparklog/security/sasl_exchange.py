"""The broker's side of one SASL login, message by message, whatever carries the messages: Arrow
Flight's handshake (:class:`~sparklog.security.scram.SaslServerAuth`) or Kafka's SaslAuthenticate
requests (:mod:`sparklog.kafka.sasl`).

- ``SCRAM-SHA-256`` (RFC 5802/7677, computed by ``scramp``): the client-first message is answered
  with the server-first; the client-final (its proof) with the server-final (the broker's proof),
  and the login is done.
- ``PLAIN`` (RFC 4616): one message, ``authzid NUL user NUL password``; the answer is empty.

Both check against the users' salted credentials (a lookup, read at each login). An unknown user
is answered like a real one (a salt derived from the cluster's secret and the name, the default
iteration count) and fails at the proof, as a wrong password does: the listener does not tell
which users exist. A failure is :class:`~sparklog.errors.AuthenticationFailed` with a message that
says no more than that.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Callable

import scramp

from sparklog.errors import AuthenticationFailed
from sparklog.security.credentials import DEFAULT_ITERATIONS, SCRAM_SHA_256, ScramCredential

PLAIN = "PLAIN"
MAX_MESSAGE = 4096  # bytes: a login message larger than this is refused before parsing
REFUSED = "authentication failed: unknown user or wrong password"
DECOY_SALT = b"sparklog scram salt of an unknown user"
_MECHANISM = scramp.ScramMechanism(SCRAM_SHA_256)

CredentialLookup = Callable[[str], "tuple[ScramCredential, int] | None"]  # a user's credential and its version


class Decoys:
    """What unknown users are answered with: per name, a salt derived from the cluster's secret
    (stable, as a real user's), the default iteration count, and keys nobody can match."""

    def __init__(self, secret: bytes) -> None:
        self._key = hmac.new(secret, DECOY_SALT, hashlib.sha256).digest()

    def credential(self, user: str) -> ScramCredential:
        salt = hmac.new(self._key, user.encode(errors="replace"), hashlib.sha256).digest()
        return ScramCredential(salt, secrets.token_bytes(32), secrets.token_bytes(32), DEFAULT_ITERATIONS)


class SaslExchange:
    """One login with ``mechanism``: feed each client message to :meth:`step`, send back what it
    returns; once ``done``, ``user`` logged in with version ``version`` of its credential."""

    def __init__(self, mechanism: str, credentials: CredentialLookup, decoys: Decoys) -> None:
        if mechanism not in (SCRAM_SHA_256, PLAIN):
            raise AuthenticationFailed(f"SASL mechanism {mechanism[:40]!r} is not supported")
        self.mechanism = mechanism
        self.credentials = credentials
        self.decoys = decoys
        self.done = False
        self.user = ""
        self.version = -1
        self._named: tuple[str, tuple[ScramCredential, int] | None] | None = None
        self._scram: scramp.core.ScramServer | None = None

    def step(self, message: bytes) -> bytes:
        """The answer to the client's next message; :class:`AuthenticationFailed` if the login
        fails (the exchange is over then)."""
        if self.done:
            raise AuthenticationFailed("authentication failed: the login is already complete")
        if len(message) > MAX_MESSAGE:
            raise AuthenticationFailed(f"authentication failed: a SASL message is larger than {MAX_MESSAGE} bytes")
        if self.mechanism == PLAIN:
            return self._plain(message)
        return self._scram_step(message.decode(errors="replace"))

    def _lookup(self, user: str) -> tuple[ScramCredential, int] | None:
        try:
            return self.credentials(user)
        except Exception:  # an invalid name is an unknown user (and says nothing more)
            return None

    def plain(self, user: str, password: str) -> None:
        """PLAIN's check of ``user`` and ``password``."""
        found = self._lookup(user)
        credential = found[0] if found else self.decoys.credential(user)  # the same work for an unknown user
        if not credential.matches(password) or found is None:
            raise AuthenticationFailed(REFUSED)
        self.done, self.user, self.version = True, user, found[1]

    def _plain(self, message: bytes) -> bytes:
        parts = message.split(b"\x00")
        if len(parts) != 3 or not parts[1]:
            raise AuthenticationFailed("authentication failed: PLAIN takes 'authzid NUL user NUL password'")
        authzid, user, password = (part.decode(errors="replace") for part in parts)
        if authzid and authzid != user:
            raise AuthenticationFailed("authentication failed: PLAIN may not act for another user")
        self.plain(user, password)
        return b""

    def _scram_step(self, message: str) -> bytes:
        try:
            if self._scram is None:
                self._scram = _MECHANISM.make_server(self._auth_info)
                self._scram.set_client_first(message)
                return self._scram.get_server_first().encode()
            self._scram.set_client_final(message)
        except scramp.ScramException:
            raise AuthenticationFailed(REFUSED) from None
        user, found = self._named or ("", None)
        if found is None:
            raise AuthenticationFailed(REFUSED)
        self.done, self.user, self.version = True, user, found[1]
        return self._scram.get_server_final().encode()

    def _auth_info(self, user: str) -> tuple[bytes, bytes, bytes, int]:
        found = self._lookup(user)
        self._named = (user, found)
        credential = found[0] if found else self.decoys.credential(user)  # fails at the proof
        return credential.salt, credential.stored_key, credential.server_key, credential.iterations
