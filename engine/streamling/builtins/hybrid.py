"""The hybrid source: backfill from bounded sources (ClickHouse tables, in order), then stream from Kafka.

Each phase is the real source (`ClickHouseSource`, `KafkaSource`) running under the hybrid's name, so
epochs number on, the same sinks see one stream, and each phase keeps its own position keys in the state
backend. ``<name>:__phase__`` records which phase is current; a restart resumes that phase at its saved
position. Bounded phases' rows are conformed to the stream's schema (by column name, cast, NULL when a
table lacks a column) so everything downstream sees one shape. In job mode only the bounded phases run.

With ``offset_table``, the stream continues exactly where the backfilled data ends: when the Kafka phase
starts without positions of its own, each partition starts after the largest offset a ClickHouse table
records for it (a table filled from the same topic, with the Kafka source's ``_partition``/``_offset``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from functools import cached_property
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, PositiveInt, ValidationError, model_validator

from streamling.clickhouse.objects import split_table_name
from streamling.clickhouse.offsets import recorded_offsets
from streamling.clickhouse.source import ClickHouseSource, ClickHouseSourceSpec
from streamling.errors import StreamlingError, first_line
from streamling.kafka.source.operator import KafkaSource
from streamling.kafka.source.spec import KafkaSourceSpec, resolution_warnings
from streamling.plugin import Epoch, ExternalObject, Operator, RunContext, Source
from streamling.spec import SourceSpec
from streamling.state import StateBackend, phase_key
from streamling.types import exact_column

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql import types as T
    from pyspark.sql.datasource import DataSourceStreamReader

log = logging.getLogger("streamling.builtins.hybrid")


class BoundedPhase(BaseModel):
    model_config = ConfigDict(extra="forbid")
    source_type: Literal["clickhouse"]
    table_name: str = Field(min_length=1)
    columns: str | list[str] | None = None
    filter: str | None = None
    start_at: Any = None


class UnboundedPhase(BaseModel):
    """`start_at` is Kafka's starting offset (earliest, latest or epoch ms); other Kafka source fields pass
    through (data_format, schema, include_metadata, ...)."""

    model_config = ConfigDict(extra="allow")
    source_type: Literal["kafka"]
    topic: str = Field(min_length=1)
    start_at: str | int | None = None
    filter: str | None = None


class OffsetTable(BaseModel):
    """Where the backfilled data records the Kafka offsets it holds: the stream starts after them."""

    model_config = ConfigDict(extra="forbid")
    topic_name: str = Field(min_length=1)
    """The topic the table's rows came from (compared with `topic_column` when that is set)."""
    table_name: str | None = Field(default=None, min_length=1)
    """``table`` (in ``clickhouse_source.database``) or ``database.table``; default the last bounded table."""
    topic_column: str | None = Field(default=None, min_length=1)
    """A column holding the topic name, for a table that mixes topics; unset: every row counts."""
    partition_column: str = Field(default="_partition", min_length=1)
    offset_column: str = Field(default="_offset", min_length=1)


class HybridSourceSpec(SourceSpec):
    type: Literal["hybrid"]
    identity_labels: ClassVar[tuple[str, ...]] = ("table", "topic")
    bounded_sources: list[BoundedPhase] = Field(min_length=1)
    unbounded_source: UnboundedPhase | None = None
    offset_table: OffsetTable | None = None
    parallelism: PositiveInt | None = None
    """Every phase's `parallelism` (Spark partitions of a ClickHouse page, reading tasks of a Kafka epoch)."""

    @property
    def bounded(self) -> bool:
        """Job mode runs only the bounded phases, so a hybrid source always ends there."""
        return True

    def identity_tags(self) -> dict[str, str]:
        """Both phases' identities: the bounded tables (in reading order) and the stream's topic."""
        tags = {"table": ",".join(phase.table_name for phase in self.bounded_sources)}
        if self.unbounded_source is not None:
            tags["topic"] = self.unbounded_source.topic
        return tags

    def phase_specs(self) -> list[SourceSpec]:
        common = {"primary_key": self.primary_key, "telemetry": self.telemetry, "parallelism": self.parallelism}
        specs: list[SourceSpec] = []
        for phase in self.bounded_sources:
            body = phase.model_dump(exclude={"source_type"}, exclude_none=True)
            specs.append(ClickHouseSourceSpec.model_validate({"type": "clickhouse", **body, **common}))
        if self.unbounded_source is not None:
            body = self.unbounded_source.model_dump(exclude={"source_type", "start_at"}, exclude_none=True)
            if self.unbounded_source.start_at is not None:
                body["starting_offsets"] = self.unbounded_source.start_at
            specs.append(KafkaSourceSpec.model_validate({"type": "kafka", **body, **common}))
        return specs

    @model_validator(mode="after")
    def _phases_valid(self) -> HybridSourceSpec:
        try:
            self.phase_specs()
        except ValidationError as exc:
            problem = exc.errors()[0]
            where = ".".join(str(p) for p in problem["loc"])
            raise ValueError(f"{where}: {problem['msg']}") from None
        if self.offset_table is not None and self.unbounded_source is None:
            raise ValueError("offset_table seeds the unbounded (Kafka) phase; it needs 'unbounded_source'")
        return self


