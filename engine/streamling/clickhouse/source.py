"""The ClickHouse source: a bounded, paged read of one table in sorting-key order (see `clickhouse.paging`).

The driver reads (`reads_on_driver`): the embedded engine exists only in this process, and a bounded
backfill is limited by ClickHouse and the sinks, not by fan-out. Each page is one epoch; its end cursor is
committed to the state backend under ``clickhouse_source:<source>:<database>.<table>`` when the epoch is
finalized, and a restart resumes strictly after it.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from datetime import date, datetime
from functools import cached_property
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import Field, PositiveInt, field_validator

from streamling.clickhouse.client import get_client, qualified
from streamling.clickhouse.objects import named_table_object, split_table_name
from streamling.clickhouse.paging import Pager, key_bounds
from streamling.clickhouse.tables import TableInfo, inspect, spark_field
from streamling.core.rows import GS_OP
from streamling.errors import StreamlingError, first_line
from streamling.plugin import ExternalObject, Source
from streamling.spec import SourceSpec, split_columns
from streamling.state import StateBackend
from streamling.types import spread

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql import types as T

log = logging.getLogger("streamling.clickhouse")
STATE_PREFIX = "clickhouse_source:"


class ClickHouseSourceSpec(SourceSpec):
    type: Literal["clickhouse"]
    identity_labels: ClassVar[tuple[str, ...]] = ("table",)
    table_name: str = Field(min_length=1)
    columns: str | list[str] | None = None
    filter: str | None = None
    start_at: str | None = None
    parallelism: PositiveInt | None = None
    """Spark partitions each page is spread over (round-robin), so the nodes after the source run that many
    tasks; default the partitions Spark makes of a local table."""

    @field_validator("start_at", mode="before")
    @classmethod
    def _as_text(cls, value: object) -> object:
        if isinstance(value, datetime | date):
            return value.isoformat(sep=" ") if isinstance(value, datetime) else value.isoformat()
        if isinstance(value, int | float) and not isinstance(value, bool):
            return str(value)
        return value

    @property
    def bounded(self) -> bool:
        return True

    def identity_tags(self) -> dict[str, str]:
        return {"table": self.table_name}


class ClickHouseSource(Source[ClickHouseSourceSpec]):
    spec_model: ClassVar[type[ClickHouseSourceSpec]] = ClickHouseSourceSpec
    reads_on_driver: ClassVar[bool] = True

    @property
    def label(self) -> str:
        return f"clickhouse source '{self.name}'"

    @property
    def database_and_table(self) -> tuple[str, str]:
        return split_table_name(self.spec.table_name, self.settings.clickhouse_source.database)

    def reads(self) -> list[ExternalObject]:
        return [named_table_object(self.spec.table_name, self.settings.clickhouse_source.database, "clickhouse_source")]

    scope: str | None = None
    """Set by a hybrid source to tell its phases apart (two phases may read the same table)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._rows_by_end: dict[str, int] = {}
        """Rows of the epochs read but not yet committed, by end position (positions cannot tell)."""
        self._info_error: StreamlingError | None = None

    @property
    def state_key(self) -> str:
        database, table = self.database_and_table
        return f"{STATE_PREFIX}{self.scope or self.name}:{database}.{table}"

    @cached_property
    def client(self) -> Any:
        connection = self.settings.clickhouse_source
        # The original's clickhouse_source.compression: the server compresses its answers with it (a server only).
        compress = connection.compression if connection.url and connection.compression != "none" else False
        return get_client(connection, self.label, compress=compress)

    def prefetch(self) -> None:
        """The table's description: with the embedded engine, its start (loading chdb) overlaps the JVM's."""
        try:
            self.info  # noqa: B018 (a cached property, computed here)
        except StreamlingError as exc:
            self._info_error = exc

    @cached_property
    def info(self) -> TableInfo:
        if self._info_error is not None:
            raise self._info_error
        database, table = self.database_and_table
        try:
            return inspect(self.client, database, table, self.label)
        except StreamlingError:
            raise
        except Exception as exc:
            problem = first_line(exc)
            raise StreamlingError.retry(f"{self.label}: cannot read table {database}.{table}: {problem}") from None

    @cached_property
    def pager(self) -> Pager:
        names = split_columns(self.spec.columns) or [c.name for c in self.info.columns]
        settings = self.settings.clickhouse_source
        wanted = self.settings.backfill_range
        return Pager(
            self.client,
            self.info,
            [self.info.column(n) for n in names],
            self.spec.filter,
            settings.page_size,
            settings.sort_key_range,
            self.spec.start_at,
            timeout_sec=settings.query_timeout_sec,
            bounds=key_bounds(self.info, wanted, self.label) if wanted is not None else None,
        )

    def schema(self) -> T.StructType:
        return self._schema

    @cached_property
    def _schema(self) -> T.StructType:
        from pyspark.sql import types as T

        names = split_columns(self.spec.columns) or [c.name for c in self.info.columns]
        available = [c.name for c in self.info.columns]
        missing = [n for n in names if n not in available]
        if missing:
            raise StreamlingError.user(
                f"{self.label}: columns {missing} are not in {'.'.join(self.database_and_table)}; "
                f"available: {', '.join(available)}"
            )
        fields = []
        for name in names:
            try:
                fields.append(spark_field(self.info.column(name)))
            except StreamlingError as exc:
                raise StreamlingError.user(f"{self.label}: {exc.message}") from None
        if self.spec.filter:
            self._check_filter()
        if self.settings.backfill_range is not None:  # a range that does not fit the table fails validation
            key_bounds(self.info, self.settings.backfill_range, self.label)
        return T.StructType([*fields, T.StructField(GS_OP, T.StringType(), False)])

    def _check_filter(self) -> None:
        try:
            self.client.query(f"SELECT 1 FROM {qualified(*self.database_and_table)} WHERE ({self.spec.filter}) LIMIT 0")
        except Exception as exc:
            problem = first_line(exc)
            raise StreamlingError.user(f"{self.label}: invalid filter {self.spec.filter!r}: {problem}") from None

    def load_position(self, state: StateBackend) -> dict[str, Any]:
        """The saved cursor whatever `start_at` says now, like a Kafka consumer group's committed offsets win over
        `auto.offset.reset`: the position belongs to the pipeline, and dropping or editing `start_at` must not
        make an append-only sink receive the table twice. Starting over is a reset (`--reset-positions`, or a
        Dagster run tagged `streamling/reprocess`)."""
        self.pager.snapshot()
        if self.settings.backfill_range is not None:
            log.info("%s reads the range %s of its first sort key", self.label, self.settings.backfill_range)
        saved = state.get(self.state_key)
        position = self.committed_position(state)
        if position is None:
            return self.pager.initial()
        if saved.get("start_at") != self.spec.start_at:
            log.warning(
                "%s: start_at %r differs from the %r its saved cursor started from; it resumes the cursor "
                "(reset its position to start from start_at: `streamling PIPELINE --reset-positions`)",
                self.label,
                self.spec.start_at,
                saved.get("start_at"),
            )
        log.info("%s resumes after %s", self.label, position)
        return position

    def committed_position(self, state: StateBackend) -> dict[str, Any] | None:
        """The saved cursor, if any."""
        saved = state.get(self.state_key)
        if saved:
            return {k: v for k, v in saved.items() if k not in ("updated_at", "start_at")}
        return None

    def reset_position(self, state: StateBackend) -> list[str]:
        state.remove(self.state_key)
        return [self.state_key]

    def position_entries(
        self, start: Mapping[str, Any], end: Mapping[str, Any], now_ms: int
    ) -> dict[str, dict[str, Any]]:
        return {self.state_key: {**end, "start_at": self.spec.start_at, "updated_at": now_ms}}

    def is_exhausted(self, position: Mapping[str, Any]) -> bool:
        return self.pager.exhausted(position)

    def next_epoch(
        self, spark: SparkSession, start: Mapping[str, Any], replay_end: Mapping[str, Any] | None = None
    ) -> tuple[DataFrame, dict[str, Any]] | None:
        try:
            if replay_end is not None:
                table, end = self.pager.read_between(start, replay_end), dict(replay_end)
            else:
                page = self.pager.next_page(start)
                if page is None:
                    return None
                table, end = page
        except StreamlingError:
            raise
        except Exception as exc:
            raise StreamlingError.retry(f"reading {'.'.join(self.database_and_table)}: {first_line(exc)}") from None
        self._rows_by_end[json.dumps(end, sort_keys=True, default=str)] = table.num_rows
        frame = spark.createDataFrame(table, schema=self.schema())
        return spread(frame, self.spec.parallelism, []), end

    def rows_between(self, start: Mapping[str, Any], end: Mapping[str, Any]) -> int | None:
        return self._rows_by_end.pop(json.dumps(end, sort_keys=True, default=str), None)

    def terminate(self) -> None:
        """Clients are shared per process (the embedded engine allows one); nothing to close per source."""
