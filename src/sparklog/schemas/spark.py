"""What Spark needs of typed values: Spark's Arrow conversion (PySpark 4) takes every type of the
mapping except ``time32`` and decimals wider than 38 digits, so the data source widens those.

* ``time32[ms]`` (Avro time-millis) -> ``time64[us]`` (Spark ``TimeType(6)``), exact;
* ``decimal256`` (Avro decimals of 39-76 digits) -> ``string`` (Spark decimals stop at 38 digits);
* ``fixed_size_binary`` -> ``binary`` (Spark ``BinaryType`` either way; plain binary is the safer path).

:func:`spark_arrow_type` gives the type to declare (then ``pyspark.sql.pandas.types.from_arrow_type``
for the Spark schema), :func:`to_spark_arrow` casts a column to it (returns the column itself when
nothing needs widening, which is the usual case).
"""

from __future__ import annotations

import pyarrow as pa


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