class Phase(Source[Any]):
    """One phase of a hybrid source, under the hybrid's name; conforms its rows to the hybrid's schema."""

    def __init__(self, hybrid: HybridSource, child: Source[Any], index: int) -> None:
        super().__init__(hybrid.name, child.spec, child.settings)
        self.hybrid = hybrid
        self.child = child
        self.index = index
        self.reads_on_driver = child.reads_on_driver  # type: ignore[misc]

    @property
    def label(self) -> str:
        return f"{self.hybrid.label} (phase {self.index + 1}: {self.child.label})"

    def schema(self) -> T.StructType:
        return self.hybrid.schema()

    def load_position(self, state: StateBackend) -> dict[str, Any]:
        if isinstance(self.child, KafkaSource):
            self.hybrid.seed_stream(state)
        return self.child.load_position(state)

    def committed_position(self, state: StateBackend) -> dict[str, Any] | None:
        return self.child.committed_position(state)

    def position_entries(
        self, start: Mapping[str, Any], end: Mapping[str, Any], now_ms: int
    ) -> dict[str, dict[str, Any]]:
        return self.child.position_entries(start, end, now_ms)

    def is_exhausted(self, position: Mapping[str, Any]) -> bool:
        return self.child.is_exhausted(position)

    def rows_between(self, start: Mapping[str, Any], end: Mapping[str, Any]) -> int | None:
        return self.child.rows_between(start, end)

    def backlog(self, position: Mapping[str, Any] | None) -> dict[str, int] | None:
        return self.child.backlog(position)

    def reads(self) -> list[ExternalObject]:
        return self.child.reads()

    def epoch_committed(self, epoch: Epoch) -> None:
        self.child.epoch_committed(epoch)

    def next_epoch(
        self, spark: SparkSession, start: Mapping[str, Any], replay_end: Mapping[str, Any] | None = None
    ) -> tuple[DataFrame | None, dict[str, Any]] | None:
        return self.child.next_epoch(spark, start, replay_end)

    def stream_reader(
        self, spark: SparkSession, start: Mapping[str, Any], replay_end: Mapping[str, Any] | None = None
    ) -> DataSourceStreamReader:
        return self.child.stream_reader(spark, start, replay_end)

    def shape_epoch(self, df: DataFrame) -> DataFrame:
        """The child's own row selection, then the hybrid's shape."""
        return self.hybrid.conform(self.child.refine(self.child.shape_epoch(df)))


