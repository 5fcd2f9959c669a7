"""A deterministic data generator: the source that needs no external service.

Row ``o`` (0-based offset) always has the same values, so a replayed epoch regenerates the same rows;
that is what lets the quickstart and the tests check delivery exactly. Generation is vectorised with
numpy and yields Arrow record batches straight to Spark (its `GeneratorStreamReader` in `generator_reader.py`,
hosted by the engine: `runtime/reading.py`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import Field, NonNegativeInt, PositiveFloat, PositiveInt, field_validator, model_validator

from streamling.core.pacing import Pacer
from streamling.core.rows import GS_OP
from streamling.errors import StreamlingError
from streamling.plugin import Source
from streamling.spec import SourceSpec
from streamling.state import StateBackend
from streamling.types import check_column_types

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql import types as T
    from pyspark.sql.datasource import DataSourceStreamReader

DEFAULT_SCHEMA = {"id": "bigint", "amount": "double", "name": "string", "created_at": "timestamp"}


class GeneratorSourceSpec(SourceSpec):
    type: Literal["generator"]
    rows: NonNegativeInt | None = Field(default=None, description="total rows; unset means unbounded")
    rows_per_second: PositiveFloat | None = None
    record_batch_size: PositiveInt | None = None
    schema_: dict[str, str] | None = Field(default=None, alias="schema")
    start_time: datetime = datetime(2025, 1, 1, tzinfo=UTC)
    key_space: PositiveInt | None = None
    delete_every: PositiveInt | None = None
    partitions: PositiveInt | None = None
    parallelism: PositiveInt | None = None
    """The same as `partitions` (the name other nodes use)."""
    seed: int = 0

    @model_validator(mode="after")
    def _one_width(self) -> GeneratorSourceSpec:
        if self.partitions is not None and self.parallelism is not None and self.partitions != self.parallelism:
            raise ValueError("'partitions' and 'parallelism' mean the same; give one")
        return self

    @field_validator("schema_")
    @classmethod
    def _types_parse(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        if GS_OP in (value or {}):
            raise ValueError(f"'{GS_OP}' is added by the generator and cannot be declared")
        check_column_types(value)
        return value

    @property
    def bounded(self) -> bool:
        return self.rows is not None

    def columns(self) -> dict[str, str]:
        return dict(self.schema_ or DEFAULT_SCHEMA)


class GeneratorSource(Source[GeneratorSourceSpec]):
    spec_model: ClassVar[type[GeneratorSourceSpec]] = GeneratorSourceSpec

    @property
    def state_key(self) -> str:
        return f"{self.name}:generator"

    def schema(self) -> T.StructType:
        if self.settings.backfill_range is not None:
            raise StreamlingError.user(
                f"{self.label}: backfill_range {self.settings.backfill_range} does not apply to generated rows "
                "(ranges are of a ClickHouse sort key or of Kafka offsets or message times)"
            )
        from streamling.builtins.generator_reader import spark_schema

        return spark_schema(self.spec.columns())

    def load_position(self, state: StateBackend) -> dict[str, Any]:
        return self.committed_position(state) or {"offset": 0}

    def committed_position(self, state: StateBackend) -> dict[str, Any] | None:
        saved = state.get(self.state_key)
        return {"offset": int(saved["offset"])} if saved else None

    def position_entries(
        self, start: Mapping[str, Any], end: Mapping[str, Any], now_ms: int
    ) -> dict[str, dict[str, Any]]:
        return {self.state_key: {"offset": int(end["offset"]), "updated_at": now_ms}}

    def is_exhausted(self, position: Mapping[str, Any]) -> bool:
        return self.spec.rows is not None and int(position["offset"]) >= self.spec.rows

    def backlog(self, position: Mapping[str, Any] | None) -> dict[str, int] | None:
        if self.spec.rows is None:
            return None
        return {"rows": max(0, self.spec.rows - int((position or {}).get("offset", 0)))}

    def rows_between(self, start: Mapping[str, Any], end: Mapping[str, Any]) -> int | None:
        return int(end["offset"]) - int(start["offset"])

    def reader_config(self) -> dict[str, Any]:
        spec = self.spec
        step_us = round(1_000_000 / spec.rows_per_second) if spec.rows_per_second else 1000
        return {
            "columns": spec.columns(),
            "rows": spec.rows,
            "rows_per_second": spec.rows_per_second,
            "key_space": spec.key_space,
            "delete_every": spec.delete_every,
            "seed": spec.seed,
            "start_time_us": int(spec.start_time.timestamp() * 1_000_000),
            "step_us": max(1, step_us),
            "batch_rows": min(spec.record_batch_size or self.settings.record_batch_size, 65_536),
        }

    def stream_reader(
        self, spark: SparkSession, start: Mapping[str, Any], replay_end: Mapping[str, Any] | None = None
    ) -> DataSourceStreamReader:
        from streamling.builtins.generator_reader import GeneratorStreamReader

        parallelism = self.spec.partitions or self.spec.parallelism or spark.sparkContext.defaultParallelism
        max_rows = self.spec.record_batch_size or self.settings.record_batch_size
        return GeneratorStreamReader(
            {
                "config": json.dumps(self.reader_config()),
                "start": str(int(start["offset"])),
                "parallelism": str(parallelism),
                "replay_end": json.dumps(dict(replay_end) if replay_end is not None else None),
                **Pacer.options(max_rows, self.settings.checkpoint_interval_sec),
            }
        )
