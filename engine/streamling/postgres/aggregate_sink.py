"""The Postgres aggregation sink: rows land in an append-only table, a trigger folds them into aggregates.

The landing table is keyed by ``(primary key…, _gs_op)`` and stamped with ``_gs_checkpoint_epoch``: a
record seen again while its epoch is retained conflicts and is upserted, which Postgres reports as an
update, not an insert, so the statement-level ``AFTER INSERT … REFERENCING NEW TABLE`` trigger counts it
once. Once epoch N is finalized, landing rows of epochs ≤ N-1 are deleted. The progress table, written
in the same transaction as the landing rows, makes a replayed epoch a no-op (effectively-once).

Per aggregate: ``sum`` adds inserted and updated values and subtracts deleted ones; ``count`` adds
1 / 0 / -1 for insert / update / delete; ``avg`` keeps ``<name>_sum`` and ``<name>_count`` with those
rules and ``<name>`` as a generated column; ``min``/``max`` use LEAST/GREATEST over inserts and updates
and ignore deletes (an extreme that is deleted stays: they are insert-only).
"""

from __future__ import annotations

import logging
import re
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import psycopg
from psycopg import sql
from pydantic import BaseModel, ConfigDict, Field, PositiveInt, field_validator, model_validator

from streamling.config.units import Milliseconds
from streamling.core import identifiers
from streamling.core.rows import GS_OP
from streamling.plugin import Epoch, RunContext
from streamling.postgres import catalog, progress
from streamling.postgres.sink import PostgresWriterSink
from streamling.postgres.writer import EPOCH_COLUMN
from streamling.spec import SinkSpec, ignored_field

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

log = logging.getLogger("streamling.postgres")
SENTINEL_KEY = "_gs_group"
SENTINEL_VALUE = "all"
_PG_TYPE = re.compile(r"^[a-z][a-z0-9_ ]*(\(\s*\d+\s*(,\s*\d+\s*)?\))?(\[\])?$", re.IGNORECASE)


def _pg_type(value: str | None) -> str | None:
    if value is not None and not _PG_TYPE.match(value.strip()):
        raise ValueError(f"'{value}' is not a Postgres type name")
    return value.strip().lower() if value else None


