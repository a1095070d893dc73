"""The ``DataSource`` Spark instantiates for ``format("sparklog")``."""

from __future__ import annotations

from collections.abc import MutableMapping

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from sparklog.datasource.options import check_known, parse_read_options, parse_write_options
from sparklog.datasource.reader import SparklogBatchReader, read_schema
from sparklog.errors import InvalidRequest


class SparklogDataSource(DataSource):
    """Reads and writes sparklog topics (see :mod:`sparklog.datasource` for the options)."""

    def __init__(self, options: MutableMapping[str, str]) -> None:
        super().__init__(options)
        check_known(options)  # unknown options fail at load()/save() already

    @classmethod
    def name(cls) -> str:
        return "sparklog"

    def schema(self) -> StructType:
        return read_schema(parse_read_options(self.options))  # called at load(): every read option is checked here

    def reader(self, schema: StructType) -> DataSourceReader:
        return SparklogBatchReader(parse_read_options(self.options), schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from sparklog.datasource.stream_reader import SparklogStreamReader

        return SparklogStreamReader(parse_read_options(self.options), schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from sparklog.datasource.writer import SparklogBatchWriter

        if overwrite:
            raise InvalidRequest("sparklog topics are append-only: use mode('append') to write to them")
        return SparklogBatchWriter(parse_write_options(self.options), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from sparklog.datasource.writer import SparklogStreamWriter

        if overwrite:
            raise InvalidRequest("sparklog topics are append-only: use outputMode('append') to write to them")
        return SparklogStreamWriter(parse_write_options(self.options), schema)
