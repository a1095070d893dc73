"""The naming rule of topics, consumer groups, users and transactional ids (the Spark sink's ids),
shared by the broker, the clients, the CLI, the schema registry and the Spark data source.

Kafka's rule: 1 to 249 characters of ``[A-Za-z0-9._-]``, and neither ``.`` nor ``..`` (each name is
also a ZooKeeper path component, where those two mean "here" and "the parent"). Names starting with
``__sparklog`` are sparklog's own internal topics (the Spark sink's staging topics): they are valid
names, so they can be read and written, but only sparklog creates, alters or deletes them
(:func:`check_not_internal`).

The checks are cheap enough for every request: a name seen valid before is found in a bounded set,
any other is matched by one compiled regular expression.
"""

from __future__ import annotations

import re

from sparklog.errors import InvalidGroupId, InvalidRequest, InvalidTopic, InvalidUserName

MAX_NAME_LENGTH = 249
INTERNAL_TOPIC_PREFIX = "__sparklog"
LEGAL_NAME = re.compile(r"[A-Za-z0-9._-]{1,249}")
_ILLEGAL_CHAR = re.compile(r"[^A-Za-z0-9._-]")
_KNOWN_GOOD_LIMIT = 100_000  # names remembered as valid; the set starts over when full
_known_topics: set[str] = set()
_known_groups: set[str] = set()
_known_users: set[str] = set()
_known_transactional_ids: set[str] = set()


def _shown(name: str) -> str:
    """The name for an error message: quoted and escaped (one line), long ones shortened."""
    text = repr(name)
    return text if len(text) <= 60 else f"{text[:40]}...{text[-10:]} ({len(name)} characters)"


def _problem(name: object) -> str | None:
    """Why ``name`` breaks the rule (None if it does not)."""
    if not isinstance(name, str):
        return f"{name!r} is not a string"
    if not name:
        return "it is empty; use 1 to 249 characters"
    if name in (".", ".."):
        return "'.' and '..' are not allowed as names"
    if len(name) > MAX_NAME_LENGTH:
        return f"it is {len(name)} characters long; at most {MAX_NAME_LENGTH} are allowed"
    bad = sorted(set(_ILLEGAL_CHAR.findall(name)))
    if bad:
        listed = ", ".join(repr(c) for c in bad[:5])
        return f"it contains {listed}; use only ASCII letters, digits, '.', '_' and '-'"
    return None


def _check(name: object, known: set[str], kind: str, error: type[InvalidRequest]) -> str:
    if type(name) is str and name in known:
        return name
    if type(name) is str and LEGAL_NAME.fullmatch(name) and name not in (".", ".."):
        if len(known) >= _KNOWN_GOOD_LIMIT:
            known.clear()
        known.add(name)
        return name
    problem = _problem(name)
    shown = _shown(name) if isinstance(name, str) else repr(name)
    raise error(f"invalid {kind} name {shown}: {problem}")


def check_topic_name(name: object) -> str:
    """``name`` if it is a valid topic name (internal ones included), else :class:`InvalidTopic`
    saying what is wrong with it."""
    return _check(name, _known_topics, "topic", InvalidTopic)


def check_group_id(name: object) -> str:
    """``name`` if it is a valid consumer group name, else :class:`InvalidGroupId`."""
    return _check(name, _known_groups, "group", InvalidGroupId)


def check_user_name(name: object) -> str:
    """``name`` if it is a valid user name (the rule of topic names, so it can be a znode name),
    else :class:`InvalidRequest`."""
    return _check(name, _known_users, "user", InvalidUserName)


def is_internal(name: str) -> bool:
    """Whether ``name`` is reserved for sparklog's internal topics (starts with ``__sparklog``)."""
    return name.startswith(INTERNAL_TOPIC_PREFIX)


def check_not_internal(name: str, action: str = "create") -> str:
    """``name`` if a user may ``action`` a topic of that name (valid, not reserved), else
    :class:`InvalidTopic`."""
    check_topic_name(name)
    if is_internal(name):
        raise InvalidTopic(
            f"cannot {action} topic {_shown(name)}: names starting with {INTERNAL_TOPIC_PREFIX!r} are reserved "
            "for sparklog's internal topics"
        )
    return name


def check_transactional_id(name: object) -> str:
    """``name`` if it is a valid transactional id, else :class:`InvalidRequest`. An exactly-once Spark
    sink's id (its streaming query id, or ``batch-<uuid>``) is its transactional id, as Kafka names
    the state of a transactional producer: the resource its ACLs are about, and a znode name."""
    return _check(name, _known_transactional_ids, "transactional id", InvalidRequest)
