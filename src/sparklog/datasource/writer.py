"""The ``sparklog`` sink: ``df.write.format("sparklog")`` and ``df.writeStream.format("sparklog")``.

Input columns: ``value`` (required: binary or string for plain topics; for a typed topic a struct of
its schema's fields, as the sparklog source reads it, or Avro single-object encoded binary, see
:mod:`sparklog.datasource.typed`), optional ``key`` (binary or string),
``partition`` (int), ``headers`` (array<struct<key string, value binary>> or map<string, binary>),
``timestamp`` (timestamp or long ms), ``topic`` (string; used when the ``topic`` option is not
given, which overrides it as in Kafka's sink; all checked at ``save()``/``start()``,
:mod:`sparklog.datasource.sink_checks`). Other columns (``offset``, ``timestampType`` as read
from a topic, anything else) are ignored, as Kafka's sink ignores them. Rows with a ``partition``
go there; keyed rows go to the partition the target topic's partitioner picks (``murmur2``, Kafka's,
or ``fnv1a`` for topics created before it; the option ``partitioner`` overrides, see
:mod:`sparklog.datasource.producer_settings` for it and Kafka's producer settings), so a key always
lands in the same partition, the one Kafka's producers put it in; rows without either are spread.

**Exactly-once.** Every row of a micro-batch ends up in its topic exactly once, across task
retries, speculative tasks, re-runs of a whole micro-batch and restarts of the query from its
checkpoint (Spark's Kafka sink is only at-least-once). How:

1. *Stage* (tasks, :class:`~sparklog.datasource.stager.Stager`): each task appends its rows,
   grouped by target partition in slices of ``batchRecords`` rows, to a staging topic
   (``stagingTopic``, default ``__sparklog_staging``, created on first use with ``retention.ms`` of
   one hour; names starting ``__sparklog`` are reserved for sparklog, which alone creates them; a
   staging topic that exists already is refused, with the setting named, if its settings could lose
   staged rows: ``cleanup.policy`` other than delete, ``retention.ms`` under an hour,
   ``retention.bytes`` under 1 GiB, ``LogAppendTime`` or unclean leader election; see
   :mod:`sparklog.datasource.staging_topics`), in a staging partition led by the same broker as the
   slice's target partition where there is one; its commit message lists where each slice landed
   (staging topic, partition and exact offsets) and which partition it is for. Nothing is visible
   in the target topic yet. A failed or duplicate task attempt leaves only unreferenced staged rows,
   which Spark never hands to the commit, and retention deletes.

   *Typed topics* stage their values already checked and converted (columnar, see
   :func:`sparklog.datasource.typed.sink_values`: a row that does not fit the schema fails the task,
   so nothing of the batch is published) into a typed staging topic per target schema version,
   ``<stagingTopic>.<topic>.v<version>.<hash>`` (created on first use with that version's schema as
   its only one, same retention; the hash of the schema text tells a re-created topic's schema
   apart). Its stored batches are then exactly the target's type, and publishing copies them
   unchanged, sent as that version of the target (the leader evolves them if the target has a newer
   one by then). Each staging topic has its own producers, so a target may take slices from two
   versions in one batch.
2. *Publish* (driver, ``commit(messages, batchId)``, :mod:`sparklog.datasource.publish`): first a
   *publish intent* for the batch (its slices per target partition, and where each producer's
   sequence numbers start) is stored in ZooKeeper at ``<root>/sinks/<query id>``
   (:mod:`sparklog.datasource.publish_state`); then every slice is copied from the staging topic to
   its partition through the broker's idempotent producer: the producer id is derived from (query
   id, topic, partition, staging partition, and the staging topic when it is a typed one) and each
   slice carries the sequence number the intent implies. When the staging partition and the target
   have the same leader, that broker copies the slices itself (the ``copy_records`` action,
   :mod:`sparklog.broker.record_copy`: the rows do not travel to the driver and back); otherwise
   the driver relays them. Either way the leader recognises a slice it already stored (a retry
   after a lost acknowledgement, a leader change, or a crash of the whole commit) and does not
   append it again. Finally the znode records the batch as published, with the next sequence
   numbers.
3. *Re-runs*: a batch whose znode says published is skipped (after a restart Spark re-runs the
   last batch when it had not recorded its commit itself); a batch found half-published is finished
   from the stored intent (the original staged rows, not the re-run's) with the same sequence
   numbers, so the slices already in the topic are recognised.

Order: rows a task writes to one partition keep their order; rows of different tasks interleave.
Limits: the guarantee covers the rows Spark hands to the sink for a batch id (a query restarted
from a *new* checkpoint is a new query, and a batch job run twice writes twice; a batch write is
exactly-once across its task retries). Finishing a half-published batch needs its staged rows
(kept an hour by default: restart within that, or stage in a topic of your own, ``stagingTopic``,
with a longer ``retention.ms``) and
the partitions' latest batches from this query (the broker recognises repeats by the producer state
it rebuilds from its log; if retention deleted them before the restart, the repeated slices would
be appended again). Every row is written twice (staging, then its topic): a micro-batch costs one
more pass over its data on the brokers than an at-least-once sink.
"""