class HybridSource(Source[HybridSourceSpec]):
    spec_model: ClassVar[type[HybridSourceSpec]] = HybridSourceSpec

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        children: list[Source[Any]] = []
        for index, spec in enumerate(self.spec.phase_specs()):
            if isinstance(spec, KafkaSourceSpec):
                children.append(KafkaSource(self.name, spec, self.settings))
                continue
            backfill = ClickHouseSource(self.name, spec, self.settings)
            backfill.scope = f"{self.name}#{index + 1}"
            children.append(backfill)
        self.children = children

    @property
    def label(self) -> str:
        return f"hybrid source '{self.name}'"

    def warnings(self) -> list[str]:
        """The stream's (see `resolution_warnings`), named as written under ``unbounded_source``."""
        stream = self.children[-1].spec
        if self.spec.unbounded_source is None or not isinstance(stream, KafkaSourceSpec):
            return []
        return resolution_warnings(self.label, stream, prefix="unbounded_source.")

    def prefetch(self) -> None:
        """The stream's lookups only: its schema is the hybrid's, and a finished backfill's tables may be gone."""
        self.children[-1].prefetch()

    def reads(self) -> list[ExternalObject]:
        """Its bounded tables, then its topic, in reading order; a table two phases read is one object."""
        return list({o.key: o for child in self.children for o in child.reads()}.values())

    @property
    def phase_key(self) -> str:
        return phase_key(self.name)

    def phases(self) -> list[Source[Any]]:
        """The phases this run goes through: the unbounded one only outside job mode."""
        phases = [Phase(self, child, i) for i, child in enumerate(self.children)]
        if self.settings.job_mode and self.spec.unbounded_source is not None:
            phases = phases[:-1]
        return phases

    @cached_property
    def _schema(self) -> T.StructType:
        return self.children[-1].schema()

    def schema(self) -> T.StructType:
        """The stream's schema (the last phase's); bounded phases are conformed to it."""
        return self._schema

    def conform(self, df: DataFrame) -> DataFrame:
        from pyspark.sql import functions as F

        have = set(df.columns)
        return df.select(
            *[
                (exact_column(f.name).cast(f.dataType) if f.name in have else F.lit(None).cast(f.dataType)).alias(
                    f.name, metadata=f.metadata
                )
                for f in self.schema().fields
            ]
        )

    def initialize(self, ctx: RunContext) -> None:
        for child in self.children if not self.settings.job_mode else self.children[: len(self.phases())]:
            child.initialize(ctx)
        self._pin_stream_start(ctx)

    def _pin_stream_start(self, ctx: RunContext) -> None:
        """With ``start_at: latest``, the stream starts at the offsets of when the backfill began, not of when
        it ended: records produced during the backfill are streamed, not skipped. Recorded in the state
        backend before the first bounded epoch, so a backfill run (job mode) and a later streaming run agree.
        An `offset_table` says exactly where to start instead."""
        stream = self.children[-1]
        if not isinstance(stream, KafkaSource) or stream.spec.starting_offsets != "latest" or self.spec.offset_table:
            return
        if self.settings.backfill_range is not None:  # a range backfill is no start of the stream
            return
        phase = int((ctx.state.get(self.phase_key) or {}).get("phase", 0))
        if phase >= len(self.children) - 1 or stream.committed_position(ctx.state) is not None:
            return
        if self.settings.job_mode:
            stream.initialize(ctx)
        position = stream.load_position(ctx.state)
        ctx.state.put_many(stream.position_entries({}, position, int(time.time() * 1000)))
        log.info("%s: the stream phase will start at %s, the offsets when the backfill began", self.label, position)

    def seed_stream(self, state: StateBackend) -> None:
        """Before the Kafka phase first runs: its positions from `offset_table` (the next offset after the largest
        one recorded per partition), written to the state backend; partitions the table lacks use start_at."""
        table = self.spec.offset_table
        stream = self.children[-1]
        if table is None or not isinstance(stream, KafkaSource) or stream.committed_position(state) is not None:
            return
        backfill = next(c for c in self.children if isinstance(c, ClickHouseSource))
        name = table.table_name or self.spec.bounded_sources[-1].table_name
        database, target = split_table_name(name, self.settings.clickhouse_source.database)
        try:
            found = recorded_offsets(
                backfill.client,
                database,
                target,
                table.partition_column,
                table.offset_column,
                table.topic_column,
                table.topic_name,
            )
        except Exception as exc:
            raise StreamlingError.user(
                f"{self.label}: offset_table {name}: cannot read the recorded offsets "
                f"({table.partition_column}, {table.offset_column}): {first_line(exc)}"
            ) from None
        if not found:
            log.info("%s: offset_table %s records no offsets; the stream starts at start_at", self.label, name)
            return
        position = {str(p): o + 1 for p, o in found.items()}
        state.put_many(stream.position_entries({}, position, int(time.time() * 1000)))
        log.info("%s: the stream continues after the offsets in %s: %s", self.label, name, position)

    def reset_position(self, state: StateBackend) -> list[str]:
        """The bounded phases start over and the phase goes back to the first; the stream phase's offsets stay,
        so after the backfill the stream goes on from where it was."""
        removed = [k for c in self.children if isinstance(c, ClickHouseSource) for k in c.reset_position(state)]
        if state.get(self.phase_key) is not None:
            state.put(self.phase_key, {"phase": 0, "updated_at": int(time.time() * 1000)})
            removed.append(self.phase_key)
        return removed

    def bind(self, operators: Mapping[str, Operator]) -> None:
        for child in self.children:
            child.bind(operators)

    def terminate(self) -> None:
        for child in self.children:
            child.terminate()
