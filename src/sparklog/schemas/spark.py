"""What Spark needs of typed values: Spark's Arrow conversion (PySpark 4) takes every type of the
mapping except ``time32`` and decimals wider than 38 digits, so the data source widens those.

* ``time32[ms]`` (Avro time-millis) -> ``time64[us]`` (Spark ``TimeType(6)``), exact;
* ``decimal256`` (Avro decimals of 39-76 digits) -> ``string`` (Spark decimals stop at 38 digits);
* ``fixed_size_binary`` -> ``binary`` (Spark ``BinaryType`` either way; plain binary is the safer path).

:func:`spark_arrow_type` gives the type to declare (then ``pyspark.sql.pandas.types.from_arrow_type``
for the Spark schema), :func:`to_spark_arrow` casts a column to it (returns the column itself when
nothing needs widening, which is the usual case). The sink goes the other way with
:func:`from_spark_arrow`: only the decimal text needs parsing back (``time64[us]`` and ``binary``
cast safely to ``time32[ms]`` and ``fixed_size_binary`` when the values fit).
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from sparklog.errors import InvalidRecord
from sparklog.schemas._arrays import list_parts, make_list, make_struct, struct_children


def spark_arrow_type(type_: pa.DataType) -> pa.DataType:
    """``type_`` with the types Spark cannot take replaced (recursively)."""
    t = pa.types
    if t.is_struct(type_):
        return pa.struct([f.with_type(spark_arrow_type(f.type)) for f in type_])
    if t.is_map(type_):
        item = type_.item_field
        return pa.map_(type_.key_field, item.with_type(spark_arrow_type(item.type)))
    if t.is_list(type_):
        return pa.list_(type_.value_field.with_type(spark_arrow_type(type_.value_type)))
    if t.is_time32(type_):
        return pa.time64("us")
    if t.is_decimal256(type_):
        return pa.string()
    if t.is_fixed_size_binary(type_):
        return pa.binary()
    return type_


def to_spark_arrow(values: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """``values`` cast to :func:`spark_arrow_type` (the same object when no cast is needed)."""
    target = spark_arrow_type(values.type)
    return values if target.equals(values.type) else values.cast(target)


def from_spark_arrow(values: pa.Array, target: pa.DataType, path: str = "") -> pa.Array:
    """Values as Spark hands them to a writer, with the text of decimals wider than 38 digits parsed
    back where ``target`` (a typed topic's Arrow type) has them: the inverse of :func:`to_spark_arrow`
    for what :func:`sparklog.schemas.conformance.conform` does not do (it never parses text). Fields are
    matched by name; only the columns on the way to such a decimal are rebuilt (zero-copy otherwise),
    and ``values`` itself is returned when nothing needs parsing. Raises :class:`InvalidRecord`
    naming the field for text that is not a decimal."""
    wanted = _unwidened(values.type, target)
    if wanted is None:
        return values
    t = pa.types
    if t.is_struct(wanted):
        kids = []
        for k, (f, col) in enumerate(zip(values.type, struct_children(values), strict=True)):
            i = target.get_field_index(f.name)
            if i >= 0 and not f.type.equals(wanted.field(k).type):
                if values.null_count:  # what lies under a null struct is not text to parse
                    col = pc.if_else(values.is_valid(), col, pa.nulls(len(col), col.type))
                col = from_spark_arrow(col, target.field(i).type, f"{path}.{f.name}" if path else f.name)
            kids.append(col)
        return make_struct(kids, wanted, values)
    if t.is_list(wanted) or t.is_large_list(wanted):
        offsets, items = list_parts(values)
        items = from_spark_arrow(items, target.value_type, f"{path}[]")
        mask = values.is_null() if values.null_count else None
        if t.is_large_list(wanted):
            return pa.LargeListArray.from_arrays(offsets, items, type=wanted, mask=mask)
        return make_list(offsets, items, wanted, values)
    if t.is_map(wanted):
        offsets, entries = list_parts(values)
        items = from_spark_arrow(entries.field(1), target.item_type, f"{path}{{}}")
        entries = pa.StructArray.from_arrays([entries.field(0), items], fields=[wanted.key_field, wanted.item_field])
        return make_list(offsets, entries, wanted, values)
    try:
        return values.cast(wanted)  # the text of a decimal256
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise InvalidRecord(f"field '{path}' must be a decimal ({wanted}): {exc}") from None


def _unwidened(source: pa.DataType, target: pa.DataType) -> pa.DataType | None:
    """``source`` with string leaves made decimal256 where ``target`` has decimal256 (None: no change)."""
    t = pa.types
    if t.is_decimal256(target) and (t.is_string(source) or t.is_large_string(source)):
        return target
    if t.is_struct(source) and t.is_struct(target):
        fields, changed = [], False
        for f in source:
            i = target.get_field_index(f.name)
            inner = _unwidened(f.type, target.field(i).type) if i >= 0 else None
            fields.append(f if inner is None else f.with_type(inner))
            changed = changed or inner is not None
        return pa.struct(fields) if changed else None
    if (t.is_list(source) or t.is_large_list(source)) and t.is_list(target):
        inner = _unwidened(source.value_type, target.value_type)
        if inner is None:
            return None
        make = pa.list_ if t.is_list(source) else pa.large_list
        return make(source.value_field.with_type(inner))
    if t.is_map(source) and t.is_map(target):
        inner = _unwidened(source.item_type, target.item_type)
        return None if inner is None else pa.map_(source.key_field, source.item_field.with_type(inner))
    return None
