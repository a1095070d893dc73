"""What the ``sparklog`` sink checks at ``save()``/``start()``, before any task runs: the input's
columns and their types (:func:`check_input_schema`) and the target topic named by the ``topic``
option (:func:`check_target_topic`); :func:`partitions_of` is the partition count of a target topic,
cached per process, which tasks use to route rows."""

from __future__ import annotations

import logging

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from sparklog.client.cluster_address import ClusterAddress
from sparklog.client.cluster_client import ClusterClient
from sparklog.datasource import connections
from sparklog.datasource.options import WriteOptions
from sparklog.datasource.typed import check_sink_value_type
from sparklog.errors import InvalidRequest, UnknownTopic

log = logging.getLogger("sparklog.datasource")


def _is(dtype: DataType, *types: type) -> bool:
    return isinstance(dtype, types)


def check_input_schema(schema: StructType, options: WriteOptions) -> None:
    """Refuse (at save()/start()) inputs the sink cannot write, naming the column."""
    fields = {f.name.lower(): f for f in schema.fields}
    if options.topic is not None:
        fields.pop("topic", None)  # the option overrides the column, whatever its type (Kafka's rule)
    if "value" not in fields:
        raise InvalidRequest(
            "sparklog sink needs a 'value' column (binary or string, or a struct for a typed topic); the input "
            f"has {schema.simpleString()}"
        )
    checks = {
        "value": (BinaryType, StringType, StructType),
        "key": (BinaryType, StringType),
        "topic": (StringType,),
        "partition": (IntegerType, LongType, ShortType),
        "timestamp": (TimestampType, TimestampNTZType, LongType),
    }
    ignored = [f.name for name, f in fields.items() if name not in checks and name != "headers"]
    if ignored:
        log.info("sparklog sink: ignoring the input column(s) %s, as Kafka's sink does", ", ".join(ignored))
    for name, field in fields.items():
        if name == "headers":
            dtype = field.dataType
            ok = (
                _is(dtype, ArrayType)
                and _is(dtype.elementType, StructType)
                and [f.name for f in dtype.elementType.fields] == ["key", "value"]
                and _is(dtype.elementType.fields[0].dataType, StringType)
                and _is(dtype.elementType.fields[1].dataType, BinaryType, StringType)
            ) or (
                _is(dtype, MapType) and _is(dtype.keyType, StringType) and _is(dtype.valueType, BinaryType, StringType)
            )
            if not ok:
                raise InvalidRequest(
                    "sparklog sink column 'headers' must be array<struct<key:string,value:binary>> or "
                    f"map<string,binary>, got {dtype.simpleString()}"
                )
            continue
        if name not in checks:
            continue
        if not _is(field.dataType, *checks[name]):
            raise InvalidRequest(
                f"sparklog sink column {field.name!r} has type {field.dataType.simpleString()}; expected "
                + " or ".join(t.typeName() for t in checks[name])
            )
    if "topic" not in fields and options.topic is None:
        raise InvalidRequest("sparklog sink needs the option 'topic' or a 'topic' column")


def check_target_topic(options: WriteOptions, schema: StructType) -> None:
    """At save()/start(): the ``topic`` option names a topic that exists and takes the input's
    ``value`` type (rows naming other topics in a ``topic`` column are checked when written)."""
    if options.topic is None:
        return
    client = connections.cluster_client(options.address)
    partitions_of(client, options.topic)
    value = next(f for f in schema.fields if f.name.lower() == "value")
    check_sink_value_type(value.dataType, client.value_schema(options.topic), options.topic)


_partition_counts: dict[tuple[ClusterAddress, str], int] = {}


def partitions_of(client: ClusterClient, topic: str) -> int:
    """The partition count of a topic the sink may write (cached per process); refuses topics that
    do not exist."""
    key = (client.address, topic)
    n = _partition_counts.get(key)
    if n is None:
        try:
            n = client.topic(topic, refresh=True).partitions
        except UnknownTopic:
            raise UnknownTopic(f"sparklog sink: topic {topic!r} does not exist (create it first)") from None
        _partition_counts[key] = n
    return n
