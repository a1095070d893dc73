"""``sparklog-bench-memory``: a streaming Python data source that yields batches of sparklog's read
schema from memory (``bench spark-read --source memory``). It fetches nothing and converts nothing,
so a query on it measures what Spark itself takes to receive a Python source's Arrow batches: the
ceiling for any Python data source, sparklog's included, measured on the same machine in the same run.

Options: ``rows`` (in all), ``partitions``, ``batchRows``, ``valueBytes``. One micro-batch holds
every row (the offsets are 0, then 1). With ``typedColumns`` (``bench spark-read --fields ...
--source memory``) values are structs of the benchmark's typed topic
(:func:`sparklog.bench.broker_scenarios.typed_values`), all of its columns or only ``fields``
(comma-separated): Spark's ceiling for reading them whole against reading a projection.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow
from pyspark.sql.types import StructType

from sparklog.bench.append import make_values
from sparklog.bench.broker_scenarios import typed_values

NAME = "sparklog-bench-memory"


class _Slice(InputPartition):
    def __init__(self, index: int, rows: int) -> None:
        self.index = index
        self.rows = rows


class MemoryStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: dict[str, str], schema: StructType) -> None:
        from sparklog.datasource.reader import arrow_schema

        self.rows = int(options.get("rows", 10_000_000))
        self.partition_count = int(options.get("partitions", 6))
        self.batch_rows = int(options.get("batchrows", 10_000))
        self.value_bytes = int(options.get("valuebytes", 100))
        self.typed_columns = int(options.get("typedcolumns", 0))
        self.arrow_schema = arrow_schema(schema)

    def initialOffset(self) -> dict:
        return {"batch": 0}

    def prepareForTriggerAvailableNow(self) -> None:
        pass

    def latestOffset(self, start: dict, limit: Any) -> dict:
        return {"batch": 1}

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        if start["batch"] >= end["batch"]:
            return []
        share, extra = divmod(self.rows, self.partition_count)
        return [_Slice(i, share + (1 if i < extra else 0)) for i in range(self.partition_count)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, _Slice)
        n = self.batch_rows
        ts_type = self.arrow_schema.field("timestamp").type
        value_type = self.arrow_schema.field("value").type
        if self.typed_columns:
            whole = typed_values(n, self.typed_columns)
            names = [f.name for f in value_type]
            value = pa.StructArray.from_arrays([whole.field(name) for name in names], names=names).cast(value_type)
        else:
            value = make_values(n, self.value_bytes)
        full = pa.RecordBatch.from_arrays(
            [
                pa.nulls(n, pa.binary()),
                value,
                pa.array(["bench"] * n, pa.string()),
                pa.array(np.full(n, partition.index, dtype=np.int32)),
                pa.array(np.arange(n, dtype=np.int64)),
                pa.array(np.full(n, 1_700_000_000_000_000, dtype=np.int64)).cast(ts_type),
                pa.array(np.zeros(n, dtype=np.int32)),  # timestampType: CreateTime
            ],
            schema=self.arrow_schema,
        )
        left = partition.rows
        while left > 0:
            yield full if left >= n else full.slice(0, left)
            left -= n

    def commit(self, end: dict) -> None:
        pass


class MemorySource(DataSource):
    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> StructType:
        from sparklog.datasource.reader import spark_schema
        from sparklog.datasource.typed import spark_value_type

        columns = int(self.options.get("typedcolumns", 0))
        if not columns:
            return spark_schema(include_headers=False)
        whole = typed_values(1, columns).type
        wanted = [f.strip() for f in self.options.get("fields", "").split(",") if f.strip()]
        value_type = pa.struct([whole.field(name) for name in wanted] if wanted else list(whole))
        return spark_schema(include_headers=False, value_type=spark_value_type(value_type))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return MemoryStreamReader(self.options, schema)
