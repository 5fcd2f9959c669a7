"""The Postgres upsert sink: ``_gs_op = 'd'`` deletes by key, ``i``/``u`` upsert, effectively-once.

Each epoch is applied per write stream in one transaction that also records the epoch in the
progress table (`streamling.postgres.progress`); see `streamling.postgres.writer` for the write path.
With ``parallelism: 1`` the epoch's rows come to the driver as Arrow and one stream writes them; with
more, rows are hash-partitioned by key and each Spark task writes its own stream.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import psycopg
from pydantic import Field, ModelWrapValidatorHandler, PositiveInt, PrivateAttr, field_validator, model_validator

from streamling.config.units import Milliseconds
from streamling.core import identifiers
from streamling.core.rows import GS_OP
from streamling.dead_letters import DeadLetterTarget
from streamling.plugin import AppliedEpoch, Epoch, ExternalObject, RunContext, Sink, Written, rows_of
from streamling.postgres import catalog, progress
from streamling.postgres.connection import transact
from streamling.postgres.objects import table_object
from streamling.postgres.progress import ProgressKey
from streamling.postgres.types import Column, columns_of
from streamling.postgres.writer import ORDER_COLUMN, WritePlan, write_partition, write_stream
from streamling.spec import ErrorHandlingSpec, SinkSpec, flush_interval, ignored_field
from streamling.types import exact_columns, map_in_arrow, select_exact

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.types import StructType

log = logging.getLogger("streamling.postgres")
COMPARISONS = ("=", ">", ">=", "<", "<=", "!=", "<>")


class PostgresSinkSpec(SinkSpec, ErrorHandlingSpec):
    type: Literal["postgres"]
    identity_labels: ClassVar[tuple[str, ...]] = ("schema", "table")
    schema_: str = Field(default="public", alias="schema", min_length=1)
    table: str = Field(min_length=1)
    on_conflict: Literal["update", "nothing"] = "update"
    update_where: dict[str, str] | None = None
    batch_size: PositiveInt | None = None
    batch_flush_interval: Milliseconds | None = None
    parallelism: PositiveInt = 1
    deduplicate: bool = True

    @field_validator("schema_", "table")
    @classmethod
    def _fits_postgres(cls, value: str) -> str:
        return identifiers.check_identifier(value)

    _on_conflict_as_written: str | None = PrivateAttr(default=None)
    """An ``on_conflict`` other than update or nothing, as written (it is read as update: `_other_is_update`)."""

    @field_validator("on_conflict", mode="before")
    @classmethod
    def _lower(cls, value: object) -> object:
        return value.strip().lower() if isinstance(value, str) else value

    @model_validator(mode="wrap")
    @classmethod
    def _other_is_update(cls, data: Any, handler: ModelWrapValidatorHandler[PostgresSinkSpec]) -> PostgresSinkSpec:
        """The original compares ``on_conflict`` with ``nothing`` only, so any other string (``upsert``,
        ``replace``…) updates there; it does here too, with a warning at start (`PostgresSink.warnings`)."""
        given = data.get("on_conflict") if isinstance(data, dict) else None
        other = isinstance(given, str) and given.strip().lower() not in ("update", "nothing")
        spec = handler({**data, "on_conflict": "update"} if other else data)
        if other:
            spec._on_conflict_as_written = given
        return spec

    @field_validator("update_where")
    @classmethod
    def _operators(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        for column, op in (value or {}).items():
            if str(op).strip() not in COMPARISONS:
                raise ValueError(f"operator {op!r} for column '{column}' is not one of {' '.join(COMPARISONS)}")
        return {c: str(op).strip() for c, op in value.items()} if value else value


class PostgresWriterSink(Sink[Any]):
    """What the upsert and aggregation sinks share: connection, table checks, progress, the write path."""

    mode: ClassVar[Literal["upsert", "landing"]] = "upsert"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.connection = self.settings.postgres_connection(self.name)
        self.keys: list[str] = []
        self.columns: list[Column] = []
        self.plan: WritePlan | None = None
        spec = getattr(self.spec, "dead_letter", None)
        self.dead_letter = (
            DeadLetterTarget.of(spec, self.settings, self.name, self.label, self.connection) if spec else None
        )

    @property
    def label(self) -> str:
        return f"{self.spec.type} sink '{self.name}'"

    @property
    def target_table(self) -> str:
        """The table the control plane shows as this sink's asset."""
        return self.spec.table

    def writes(self) -> list[ExternalObject]:
        return [
            table_object(
                self.connection.database,
                self.spec.schema_,
                self.target_table,
                self.settings.postgres_connection_name(self.name),
            )
        ]

    def check(self, schema: StructType, primary_key: list[str]) -> list[str]:
        if not primary_key:
            return [f"{self.label} requires a primary key"]
        available = schema.fieldNames()
        missing = [k for k in primary_key if k not in available]
        if missing:
            return [f"{self.label}: primary key columns {missing} are not in the input"]
        try:
            self.columns = columns_of(schema, skip=(GS_OP,))
        except TypeError as exc:
            return [f"{self.label}: {exc}"]
        self.keys = list(primary_key)
        return identifiers.identifier_errors(self.label, "column", [c.name for c in self.columns])

    def _with_connection(self, fn):  # type: ignore[no-untyped-def]
        """`fn(cursor)` in one transaction on a pooled connection of the driver, retried like writes: safe from
        any thread (start-up on the main thread, finalizers on the committer threads)."""
        return transact(self.connection, self.label, fn)

    def write_plan(self, ctx: RunContext, table: str, staging_types: list[str], conflict_keys: list[str]) -> WritePlan:
        spec = self.spec
        return WritePlan(
            label=self.label,
            connection=self.connection,
            schema=spec.schema_,
            table=table,
            columns=tuple(self.columns),
            staging_types=tuple(staging_types),
            keys=tuple(self.keys),
            mode=self.mode,
            on_conflict=getattr(spec, "on_conflict", "update"),
            update_where=tuple((getattr(spec, "update_where", None) or {}).items()),
            # With DO NOTHING the first row per key must win, so rows are applied in order, never deduplicated. A
            # landing table (the aggregate sink's) always is: its trigger counts the rows a statement inserts, and
            # a row rewritten by a later one of its key and operation is not inserted again.
            deduplicate=(self.mode == "landing" or getattr(spec, "deduplicate", True))
            and getattr(spec, "on_conflict", "update") == "update",
            batch_size=spec.batch_size or self.connection.batch_size,
            progress=ProgressKey(spec.schema_, ctx.settings.application_id, self.name),
            dead_letter=self.dead_letter,
            recorder=ctx.recorder(self.name),
        )

    @property
    def streams(self) -> int:
        return getattr(self.spec, "parallelism", 1)

    @property
    def flush_interval_sec(self) -> float | None:
        """The node's ``batch_flush_interval``, else its connection's (``postgres_sink.batch_flush_interval``, as
        the original's default for every Postgres sink)."""
        interval = self.spec.batch_flush_interval
        return flush_interval(interval if interval is not None else self.connection.batch_flush_interval)

    def applied_epoch(self, source: str) -> AppliedEpoch | None:
        assert self.plan is not None
        key = self.plan.progress
        return self._with_connection(lambda cur: progress.latest_applied(cur, key, source, self.streams))

    def write(self, df: DataFrame, epoch: Epoch) -> int:
        return rows_of(self.stage(df, epoch)())

    def stage(self, df: DataFrame, epoch: Epoch) -> Callable[[], Written | int]:
        """One stream: collect the rows as Arrow now, apply them on the committer thread (overlapping the
        next epoch's Spark work). Several streams: the Spark tasks write, so all of it happens now.

        Reports a `Written`: what Postgres did with the epoch's rows — inserted, updated, deleted — and the
        rest of the rows received as `unchanged` (see `Written`); nothing from a stream that had already
        applied the epoch."""
        assert self.plan is not None, "initialize() builds the write plan"
        plan = self.plan
        selected = select_exact(df, [c.name for c in plan.columns] + [GS_OP])
        if self.streams == 1:
            table = selected.toArrow()
            return lambda: write_stream(table, plan, epoch)
        written = self._write_streams(selected, epoch)
        return lambda: written

    def _write_streams(self, df: DataFrame, epoch: Epoch) -> Written:
        from pyspark.sql import functions as F

        plan = self.plan
        streams = self.streams
        parted = (
            df.withColumn(ORDER_COLUMN, F.monotonically_increasing_id())
            .repartition(streams, *exact_columns(plan.keys))
            .sortWithinPartitions(ORDER_COLUMN)
        )
        schema = "inserts long, updates long, deletes long, unchanged long"
        counts = map_in_arrow(parted, lambda batches: write_partition(batches, plan, epoch, streams), schema)
        return sum((Written(**row.asDict()) for row in counts.collect()), Written())


