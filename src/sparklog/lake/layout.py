"""Where a lake-enabled topic's Delta table is and what its commits are named (the application
transaction ids of each partition, of the table's schema version and of the topic's id), what
client and broker both need to know of a table; and its columns with the check that a typed
topic's value fields fit next to them. It depends on nothing but the errors and the naming rule,
so topic creation and alteration (:mod:`sparklog.coordination.cluster`), schema registration
(:mod:`sparklog.schemas.registry`) and the tierer share one rule.

A plain topic's table has the columns ``partition``, ``offset``, ``timestamp``, ``key``, ``value``
(binary), ``headers``; a typed topic's has the record columns ``partition``, ``offset``,
``timestamp``, ``key``, ``headers`` and then **one column per top-level field of its value** (in
its latest schema version), with no ``value`` column. A value field whose name equals a record
column, compared case-insensitively as Delta and Spark compare column names (``Offset`` clashes
with ``offset``), or two fields differing only in case, cannot be a column: such a schema is
refused on a lake-enabled topic, and ``lake.enabled=true`` is refused on a topic whose latest
schema has one (:class:`InvalidConfig`, naming the fields). No prefixing or renaming: a column
always has its field's name.
"""

from __future__ import annotations

from collections.abc import Iterable

from sparklog.errors import InvalidConfig
from sparklog.names import check_topic_name

PARTITION_COLUMN = "partition"
RECORD_COLUMNS = (PARTITION_COLUMN, "offset", "timestamp", "key", "headers")
_RESERVED = frozenset(RECORD_COLUMNS)


def value_column_clashes(fields: Iterable[str]) -> list[str]:
    """The value fields that cannot be columns of the table next to the record columns (in order)."""
    seen: dict[str, str] = {}
    clashes: list[str] = []
    for name in fields:
        folded = name.casefold()
        if folded in _RESERVED or folded in seen:
            clashes.append(name)
        seen.setdefault(folded, name)
    return clashes


def check_value_columns(topic: str, fields: Iterable[str]) -> None:
    """Refuse (:class:`InvalidConfig`) a lake-enabled typed topic whose value fields clash."""
    clashes = value_column_clashes(fields)
    if clashes:
        names = ", ".join(repr(name) for name in clashes)
        raise InvalidConfig(
            f"topic {topic!r}: with lake.enabled=true a typed topic's value fields become columns of its Delta "
            f"table next to {', '.join(RECORD_COLUMNS)}; field(s) {names} clash with those (or with each other: "
            "column names compare case-insensitively). Rename the field(s) in a new schema version, or leave "
            "lake.enabled off"
        )


def app_id(topic: str, partition: int) -> str:
    """The Delta application transaction id of one partition."""
    return f"sparklog-{topic}-{partition}"


def schema_app_id(topic: str) -> str:
    """The Delta application transaction id whose version is a typed topic's table's schema version."""
    return f"sparklog-{topic}-schema"


def topic_app_id(topic: str) -> str:
    """The Delta application transaction id whose version is the id of the topic whose rows the
    table holds (:meth:`sparklog.coordination.lake_offsets.LakeOffsets.topic_id`)."""
    return f"sparklog-{topic}-topic"


def table_uri(lake_dir: str, topic: str) -> str:
    """Where a topic's table lives: ``<lake dir>/<topic>`` (a directory or any URI deltalake writes)."""
    return f"{lake_dir.rstrip('/')}/{check_topic_name(topic)}"