class GroupColumn(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    from_: str | None = Field(default=None, alias="from")
    type: str | None = None

    @field_validator("type")
    @classmethod
    def _type(cls, value: str | None) -> str | None:
        return _pg_type(value)


class Aggregate(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    from_: str | None = Field(default=None, alias="from")
    fn: Literal["sum", "count", "avg", "min", "max"]
    type: str | None = None

    @field_validator("type")
    @classmethod
    def _type(cls, value: str | None) -> str | None:
        return _pg_type(value)

    @field_validator("fn", mode="before")
    @classmethod
    def _lower(cls, value: object) -> object:
        return value.lower() if isinstance(value, str) else value

    @model_validator(mode="after")
    def _needs_input(self) -> Aggregate:
        if self.fn != "count" and not self.from_:
            raise ValueError(f"'{self.fn}' needs 'from': the input column it aggregates")
        return self


class PostgresAggregateSinkSpec(SinkSpec):
    type: Literal["postgres_aggregate"]
    identity_labels: ClassVar[tuple[str, ...]] = ("schema", "table")
    schema_: str = Field(default="public", alias="schema", min_length=1)
    landing_table: str = Field(min_length=1)
    agg_table: str = Field(min_length=1)
    group_by: dict[str, GroupColumn | None] = Field(default_factory=dict)
    aggregate: dict[str, Aggregate] = Field(min_length=1)
    batch_size: PositiveInt | None = None
    batch_flush_interval: Milliseconds | None = None
    parallelism: PositiveInt = 1
    deduplicate: bool = True
    """Accepted for the original's pipelines; ``false`` gives a warning at start (see
    `PostgresAggregateSink.warnings`). The landing table's key is the primary key and the operation either way."""
    """Key-hashed write streams into the landing table, as the postgres sink's."""

    @field_validator("schema_", "landing_table")
    @classmethod
    def _fits_postgres(cls, value: str) -> str:
        return identifiers.check_identifier(value)

    @field_validator("agg_table")
    @classmethod
    def _fits_postgres_with_suffix(cls, value: str) -> str:
        """`<agg_table>_aggregate` names the trigger, and must not be truncated either."""
        return identifiers.check_identifier(value, identifiers.MAX_IDENTIFIER_BYTES - len("_aggregate"))

    @field_validator("group_by", mode="before")
    @classmethod
    def _none_is_empty(cls, value: object) -> object:
        return {} if value is None else value


class PostgresAggregateSink(PostgresWriterSink):
    spec_model: ClassVar[type[PostgresAggregateSinkSpec]] = PostgresAggregateSinkSpec
    spec: PostgresAggregateSinkSpec
    mode: ClassVar[Literal["upsert", "landing"]] = "landing"

    @property
    def target_table(self) -> str:
        """The aggregate table (the landing table is the sink's staging, not what it offers)."""
        return self.spec.agg_table

    def warnings(self) -> list[str]:
        if self.spec.deduplicate:
            return []
        return [
            ignored_field(
                self.label,
                "deduplicate",
                False,
                "the landing table holds one row per primary key and operation per epoch (a later row of the same key "
                "and operation replaces the earlier one), so each is counted once either way",
            )
        ]

    def check(self, schema: StructType, primary_key: list[str]) -> list[str]:
        errors = super().check(schema, primary_key)
        if errors:
            return errors
        available = [c.name for c in self.columns]
        problems = []
        for name, group in self.groups().items():
            source = group.from_ or name
            if source not in available:
                problems.append(f"{self.label}: group_by '{name}' reads column '{source}', which is not in the input")
        seen = set(self.groups())
        for name, agg in self.spec.aggregate.items():
            if agg.from_ and agg.from_ not in available:
                problems.append(
                    f"{self.label}: aggregate '{name}' reads column '{agg.from_}', which is not in the input"
                )
            produced = [name, f"{name}_sum", f"{name}_count"] if agg.fn == "avg" else [name]
            clash = [p for p in produced if p in seen]
            if clash:
                problems.append(f"{self.label}: aggregate '{name}' would create column '{clash[0]}' twice")
            seen.update(produced)
        columns = sorted(seen)
        return problems + identifiers.identifier_errors(
            self.label, "aggregate table column", columns, "shorten its name"
        )

    def groups(self) -> dict[str, GroupColumn]:
        return {name: group or GroupColumn() for name, group in self.spec.group_by.items()}

    # ------------------------------------------------------------ DDL

    def _input_type(self, column: str) -> str:
        return next(c.pg for c in self.columns if c.name == column)

    def _agg_columns(self) -> list[tuple[str, str, str | None]]:
        """(column, type, generated-as) of the aggregate table after the group key."""
        out: list[tuple[str, str, str | None]] = []
        for name, agg in self.spec.aggregate.items():
            source_type = self._input_type(agg.from_) if agg.from_ else "bigint"
            numeric = "double precision" if source_type in ("real", "double precision") else "numeric"
            if agg.fn == "count":
                out.append((name, agg.type or "bigint", None))
            elif agg.fn == "sum":
                out.append((name, agg.type or numeric, None))
            elif agg.fn == "avg":
                out.append((f"{name}_sum", numeric, None))
                out.append((f"{name}_count", "bigint", None))
                ratio = sql.SQL("{s} / NULLIF({c}, 0)").format(
                    s=sql.Identifier(f"{name}_sum"), c=sql.Identifier(f"{name}_count")
                )
                out.append((name, agg.type or numeric, ratio))  # type: ignore[arg-type]
            else:
                out.append((name, agg.type or source_type, None))
        return out

    def _group_columns(self) -> list[tuple[str, str, sql.Composable]]:
        """(column, type, expression over the trigger's new rows)."""
        groups = self.groups()
        if not groups:
            return [(SENTINEL_KEY, "text", sql.Literal(SENTINEL_VALUE))]
        out = []
        for name, group in groups.items():
            source = group.from_ or name
            kind = group.type or self._input_type(source)
            expr = sql.SQL("CAST(n.{} AS {})").format(sql.Identifier(source), sql.SQL(kind))
            out.append((name, kind, expr))
        return out

    def _trigger_body(self, conn: psycopg.Connection) -> str:
        ident = sql.Identifier
        groups = self._group_columns()
        names: list[sql.Composable] = [ident(g[0]) for g in groups]
        selects: list[sql.Composable] = [g[2] for g in groups]
        updates: list[sql.Composable] = []
        op = sql.SQL("n.{}").format(ident(GS_OP))
        sign = sql.SQL("CASE {op} WHEN 'i' THEN 1 WHEN 'd' THEN -1 ELSE 0 END").format(op=op)

        def signed(column: str) -> sql.Composable:
            return sql.SQL("CASE WHEN {op} = 'd' THEN -n.{c} ELSE n.{c} END").format(op=op, c=ident(column))

        def add(column: str, expr: sql.Composable) -> None:
            names.append(ident(column))
            selects.append(expr)
            updates.append(sql.SQL("{c} = COALESCE(a.{c}, 0) + COALESCE(EXCLUDED.{c}, 0)").format(c=ident(column)))

        for name, agg in self.spec.aggregate.items():
            counted = (
                sql.SQL("SUM({s}) FILTER (WHERE n.{c} IS NOT NULL)").format(s=sign, c=ident(agg.from_))
                if agg.from_
                else sql.SQL("SUM({})").format(sign)
            )
            if agg.fn == "count":
                add(name, sql.SQL("COALESCE({}, 0)").format(counted))
            elif agg.fn == "sum":
                add(name, sql.SQL("SUM({})").format(signed(agg.from_ or "")))
            elif agg.fn == "avg":
                add(f"{name}_sum", sql.SQL("SUM({})").format(signed(agg.from_ or "")))
                add(f"{name}_count", sql.SQL("COALESCE({}, 0)").format(counted))
            else:
                fn, merge = ("MIN", "LEAST") if agg.fn == "min" else ("MAX", "GREATEST")
                names.append(ident(name))
                selects.append(
                    sql.SQL("{fn}(n.{c}) FILTER (WHERE {op} IS DISTINCT FROM 'd')").format(
                        fn=sql.SQL(fn), c=ident(agg.from_ or ""), op=op
                    )
                )
                updates.append(sql.SQL("{c} = {m}(a.{c}, EXCLUDED.{c})").format(c=ident(name), m=sql.SQL(merge)))
        keys = sql.SQL(", ").join(ident(g[0]) for g in groups)
        statement = sql.SQL(
            "INSERT INTO {agg} AS a ({names}) SELECT {selects} FROM new_rows AS n GROUP BY {positions} "
            "ON CONFLICT ({keys}) DO UPDATE SET {updates}"
        ).format(
            agg=catalog.qualified(self.spec.schema_, self.spec.agg_table),
            names=sql.SQL(", ").join(names),
            selects=sql.SQL(", ").join(selects),
            positions=sql.SQL(", ").join(sql.Literal(i + 1) for i in range(len(groups))),
            keys=keys,
            updates=sql.SQL(", ").join(updates),
        )
        return f"BEGIN\n  {statement.as_string(conn)};\n  RETURN NULL;\nEND"

    def _prepare(self, cur: psycopg.Cursor) -> list[str]:
        spec = self.spec
        schema = spec.schema_
        catalog.lock_ddl(cur, schema, spec.landing_table)
        landing = [(c.name, c.pg) for c in self.columns] + [(GS_OP, "text NOT NULL"), (EPOCH_COLUMN, "bigint NOT NULL")]
        catalog.create_table(cur, schema, spec.landing_table, landing, [*self.keys, GS_OP])
        groups = self._group_columns()
        agg_defs = [sql.SQL("{} {} NOT NULL").format(sql.Identifier(n), sql.SQL(t)) for n, t, _ in groups]
        for name, kind, generated in self._agg_columns():
            if generated is not None:
                agg_defs.append(
                    sql.SQL("{} {} GENERATED ALWAYS AS ({}) STORED").format(
                        sql.Identifier(name), sql.SQL(kind), generated
                    )
                )
            else:
                agg_defs.append(sql.SQL("{} {}").format(sql.Identifier(name), sql.SQL(kind)))
        agg_defs.append(sql.SQL("PRIMARY KEY ({})").format(sql.SQL(", ").join(sql.Identifier(g[0]) for g in groups)))
        cur.execute(
            sql.SQL("CREATE TABLE IF NOT EXISTS {} ({})").format(
                catalog.qualified(schema, spec.agg_table), sql.SQL(", ").join(agg_defs)
            )
        )
        function = f"{spec.agg_table}_apply"
        cur.execute(
            sql.SQL("CREATE OR REPLACE FUNCTION {}() RETURNS trigger LANGUAGE plpgsql AS {}").format(
                catalog.qualified(schema, function), sql.Literal(self._trigger_body(cur.connection))
            )
        )
        cur.execute(
            sql.SQL(
                "CREATE OR REPLACE TRIGGER {} AFTER INSERT ON {} REFERENCING NEW TABLE AS new_rows "
                "FOR EACH STATEMENT EXECUTE FUNCTION {}()"
            ).format(
                sql.Identifier(f"{spec.agg_table}_aggregate"),
                catalog.qualified(schema, spec.landing_table),
                catalog.qualified(schema, function),
            )
        )
        cur.execute(progress.ddl(schema))
        return catalog.verify_table(
            cur,
            self.label,
            schema,
            spec.landing_table,
            self.columns,
            [*self.keys, GS_OP],
            written_elsewhere=(GS_OP, EPOCH_COLUMN),
        )

    def initialize(self, ctx: RunContext) -> None:
        staging_types = self._with_connection(self._prepare)
        self.plan = self.write_plan(ctx, self.spec.landing_table, staging_types, [*self.keys, GS_OP])
        log.info(
            "%s lands rows in %s.%s and aggregates into %s.%s",
            self.label,
            self.spec.schema_,
            self.spec.landing_table,
            self.spec.schema_,
            self.spec.agg_table,
        )

    def epoch_committed(self, epoch: Epoch) -> None:
        """Epoch N is final: landing rows of epochs before it can no longer be replayed."""
        landing = catalog.qualified(self.spec.schema_, self.spec.landing_table)

        def prune(cur: psycopg.Cursor) -> Any:
            cur.execute(
                sql.SQL("DELETE FROM {} WHERE {} <= %s").format(landing, sql.Identifier(EPOCH_COLUMN)),
                (epoch.id - 1,),
            )

        self._with_connection(prune)
