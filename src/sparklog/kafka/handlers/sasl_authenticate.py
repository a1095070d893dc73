"""SaslAuthenticate: one message of the SASL login the handshake began (SCRAM-SHA-256's
client-first and client-final, or PLAIN's one message), answered with the broker's next message.
A failed login is ``SASL_AUTHENTICATION_FAILED`` with a message that does not tell an unknown user
from a wrong password, and the connection closes once it is answered (Kafka's behaviour); so does
a SaslAuthenticate without a handshake before it (``ILLEGAL_SASL_STATE``). From version 1 the last
answer carries the session's lifetime (``connections.max.reauth.ms``; 0: no new login is due)."""

from __future__ import annotations

import logging

from kafka.protocol.sasl import SaslAuthenticateRequest, SaslAuthenticateResponse

from sparklog.errors import AuthenticationFailed
from sparklog.kafka import error_codes
from sparklog.kafka.api import ApiSpec, Message, RequestContext
from sparklog.kafka.session import Stage

API = ApiSpec(SaslAuthenticateRequest, SaslAuthenticateResponse, 0, 2)
log = logging.getLogger(__name__)


def handle(request: Message, ctx: RequestContext) -> Message:
    session = ctx.session
    fields = {"session_lifetime_ms": 0} if ctx.api_version >= 1 else {}
    if session.stage is not Stage.AUTHENTICATE:
        ctx.close_after = True
        message = f"SaslAuthenticate while {session.stage.value}: send SaslHandshake first"
        return ctx.response(
            API, error_code=error_codes.ILLEGAL_SASL_STATE, error_message=message, auth_bytes=b"", **fields
        )
    try:
        answer, lifetime_ms = session.authenticate(bytes(request.auth_bytes or b""))
    except AuthenticationFailed as exc:
        log.info("SASL login from %s failed: %s", ctx.peer[0], exc)
        ctx.close_after = True
        error = error_codes.SASL_AUTHENTICATION_FAILED
        return ctx.response(API, error_code=error, error_message=str(exc), auth_bytes=b"", **fields)
    if lifetime_ms >= 0 and ctx.api_version >= 1:
        fields["session_lifetime_ms"] = lifetime_ms
    return ctx.response(API, error_code=error_codes.NONE, error_message=None, auth_bytes=answer, **fields)
