"""A test-only source plugin whose streaming reader fails with a plain (non-Streamling) exception.

`failing_generator` is the generator source, except that the reader's `latestOffset` — which Spark runs in
its Python streaming-source process, outside any epoch the engine runs — raises ``RuntimeError`` once the
position reaches `fail_at`. The streaming query then dies with a Spark `StreamingQueryException`, the way a
`[CANNOT_OPEN_SOCKET]` or any other Spark-side failure ends a query. Import this module before running the
engine (``python -c "import tests.e2e.failing_source; ..."``); Spark's workers import it by name too.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, ClassVar, Literal

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.datasource import DataSource, DataSourceStreamReader
from pyspark.sql.types import StructType

from streamling.builtins.generator import (
    GeneratorDataSource,
    GeneratorSource,
    GeneratorSourceSpec,
    GeneratorStreamReader,
)
from streamling.plugins import operator
from streamling.runtime.pacing import Pacer


class FailingStreamReader(GeneratorStreamReader):
    def __init__(self, options: Mapping[str, str]) -> None:
        super().__init__(options)
        self.fail_at = int(options["fail_at"])

    def latestOffset(self, start: dict, limit: Any) -> dict:
        if int(start["offset"]) >= self.fail_at:
            raise RuntimeError(f"the test reader gave up at offset {start['offset']}")
        return super().latestOffset(start, limit)


class FailingDataSource(GeneratorDataSource):
    @classmethod
    def name(cls) -> str:
        return "streamling_test_failing"

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return FailingStreamReader(self.options)


class FailingSourceSpec(GeneratorSourceSpec):
    type: Literal["failing_generator"]  # type: ignore[assignment]
    fail_at: int


@operator("failing_generator", FailingSourceSpec)
class FailingSource(GeneratorSource):
    data_source: ClassVar[type[DataSource]] = FailingDataSource

    def stream(
        self, spark: SparkSession, start: Mapping[str, Any], replay_end: Mapping[str, Any] | None = None
    ) -> DataFrame:
        max_rows = self.spec.record_batch_size or self.settings.record_batch_size
        return (
            spark.readStream.format(FailingDataSource.name())
            .option("config", json.dumps(self.reader_config()))
            .option("start", str(int(start["offset"])))
            .option("fail_at", str(self.spec.fail_at))
            .options(**Pacer.options(max_rows, self.settings.checkpoint_interval_sec))
            .load()
        )
