"""SaslHandshake: the client names the SASL mechanism it will log in with (version 1: the login's
messages then come in SaslAuthenticate requests; version 0's raw messages are gone from Kafka 4).
A mechanism the listener does not enable is ``UNSUPPORTED_SASL_MECHANISM``, a handshake on a
listener without SASL or in the middle of a login ``ILLEGAL_SASL_STATE``; either closes the
connection once answered. The answer lists the enabled mechanisms."""

from __future__ import annotations

import logging

from kafka.protocol.sasl import SaslHandshakeRequest, SaslHandshakeResponse

from sparklog.errors import AuthenticationFailed, UnsupportedSaslMechanism
from sparklog.kafka import error_codes
from sparklog.kafka.api import ApiSpec, Message, RequestContext

API = ApiSpec(SaslHandshakeRequest, SaslHandshakeResponse, 1, 1)
log = logging.getLogger(__name__)


def handle(request: Message, ctx: RequestContext) -> Message:
    session = ctx.session
    enabled = list(session.login.mechanisms) if session.login is not None else []
    try:
        session.handshake(request.mechanism or "")
    except AuthenticationFailed as exc:
        log.info("SASL handshake from %s refused: %s", ctx.peer[0], exc)
        ctx.close_after = True
        unsupported = isinstance(exc, UnsupportedSaslMechanism)
        error = error_codes.UNSUPPORTED_SASL_MECHANISM if unsupported else error_codes.ILLEGAL_SASL_STATE
        return ctx.response(API, error_code=error, mechanisms=enabled)
    return ctx.response(API, error_code=error_codes.NONE, mechanisms=enabled)
