"""``TidelogDataSource``: the PySpark data source registered as ``tidelog``."""

from __future__ import annotations

from pyspark.sql.datasource import DataSource
from pyspark.sql.types import StructType

from tidelog.spark.options import OptionError, sink_options, source_options
from tidelog.spark.sink import TidelogBatchWriter, TidelogStreamWriter, check_sink_schema
from tidelog.spark.source import TidelogBatchReader, TidelogStreamReader, source_schema


class TidelogDataSource(DataSource):
    """Read and write tidelog (or any Kafka) topics with Spark's Kafka options and schema.

    ``spark.dataSource.register(TidelogDataSource)`` (or ``tidelog.spark.register(spark)``),
    then ``spark.read.format("tidelog")``, ``spark.readStream.format("tidelog")``,
    ``df.write.format("tidelog")`` and ``df.writeStream.format("tidelog")``.
    """

    @classmethod
    def name(cls) -> str:
        return "tidelog"

    def _include_headers(self) -> bool:
        options = {str(k).lower(): v for k, v in self.options.items()}
        return str(options.get("includeheaders", "false")).strip().lower() == "true"

    def schema(self) -> StructType:
        return source_schema(self._include_headers())

    def _check_schema(self, schema: StructType) -> None:
        if schema is not None and schema != self.schema():
            raise OptionError("the tidelog source has a fixed schema (Spark's Kafka source schema); "
                              "do not set one with .schema(...)")

    def reader(self, schema: StructType) -> TidelogBatchReader:
        self._check_schema(schema)
        return TidelogBatchReader(source_options(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> TidelogStreamReader:
        self._check_schema(schema)
        return TidelogStreamReader(source_options(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> TidelogBatchWriter:
        if overwrite:
            # Spark's Kafka sink refuses it too: a topic is a log, appending is all a write can do.
            raise ValueError('tidelog only appends to a topic: use .mode("append") (mode "overwrite" '
                             "would not remove what the topic already holds)")
        options = sink_options(self.options, streaming=False)
        check_sink_schema(schema, options)
        return TidelogBatchWriter(options)

    def streamWriter(self, schema: StructType, overwrite: bool) -> TidelogStreamWriter:
        options = sink_options(self.options, streaming=True)
        check_sink_schema(schema, options)
        return TidelogStreamWriter(options)