from __future__ import annotations

import json
import logging
import os
import uuid
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from sparklog.datasource.options import WriteOptions
from sparklog.datasource.publish import publish_batch
from sparklog.datasource.sink_checks import check_input_schema, check_target_topic
from sparklog.datasource.stager import SparklogCommitMessage, stage_task
from sparklog.datasource.staging_topics import check_existing_staging_topic
from sparklog.errors import InvalidRequest

log = logging.getLogger("sparklog.datasource")


class SparklogBatchWriter(DataSourceArrowWriter):
    """``df.write.format("sparklog")``: staged by tasks, published once by ``commit``."""

    def __init__(self, options: WriteOptions, schema: StructType) -> None:
        check_input_schema(schema, options)
        check_target_topic(options, schema)
        check_existing_staging_topic(options)
        self.options = options
        self.sink_id = f"batch-{uuid.uuid4().hex}"  # this writer is pickled to tasks and to commit()

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SparklogCommitMessage:
        return stage_task(self.options, iterator, streaming=False)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        publish_batch(self.options, self.sink_id, 0, _ours(messages), forget=True)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        log.info("sparklog: write %s aborted; its staged rows are left to retention", self.sink_id)


class SparklogStreamWriter(DataSourceStreamArrowWriter):
    """``df.writeStream.format("sparklog")``: exactly-once per micro-batch (see the module docs)."""

    def __init__(self, options: WriteOptions, schema: StructType) -> None:
        check_input_schema(schema, options)
        check_target_topic(options, schema)
        check_existing_staging_topic(options)
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SparklogCommitMessage:
        return stage_task(self.options, iterator, streaming=True)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        ours = _ours(messages)
        sink_id = next((m.query_id for m in ours if m.query_id), None) or _query_id_from_checkpoint(
            self.options.checkpoint_location
        )
        if sink_id is None:
            if any(m.slices for m in ours):
                raise InvalidRequest("sparklog sink: cannot tell the streaming query's id; nothing was published")
            return
        publish_batch(self.options, sink_id, batchId, ours, forget=False)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        log.info("sparklog: micro-batch %s aborted; its staged rows are left to retention", batchId)


def _ours(messages: list[Any]) -> list[SparklogCommitMessage]:
    return [m for m in messages if isinstance(m, SparklogCommitMessage)]


def _query_id_from_checkpoint(location: str | None) -> str | None:
    """The query id Spark keeps in ``<checkpoint>/metadata`` (local file systems only)."""
    if not location:
        return None
    path = location[len("file:") :] if location.startswith("file:") else location
    try:
        with open(os.path.join(path, "metadata")) as f:
            return json.loads(f.readline()).get("id")
    except (OSError, ValueError):
        return None
