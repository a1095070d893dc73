"""Typed topics in Spark: the ``value`` column of a read is ``binary`` for plain topics and a struct
for typed topics (an Avro value schema in ZooKeeper), the latest schema version's record mapped to
Arrow and then to Spark (:mod:`sparklog.schemas.spark` widens what Spark cannot take). With the
``fields`` option the broker sends only those fields of the value, and the struct has only them.

The value type is fixed when the read is loaded (Spark needs the schema then), so every subscribed
topic must have the same one. Values written with older schema versions reach Spark evolved to the
latest by the broker; a schema version registered *after* a streaming query started is read as the
version it started with when that is a plain cast, and fails the query (asking for a restart)
otherwise.
"""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql.pandas.types import from_arrow_type, to_arrow_type
from pyspark.sql.types import BinaryType, DataType

from sparklog.datasource.options import ReadOptions, Subscription, _fail
from sparklog.errors import InvalidRequest, SparklogError


def value_arrow_type(zookeeper: str, subscription: Subscription, fields: tuple[str, ...] | None) -> pa.DataType:
    """The Arrow type of the values of the subscribed topics as they exist now (``binary`` for plain
    topics, the projected latest-version struct for typed ones)."""
    from sparklog.coordination.cluster import ClusterMetadata
    from sparklog.schemas.projection import projected_type
    from sparklog.schemas.registry import SchemaRegistry

    with ClusterMetadata(zookeeper) as cluster:
        if subscription.pattern is not None:
            topics = [t for t in cluster.topics() if subscription.matches(t)]
        else:
            existing = set(cluster.topics())
            topics = [t for t in subscription.topics if t in existing]
        registry = SchemaRegistry.from_cluster(cluster)
        types: dict[str, pa.DataType] = {}
        for topic in topics:
            schema = registry.latest_or_none(topic)
            if schema is None:
                types[topic] = pa.binary()
            else:
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
    """What ``DataSource.schema()`` declares for ``value`` (reads ZooKeeper)."""
    return spark_value_type(value_arrow_type(options.zookeeper, options.subscription, options.fields))


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
    from sparklog.schemas.spark import to_spark_arrow

    try:
        return to_spark_arrow(values).cast(target)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
        raise SparklogError(
            f"sparklog: the value schema of {where} changed since this read was planned ({values.type} is not "
            f"{target}: {exc}); restart the query to read the new version"
        ) from None


def arrow_of(spark_type: DataType) -> pa.DataType:
    return to_arrow_type(spark_type, timezone="UTC")
