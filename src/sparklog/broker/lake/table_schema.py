"""A typed topic's Delta table following the topic's schema evolution (issue 19).

The table records the value schema version its rows are in as the Delta application transaction
``sparklog-<topic>-schema`` (:func:`sparklog.lake.layout.schema_app_id`), committed
atomically with the rows that bring it there. When the topic's latest version ``V`` is newer than
the table's ``T``, the rows already in the table must read as rows of ``V``. Two cases:

- **additive** (:func:`additive`): ``V`` only adds top-level fields whose value for older rows is
  null (a ``null`` default, or nullable without a default), and keeps every other field's data as
  is. Rows of ``T`` then already read as rows of ``V`` (a column a Parquet file lacks reads as
  null), so nothing is rewritten: the next append adds the columns (``schema_mode="merge"``) and
  moves the table to ``V`` in the same commit.
- anything else (an added field with a non-null default, a removed field, a promoted type, a
  renamed field, a field that became required, enum symbols removed...): the table is **rewritten**
  in one commit (:func:`rewritten`): every row read as a value of ``T``, evolved to ``V`` with the
  project's schema evolution (:func:`sparklog.schemas.evolution.evolve`, Avro's resolution rules:
  added fields take their defaults) and written back with ``V``'s columns (``mode="overwrite"``,
  ``schema_mode="overwrite"``): a field ``V`` removed loses its column, as the topic's readers no
  longer see it.
"""

from __future__ import annotations

import pyarrow as pa

from sparklog.broker.lake.rows import flatten_value, value_struct
from sparklog.schemas.evolution import evolve, same_data
from sparklog.schemas.value_schema import ValueSchema


def additive(old: ValueSchema, new: ValueSchema) -> bool:
    """Whether rows of ``old`` read as rows of ``new`` with nothing rewritten (new columns null)."""
    before = {f.name: f for f in old.tree.fields}
    names = {f.name for f in new.tree.fields}
    if set(before) - names:
        return False  # a removed field: its column goes
    for field in new.tree.fields:
        was = before.get(field.name)
        if was is not None:
            if not same_data(was.node, field.node):
                return False
            continue
        if field.aliases or (field.has_default and field.default is not None):
            return False  # a renamed field, or a default older rows must show
        if not field.has_default and not field.node.nullable:
            return False  # evolve refuses it: let the rewrite say so
    return True


def rewritten(rows: pa.Table, old: ValueSchema, new: ValueSchema) -> pa.Table:
    """Table ``rows`` whose values are in ``old``, with their values in ``new`` (Avro defaults for
    added fields)."""
    values = evolve(value_struct(rows, old.arrow_type), old, new)
    return flatten_value(rows, values)
