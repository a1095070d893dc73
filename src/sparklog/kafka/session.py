"""Who is on one Kafka connection, and the SASL login that tells it (Kafka's
``SaslServerAuthenticator``, as a small state machine).

A connection on a ``SASL_*`` listener starts unauthenticated: it may send ApiVersions, then
SaslHandshake (naming a mechanism the listener enables), then SaslAuthenticate requests carrying
the login's messages until the login is done; any other request before that closes the
connection, as does a failed login (after its answer, ``SASL_AUTHENTICATION_FAILED``). Once logged
in, the connection is that user's until it ends, checked at every request: a removed user or a
changed password ends it, and with ``connections.max.reauth.ms`` the client must log in again (the
same user and mechanism, KIP-368) before its session's lifetime is over, or its next request
closes the connection.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable

from sparklog.errors import AuthenticationFailed, SessionEnded, UnsupportedSaslMechanism
from sparklog.kafka.listener_security import SaslLogin
from sparklog.security.principal import ANONYMOUS, user_principal
from sparklog.security.sasl_exchange import SaslExchange
from sparklog.security.sessions import Identity, check_session

API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE = 18, 17, 36
BEFORE_LOGIN = frozenset({API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE})


class Stage(enum.Enum):
    HANDSHAKE = "waiting for SaslHandshake"
    AUTHENTICATE = "logging in"
    LOGGED_IN = "logged in"


class ConnectionSession:
    """The principal of one connection (``principal``), and its SASL login when the listener asks
    for one (``login``; None: the connection is who its transport says, from the start)."""

    def __init__(
        self, principal: str = ANONYMOUS, login: SaslLogin | None = None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.principal = principal
        self.login = login
        self.clock = clock
        self.stage = Stage.LOGGED_IN if login is None else Stage.HANDSHAKE
        self.identity: Identity | None = None
        self.mechanism = ""
        self.expires_at: float | None = None  # when a re-login is due (connections.max.reauth.ms)
        self._exchange: SaslExchange | None = None
        self._reauthenticating = False

    @property
    def logged_in(self) -> bool:
        return self.identity is not None or self.login is None

    def admit(self, api_key: int) -> None:
        """:class:`SessionEnded` unless a request of ``api_key`` may come now."""
        if api_key in BEFORE_LOGIN:
            return
        if not self.logged_in or self.stage is not Stage.LOGGED_IN:
            raise SessionEnded(f"API key {api_key} sent before the SASL login completed ({self.stage.value})")
        if self.expires_at is not None and self.clock() >= self.expires_at:
            raise SessionEnded(f"{self.principal}'s session expired (connections.max.reauth.ms) without a new login")
        if self.identity is not None and self.login is not None:
            try:
                check_session(self.login.versions, self.identity)
            except AuthenticationFailed as exc:
                raise SessionEnded(str(exc)) from None

    # ----------------------------------------------------------------- SaslHandshake
    def handshake(self, mechanism: str) -> None:
        """Choose ``mechanism``; :class:`AuthenticationFailed` (``unsupported``: the mechanism is
        not enabled) when refused."""
        if self.login is None:
            raise AuthenticationFailed("this listener does not take a SASL login (its protocol has no SASL)")
        if self.stage is Stage.AUTHENTICATE:
            raise AuthenticationFailed("a SaslHandshake arrived in the middle of a login")
        if mechanism not in self.login.mechanisms:
            raise UnsupportedSaslMechanism(
                f"SASL mechanism {mechanism[:40]!r} is not enabled on this listener "
                f"(enabled: {', '.join(self.login.mechanisms)})"
            )
        if self.identity is not None and mechanism != self.mechanism:
            raise AuthenticationFailed(f"a new login must use the session's mechanism {self.mechanism}")
        self._reauthenticating = self.identity is not None
        self.mechanism = mechanism
        self._exchange = SaslExchange(mechanism, self.login.credentials, self.login.decoys)
        self.stage = Stage.AUTHENTICATE

    # ----------------------------------------------------------------- SaslAuthenticate
    def authenticate(self, message: bytes) -> tuple[bytes, int]:
        """The answer to one login message and, once the login is done, the session's lifetime in
        ms (0: until the connection ends; -1 while the login goes on); :class:`AuthenticationFailed`
        when the login fails or comes out of order."""
        if self.stage is not Stage.AUTHENTICATE or self._exchange is None or self.login is None:
            raise AuthenticationFailed(f"a SaslAuthenticate arrived while {self.stage.value}: send SaslHandshake first")
        answer = self._exchange.step(message)
        if not self._exchange.done:
            return answer, -1
        principal = user_principal(self._exchange.user)
        if self._reauthenticating and principal != self.principal:
            raise AuthenticationFailed(f"a new login must be the session's user ({self.principal}), not {principal}")
        self.principal = principal
        self.identity = Identity(principal, self._exchange.version)
        self.stage, self._exchange = Stage.LOGGED_IN, None
        lifetime = self.login.reauth_ms
        self.expires_at = self.clock() + lifetime / 1000 if lifetime > 0 else None
        return answer, lifetime
