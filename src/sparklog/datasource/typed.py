"""Typed topics in Spark: the ``value`` column of a read is ``binary`` for plain topics and a struct
for typed topics (an Avro value schema in ZooKeeper), the latest schema version's record mapped to
Arrow and then to Spark (:mod:`sparklog.schemas.spark` widens what Spark cannot take). With the
``fields`` option the broker sends only those fields of the value, and the struct has only them.

The value type is fixed when the read is loaded (Spark needs the schema then), so every subscribed
topic must have the same one. Values written with older schema versions reach Spark evolved to the
latest by the broker; a schema version registered *after* a streaming query started is read as the
version it started with when that is a plain cast, and fails the query (asking for a restart)
otherwise.

The sink takes, for a typed topic, a struct ``value`` (fields matched by name, as the source reads
them: :func:`sink_values` parses back what the source widened, then ``ValueSchema.conform`` checks
and casts it) or Avro single-object encoded ``binary`` (decoded like the Producer does); a plain
topic takes binary or string values only. :func:`check_sink_value_type` refuses a mismatch of types
at ``save()``/``start()``; row-level problems (a null required field, an unknown enum symbol, a
malformed Avro payload) fail the task, so nothing of the batch is published.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa
from pyspark.sql.pandas.types import from_arrow_type, to_arrow_type
from pyspark.sql.types import BinaryType, DataType, StructType

from sparklog.datasource.connections import cluster_client
from sparklog.datasource.options import ReadOptions, Subscription, _fail
from sparklog.errors import InvalidRecord, InvalidRequest, SparklogError

if TYPE_CHECKING:
    from sparklog.client.cluster_address import ClusterAddress
    from sparklog.schemas.codec import Lookup
    from sparklog.schemas.value_schema import ValueSchema


def value_arrow_type(
    address: ClusterAddress, subscription: Subscription, fields: tuple[str, ...] | None
) -> pa.DataType:
    """The Arrow type of the values of the subscribed topics as they exist now (``binary`` for plain
    topics, the projected latest-version struct for typed ones)."""
    from sparklog.schemas.projection import projected_type

    view = cluster_client(address).view
    if subscription.pattern is not None:
        topics = [t for t in view.topics() if subscription.matches(t)]
    else:
        existing = set(view.topics())
        topics = [t for t in subscription.named if t in existing]
    types: dict[str, pa.DataType] = {}
    for topic in topics:
        versions = view.schemas(topic)
        if not versions:
            types[topic] = pa.binary()
        else:
            schema = versions[-1]
            try:
                types[topic] = projected_type(schema.arrow_type, fields) if fields else schema.arrow_type
            except InvalidRequest as exc:
                raise _fail("fields", f"{exc} (topic {topic!r})") from None
    if fields and not any(pa.types.is_struct(t) for t in types.values()):
        where = ", ".join(topics) if topics else subscription.describe()
        raise _fail("fields", f"selects fields of typed values, but {where} has plain (binary) values")
    distinct = {str(t): t for t in types.values()}
    if len(distinct) > 1:
        listing = "; ".join(f"{topic}: {t}" for topic, t in sorted(types.items()))
        raise InvalidRequest(
            f"sparklog read: the subscribed topics have different value types ({listing}); read them separately"
        )
    return next(iter(distinct.values())) if distinct else pa.binary()


def spark_value_type(arrow_type: pa.DataType) -> DataType:
    """The Spark type of the ``value`` column for values of ``arrow_type``."""
    if pa.types.is_binary(arrow_type):
        return BinaryType()
    from sparklog.schemas.spark import spark_arrow_type

    return from_arrow_type(spark_arrow_type(arrow_type))


def value_type_for(options: ReadOptions) -> DataType:
    """What ``DataSource.schema()`` declares for ``value`` (reads the cluster's metadata)."""
    return spark_value_type(value_arrow_type(options.address, options.subscription, options.fields))


def to_spark_values(values: pa.Array, target: pa.DataType, where: str) -> pa.Array:
    """A fetched value column as exactly ``target`` (the Arrow type Spark expects)."""
    if values.type.equals(target):
        return values
    if pa.types.is_binary(target) != pa.types.is_binary(values.type):
        kind = "typed (struct)" if pa.types.is_struct(values.type) else "plain (binary)"
        raise SparklogError(
            f"sparklog: {where} has {kind} values, but this read was planned for {target}; "
            "read topics of one value type together"
        )
    from sparklog.schemas.spark import spark_arrow_type, to_spark_arrow

    try:
        try:
            return to_spark_arrow(values).cast(target)
        except pa.ArrowInvalid as exc:
            if "non-nullable" not in str(exc):
                raise
            # a required field of a null struct may hold nulls under it (valid Arrow, as Spark
            # writes them), which Arrow's cast refuses to label non-nullable: cast all-nullable,
            # then put the labels back
            loose = values.cast(_all_nullable(values.type))
            return _relabel(
                loose.cast(_all_nullable(spark_arrow_type(values.type))).cast(_all_nullable(target)), target
            )
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
        raise SparklogError(
            f"sparklog: the value schema of {where} changed since this read was planned ({values.type} is not "
            f"{target}: {exc}); restart the query to read the new version"
        ) from None


def _all_nullable(type_: pa.DataType) -> pa.DataType:
    """``type_`` with every nested field nullable."""
    t = pa.types
    if t.is_struct(type_):
        return pa.struct([f.with_type(_all_nullable(f.type)).with_nullable(True) for f in type_])
    if t.is_map(type_):
        item = type_.item_field
        return pa.map_(type_.key_field, item.with_type(_all_nullable(item.type)).with_nullable(True))
    if t.is_list(type_):
        return pa.list_(type_.value_field.with_type(_all_nullable(type_.value_type)).with_nullable(True))
    return type_


def _relabel(values: pa.Array, target: pa.DataType) -> pa.Array:
    """``values`` (of ``_all_nullable(target)``) as ``target``: the same buffers, the target's
    nullability labels (zero-copy)."""
    from sparklog.schemas._arrays import list_parts, make_list, make_struct, struct_children

    t = pa.types
    if t.is_struct(target):
        kids = [_relabel(col, f.type) for col, f in zip(struct_children(values), target, strict=True)]
        return make_struct(kids, target, values)
    if t.is_map(target):
        offsets, entries = list_parts(values)
        items = _relabel(entries.field(1), target.item_type)
        entries = pa.StructArray.from_arrays([entries.field(0), items], fields=[target.key_field, target.item_field])
        return make_list(offsets, entries, target, values)
    if t.is_list(target):
        offsets, items = list_parts(values)
        return make_list(offsets, _relabel(items, target.value_type), target, values)
    return values


def arrow_of(spark_type: DataType) -> pa.DataType:
    return to_arrow_type(spark_type, timezone="UTC")


# ----------------------------------------------------------------------------------------- sink
def _plain_topic_struct(topic: str, got: object) -> str:
    return (
        f"sparklog sink: topic {topic!r} has plain (binary) values, so 'value' must be binary or string, "
        f"got {got}; a struct value needs a typed topic (one created with an Avro value schema), "
        "or serialize it first (to_json, to_avro)"
    )


def _typed_topic_other(topic: str, schema: ValueSchema, got: object) -> str:
    return (
        f"sparklog sink: topic {topic!r} is a typed topic ({schema.label}), so 'value' must be a struct of "
        f"its fields ({', '.join(f.name for f in schema.tree.fields)}) or Avro single-object encoded binary, "
        f"got {got}"
    )


def sink_values(values: pa.Array, schema: ValueSchema | None, topic: str, lookup: Lookup | None) -> pa.Array:
    """The ``value`` column a sink task stages for ``topic``: for a typed topic exactly the latest
    schema's Arrow type (checked, fields named in errors), for a plain one as given (binary or string,
    cast later). Raises :class:`InvalidRecord`."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    t = pa.types
    if schema is None:
        if t.is_struct(values.type):
            raise InvalidRecord(_plain_topic_struct(topic, values.type))
        return values
    try:
        if t.is_struct(values.type):
            from sparklog.schemas.spark import from_spark_arrow

            return schema.conform(from_spark_arrow(values, schema.arrow_type))
        if t.is_binary(values.type) or t.is_large_binary(values.type):
            from sparklog.schemas.codec import decode_avro

            return decode_avro(values.cast(pa.binary()), schema, lookup=lookup)
    except InvalidRecord as exc:
        raise InvalidRecord(f"sparklog sink: a value does not match {schema.label}: {exc}") from None
    raise InvalidRecord(_typed_topic_other(topic, schema, values.type))


def check_sink_value_type(value_type: DataType, schema: ValueSchema | None, topic: str) -> None:
    """At ``save()``/``start()``: the input's ``value`` type can be written to ``topic`` (whose latest
    value schema is ``schema``, None for a plain topic); raises :class:`InvalidRequest` naming the
    field that does not fit (a missing required field, a field of the wrong type, an unknown one)."""
    if schema is None:
        if isinstance(value_type, StructType):
            raise InvalidRequest(_plain_topic_struct(topic, value_type.simpleString()))
        return
    if isinstance(value_type, BinaryType):
        return  # Avro bytes: checked row by row when decoded
    if not isinstance(value_type, StructType):
        raise InvalidRequest(_typed_topic_other(topic, schema, value_type.simpleString()))
    try:
        sink_values(pa.array([], arrow_of(value_type)), schema, topic, None)
    except InvalidRecord as exc:
        raise InvalidRequest(str(exc)) from None
