"""A test-only source plugin whose stream reader fails with a plain (non-Streamling) exception.

`failing_generator` is the generator source, except that the reader's `latestOffset` — which the engine calls on the
driver, between epochs (`runtime/reading.py`) — raises ``RuntimeError`` once the position reaches `fail_at`: an
internal error, not the user's, so the restart strategy restarts the run from its last committed epoch, and once
its failures exceed `restart_strategy.max_failures` the run ends with one ``Error:`` line. Import this module
before running the engine (``python -c "import tests.e2e.failing_source; ..."``); Spark's workers import it by name.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pyspark.sql import SparkSession
from pyspark.sql.datasource import DataSourceStreamReader

from streamling.builtins.generator import GeneratorSource, GeneratorSourceSpec
from streamling.builtins.generator_reader import GeneratorStreamReader
from streamling.plugins import operator


class FailingStreamReader(GeneratorStreamReader):
    def __init__(self, options: Mapping[str, str], fail_at: int) -> None:
        super().__init__(options)
        self.fail_at = fail_at

    def latestOffset(self, start: dict, limit: Any) -> dict:
        if int(start["offset"]) >= self.fail_at:
            raise RuntimeError(f"the test reader gave up at offset {start['offset']}")
        return super().latestOffset(start, limit)


class FailingSourceSpec(GeneratorSourceSpec):
    type: Literal["failing_generator"]  # type: ignore[assignment]
    fail_at: int


@operator("failing_generator", FailingSourceSpec)
class FailingSource(GeneratorSource):
    def stream_reader(
        self, spark: SparkSession, start: Mapping[str, Any], replay_end: Mapping[str, Any] | None = None
    ) -> DataSourceStreamReader:
        reader = super().stream_reader(spark, start, replay_end)
        assert isinstance(reader, GeneratorStreamReader)
        return FailingStreamReader(reader.options, self.spec.fail_at)
