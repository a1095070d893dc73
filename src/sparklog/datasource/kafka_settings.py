"""Kafka client settings (``kafka.*`` options) given to the ``sparklog`` data source: which ones
sparklog maps to a meaning of its own, which it refuses (as Spark's Kafka connector does), and
which it accepts and ignores.

Spark's Kafka connector hands every ``kafka.<key>`` option to its Kafka consumers and producers, and
those ignore settings they do not know. A job written for that connector therefore carries client
settings (``kafka.fetch.min.bytes``, ``kafka.request.timeout.ms``, ...) that have no sparklog
meaning; they are accepted and ignored with one warning per option set (:func:`warn_ignored`), so the
job runs unchanged. Settings the connector itself refuses are refused here with its reason.

:data:`SETTINGS` is the table, keyed by the client setting's name without the ``kafka.`` prefix. Each
entry says on which side it applies (``read``, ``write`` or both) and what sparklog does with it. The
sink's producer settings are added to the same table.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Iterable, Mapping
from typing import Literal

from sparklog.datasource.producer_settings import PRODUCER_OPTIONS
from sparklog.errors import InvalidRequest
from sparklog.security.client_config import KEYS as SECURITY_KEYS

log = logging.getLogger("sparklog.datasource")

PREFIX = "kafka."
Side = Literal["read", "write"]
BOTH: tuple[Side, ...] = ("read", "write")
READ: tuple[Side, ...] = ("read",)
WRITE: tuple[Side, ...] = ("write",)


@dataclasses.dataclass(frozen=True)
class Setting:
    """What sparklog does with the Kafka client setting ``kafka.<name>``.

    ``mapped``: it has a sparklog meaning (``meaning`` says which); ``refused``: it fails with
    ``meaning`` as the reason and what to use instead; ``ignored``: accepted, with a warning."""

    name: str
    sides: tuple[Side, ...]
    status: Literal["mapped", "refused", "ignored"]
    meaning: str


def _mapped(name: str, meaning: str, sides: tuple[Side, ...] = BOTH) -> Setting:
    return Setting(name, sides, "mapped", meaning)


def _refused(name: str, reason: str, sides: tuple[Side, ...] = READ) -> Setting:
    return Setting(name, sides, "refused", reason)


_TABLE = [
    _mapped("bootstrap.servers", "the brokers to bootstrap from (same as the option 'bootstrap.servers')"),
    *(_mapped(key, f"the client's {key} (same as the option '{key}')") for key in SECURITY_KEYS),
    _mapped(
        "group.id",
        "the group whose committed offsets the stream writes and startingOffsets=group reads "
        "(same as the option 'group')",
        READ,
    ),
    _refused(
        "auto.offset.reset",
        "is not supported. Instead set the source option 'startingOffsets' to 'earliest' or 'latest' "
        "to specify where to start. Structured Streaming manages which offsets are consumed, and "
        "'startingOffsets' only applies when a new query starts: a query resumes from its checkpoint",
    ),
    _refused(
        "key.deserializer",
        "is not supported as keys are read as binary. Use DataFrame operations to explicitly deserialize the keys",
    ),
    _refused(
        "value.deserializer",
        "is not supported as values are read as binary (or, for typed topics, as a struct of the "
        "topic's schema). Use DataFrame operations to explicitly deserialize the values",
    ),
    _refused(
        "enable.auto.commit",
        "is not supported: a stream commits its offsets to the group named by 'group' or "
        "'kafka.group.id' after each micro-batch",
    ),
    _refused("interceptor.classes", "is not supported: interceptors could change the records read"),
]
# the sink's producer settings (kafka.acks, ...): checked and applied by producer_settings; a read
# given one ignores it, as the connector's consumers ignore producer settings
_TABLE += [
    _mapped(key[len(PREFIX) :], "a producer setting of the sink (see producer_settings)", WRITE)
    for key in PRODUCER_OPTIONS
    if key.startswith(PREFIX)
]
SETTINGS: dict[str, Setting] = {s.name: s for s in _TABLE}


def is_kafka_option(key: str) -> bool:
    return key.lower().startswith(PREFIX)


def setting(key: str) -> Setting | None:
    """The table's entry for the option ``kafka.<name>`` (any case), or None if it has none."""
    return SETTINGS.get(key.lower()[len(PREFIX) :])


def ignored(options: Iterable[str], side: Side) -> list[str]:
    """The ``kafka.*`` options of ``options`` that ``side`` accepts and ignores (sorted, lower-cased);
    raises InvalidRequest for one it refuses."""
    out: list[str] = []
    for key in sorted(k.lower() for k in options if is_kafka_option(k)):
        entry = setting(key)
        if entry is not None and side in entry.sides:
            if entry.status == "refused":
                raise InvalidRequest(f"Kafka option '{entry.name}' {entry.meaning}")
            if entry.status == "mapped":
                continue
        out.append(key)
    return out


_warned: set[tuple[Side, frozenset[str]]] = set()
_warned_lock = threading.Lock()


def warn_ignored(options: Mapping[str, str], side: Side) -> list[str]:
    """Check the ``kafka.*`` options of a read or write (refused ones raise) and log ONE warning
    naming those ignored, once per process and option set (Spark builds a source's options several
    times per query); the ignored options."""
    keys = ignored(options, side)
    if keys:
        marker = (side, frozenset(keys))
        with _warned_lock:
            first = marker not in _warned
            _warned.add(marker)
        if first:
            log.warning(
                "sparklog %s: ignoring Kafka client settings it has no use for: %s (sparklog clients are "
                "not Kafka clients; see docs/migrating-from-kafka.md)",
                side,
                ", ".join(keys),
            )
    return keys
