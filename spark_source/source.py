"""``RafkaDataSource``: the ``rafka`` format for ``spark.read``, ``spark.readStream``,
``df.write`` and ``df.writeStream``.

Theory of operation
-------------------
Spark builds a ``DataSource`` with the user's options in every Python process that needs one
(planner, driver-side stream reader, executors). This class only validates and routes: it
parses the options (``rafka.spark_source.options``: a clear error naming the option, raised from
``schema()`` so a bad option fails at ``load()``) and returns the reader or writer. The schema is
that of Spark's Kafka source, plus ``headers`` when ``includeHeaders`` is true.
"""

from __future__ import annotations

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from .fetch import source_schema
from .options import parse_sink_options, parse_source_options
from .reader import RafkaBatchReader, RafkaStreamReader
from .sink import RafkaBatchWriter, RafkaStreamWriter

__all__ = ["RafkaDataSource"]


class RafkaDataSource(DataSource):
    """``spark.dataSource.register(RafkaDataSource)``, then ``.format("rafka")``."""

    @classmethod
    def name(cls) -> str:
        return "rafka"

    def schema(self) -> StructType:
        opts = parse_source_options(self.options)
        return source_schema(opts.include_headers)

    def reader(self, schema: StructType) -> DataSourceReader:
        return RafkaBatchReader(parse_source_options(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return RafkaStreamReader(parse_source_options(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        return RafkaBatchWriter(parse_sink_options(self.options), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        return RafkaStreamWriter(parse_sink_options(self.options), schema)