class PostgresSink(PostgresWriterSink):
    spec_model: ClassVar[type[PostgresSinkSpec]] = PostgresSinkSpec
    spec: PostgresSinkSpec

    def warnings(self) -> list[str]:
        written = self.spec._on_conflict_as_written
        if written is None:
            return []
        return [
            ignored_field(
                self.label,
                "on_conflict",
                written,
                "it is read as 'update' (as in the original, only 'nothing' means ON CONFLICT DO NOTHING)",
            )
        ]

    def check(self, schema: StructType, primary_key: list[str]) -> list[str]:
        errors = super().check(schema, primary_key)
        if errors:
            return errors
        where = self.spec.update_where or {}
        if where and self.spec.on_conflict == "nothing":
            return [f"{self.label}: update_where applies only with on_conflict: update"]
        available = [c.name for c in self.columns]
        for column in where:
            if column not in available:
                return [
                    f"{self.label}: update_where column '{column}' is not in the input; "
                    f"available columns: {', '.join(available)}"
                ]
        return []

    def initialize(self, ctx: RunContext) -> None:
        spec = self.spec

        def prepare(cur: psycopg.Cursor) -> list[str]:
            catalog.lock_ddl(cur, spec.schema_, spec.table)
            catalog.create_table(cur, spec.schema_, spec.table, [(c.name, c.pg) for c in self.columns], self.keys)
            cur.execute(progress.ddl(spec.schema_))
            return catalog.verify_table(cur, self.label, spec.schema_, spec.table, self.columns, self.keys)

        staging_types = self._with_connection(prepare)
        if self.dead_letter is not None:
            self.dead_letter.prepare()
        self.plan = self.write_plan(ctx, spec.table, staging_types, self.keys)
        log.info("%s writes to %s.%s (key %s)", self.label, spec.schema_, spec.table, ", ".join(self.keys))
