"""Principals: who a call comes from, as Kafka writes them (``User:alice``)."""

from __future__ import annotations

from sparklog.errors import InvalidRequest
from sparklog.names import check_user_name

USER_TYPE = "User"
ANONYMOUS = "User:ANONYMOUS"  # a call on a listener that does not authenticate (Kafka's name)


def user_principal(name: str) -> str:
    """The principal of user ``name``."""
    return f"{USER_TYPE}:{check_user_name(name)}"


def parse_principal(text: object) -> str:
    """``text`` if it names a principal (``User:<name>``, or ``User:*`` for everyone, as ACLs
    take it), else :class:`InvalidRequest` saying what is wrong."""
    if not isinstance(text, str) or ":" not in text:
        raise InvalidRequest(f"principal {text!r:.80} must be written 'User:<name>'")
    kind, name = text.split(":", 1)
    if kind != USER_TYPE:
        raise InvalidRequest(f"principal {text!r:.80}: the only principal type is '{USER_TYPE}'")
    if name == "*":
        return text
    return user_principal(name)
