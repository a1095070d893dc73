"""The PySpark Python Data Source ``sparklog``: read topics as DataFrames (batch and streaming) and
write DataFrames to topics exactly once.

```python
import sparklog.datasource
sparklog.datasource.register(spark)

events = (spark.readStream.format("sparklog")
          .option("zookeeper", "127.0.0.1:2181").option("subscribe", "events")
          .option("startingOffsets", "earliest").option("group", "dashboard")
          .load())              # key, value, topic, partition, offset, timestamp, timestampType[, headers]
(events.selectExpr("key", "upper(cast(value as string)) as value")
       .writeStream.format("sparklog").option("topic", "events-upper")
       .option("checkpointLocation", "/tmp/ckpt").trigger(availableNow=True).start())
```

Read options: the Kafka source's, with its meanings, defaults and messages (the whole table, and
what differs, is in ``docs/migrating-from-kafka.md``). ``kafka.bootstrap.servers`` /
``bootstrap.servers`` (``host:port,...``: the job talks to brokers only and opens no ZooKeeper
session) or ``zookeeper`` (default ``$SPARKLOG_ZOOKEEPER`` or ``127.0.0.1:2181``); other ``kafka.*``
client settings are mapped, refused or ignored with one warning
(:mod:`sparklog.datasource.kafka_settings`). One of ``subscribe`` (alias ``topic``; comma list),
``subscribePattern`` (regex, new matching topics and partitions are picked up) or ``assign`` (JSON
``{"topic": [0, 1]}``). ``startingTimestamp``, ``startingOffsetsByTimestamp`` or ``startingOffsets``
(in that precedence; ``earliest``, ``latest``, ``group``, or JSON ``{"topic": {"0": 23}}`` with -2 =
earliest, -1 = latest, naming every partition read; default ``latest`` for streams, ``earliest`` for
batch, where ``latest`` is refused); ``startingOffsetsByTimestampStrategy`` (``error`` or
``latest``: what a partition with no record that recent does); batch only: ``endingTimestamp``,
``endingOffsetsByTimestamp`` or ``endingOffsets``. Streams: ``maxOffsetsPerTrigger`` (alias
``maxRecordsPerTrigger``; also honoured by ``Trigger.AvailableNow``), ``minOffsetsPerTrigger`` and
``maxTriggerDelay`` (see :mod:`sparklog.datasource.stream_reader`). ``minPartitions`` and
``maxRecordsPerPartition`` split large offset ranges; ``maxPartitions`` groups small ones into at
most that many input partitions. ``group`` / ``kafka.group.id`` (commit each
finished micro-batch's end offsets to that group; ``startingOffsets=group`` resumes from them, from
the earliest offset where nothing is committed); ``groupIdPrefix`` is accepted and ignored (the
source joins no consumer group). ``failOnDataLoss`` (default true: fail when retention deleted
offsets before they were read; false: skip ahead with a warning; compaction gaps are never data
loss); ``includeHeaders`` (default false); ``fields`` (typed topics: comma-separated value fields,
nested as ``address.zip``; the broker sends only those); ``kafkaConsumer.pollTimeoutMs`` (default
120000: how long an executor keeps retrying a partition's leader), ``fetchOffset.numRetries`` and
``fetchOffset.retryIntervalMs`` (defaults 3 and 10: the driver's offsets lookups).

Topics with ``lake.enabled`` (issue 19): ``earliest`` is the Delta table's first offset once the
table reaches the brokers' local log, and the brokers serve the offsets below their local log start
from the table (batch and streaming reads cross that boundary unchanged);
:func:`sparklog.spark.read_topic` reads a whole topic's history with Spark's own Parquet reader
(the files of one Delta snapshot) instead.

Schema (Kafka's, in its order): ``key`` binary, ``value`` binary (or, for typed topics, a struct of
the latest value schema version, see :mod:`sparklog.datasource.typed`), ``topic`` string,
``partition`` int, ``offset`` long, ``timestamp`` timestamp, ``timestampType`` int (0 CreateTime, 1
LogAppendTime: the topic's ``message.timestamp.type``), and ``headers``
array<struct<key string, value binary>> with ``includeHeaders``. Reads yield Arrow record batches
(one input partition per topic partition and offset range, split as the options say).

Write options: ``bootstrap.servers`` / ``kafka.bootstrap.servers`` or ``zookeeper``, ``topic``
(every row's topic: it overrides a ``topic`` column, as in Kafka's sink), ``batchRecords`` (rows per
stored batch, default 10000), ``stagingTopic`` (default ``__sparklog_staging``; typed targets stage
in ``<stagingTopic>.<topic>.v<version>.<hash>``), ``partitioner`` (``murmur2`` or ``fnv1a``; default
each topic's own) and Kafka's producer settings (``kafka.acks``, ``kafka.compression.type`` ...:
:mod:`sparklog.datasource.producer_settings`). Input columns ``value`` and optional ``key``,
``partition``, ``headers``, ``timestamp``, ``topic``; other columns are ignored, as Kafka's sink
ignores them; target topics must exist. ``value`` is binary
or string for a plain topic; for a typed topic a struct of its schema's fields (as this source reads
it; checked and converted, a row that does not fit fails the write naming the field) or Avro
single-object encoded binary. The sink is exactly-once: see :mod:`sparklog.datasource.writer`.

Unknown options, and options that contradict each other, fail at ``load()`` (reads) or
``save()``/``start()`` (writes) with a message naming the option; options that only apply to batch
reads or only to streams fail when the read is planned or the query starts.

Spark's Python workers must be able to import ``sparklog``: set ``PYSPARK_PYTHON`` to an interpreter
that has it before the session starts (``os.environ.setdefault("PYSPARK_PYTHON", sys.executable)``).
A session built from Python takes its workers' interpreter from that variable (default ``python3``);
setting ``spark.pyspark.python`` on the builder does not change it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sparklog.datasource.source import SparklogDataSource

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["SparklogDataSource", "register"]


def register(spark: SparkSession) -> None:
    """Make ``format("sparklog")`` available in this Spark session."""
    spark.dataSource.register(SparklogDataSource)
