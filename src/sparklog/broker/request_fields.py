"""Fields of a JSON request read as the broker trusts them: integers that fit 64 bits, topic names
checked against the naming rule before they become a path anywhere; anything else is an
:class:`~sparklog.errors.InvalidRequest` naming the field."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sparklog.errors import InvalidRequest
from sparklog.names import check_topic_name
from sparklog.protocol import wire


def parse_request(data: bytes | Any) -> dict[str, Any]:
    """A request's JSON object (a descriptor's command, a ticket, an action's body)."""
    try:
        request = wire.decode(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidRequest(f"request is not valid JSON: {str(exc)[:200]}") from None
    except RecursionError:
        raise InvalidRequest("request JSON is nested too deeply") from None
    if not isinstance(request, dict):
        raise InvalidRequest("request must be a JSON object")
    return request


def int_field(request: Mapping[str, Any], name: str, default: int | None = None) -> int:
    value = request.get(name, default)
    if value is None:
        raise InvalidRequest(f"request is missing '{name}'")
    if not wire.is_int64(value):
        kind = "fit in 64 bits" if isinstance(value, int) and not isinstance(value, bool) else "be an integer"
        raise InvalidRequest(f"'{name}' must {kind}, got {value!r:.100}")
    return value


def topic_field(request: Mapping[str, Any], name: str = "topic") -> str:
    """The request's topic (its field ``name``), checked against the naming rule before it is used
    as a path anywhere."""
    return check_topic_name(request.get(name))
