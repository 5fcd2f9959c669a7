"""The ``dynamic_table`` transform: a set of strings that SQL transforms test values against with
``dynamic_table_check('<node>', value)``.

It is filled from its input as a side output (by one string column, or by a one-column SQL
projection), before the epoch flows on, so lookups in the same epoch already see the new values; or
only from outside, when it has neither. Its output rows are the values it added in the epoch, which
no node reads (`NodeSpec.side_output`).

The fields follow the original's: `column` names the Postgres table's value column (and, with `from` and no
`sql`, the input column that fills it), `time_column` a timestamp every append advances, and `cache` /
`cache_refresh_debounce_ms` let each worker hold the table in memory (`postgres/dynamic_tables.py`).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from functools import cached_property
from typing import TYPE_CHECKING, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from streamling.config.units import Milliseconds
from streamling.core.identifiers import check_identifier
from streamling.core.rows import GS_OP
from streamling.errors import StreamlingError, first_line
from streamling.plugin import Epoch, ExternalObject, RunContext, Transform
from streamling.plugins import functions as plugin_functions
from streamling.postgres.dynamic_tables import PostgresLookup, PostgresTable, PostgresWriter
from streamling.postgres.objects import table_object
from streamling.spec import TransformSpec, ignored_field, split_columns
from streamling.sql.dynamic_tables import udf
from streamling.sql.dynamic_tables.memory import MemorySet
from streamling.sql.rewrite import SqlProgram, spark_name
from streamling.sql.stateless import forbidden_operations
from streamling.types import exact_column

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

BackendType = Literal["Postgres", "InMemory"]
_BACKENDS: dict[str, BackendType] = {"postgres": "Postgres", "inmemory": "InMemory"}


@functools.cache
def value_schema() -> StructType:
    from pyspark.sql.types import StringType, StructField, StructType

    return StructType([StructField("value", StringType(), False)])


DEFAULT_REFRESH_MS = 1000
"""The original's default for how long a cached table is trusted."""


class DynamicTableSpec(TransformSpec):
    type: Literal["dynamic_table"]
    side_output: ClassVar[bool] = True
    backend_type: BackendType
    backend_entity_name: str = Field(min_length=1)
    """The table's name (Postgres) or the set's name (InMemory)."""
    schema_: str = Field(default="public", min_length=1, alias="schema")
    """Postgres schema; created on start when missing."""
    column: str | None = Field(default=None, min_length=1)
    """The table's value column (default ``value``); with `from` and no `sql`, also the input column that
    fills it."""
    sql: str | None = Field(default=None, min_length=1)
    time_column: str | None = Field(default=None, min_length=1)
    """A timestamp column every append advances (created as ``TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp()``);
    what `cache` reads newer rows by."""
    cache: bool | None = None
    """Each worker holds the whole table in memory (needs `time_column`); default off."""
    cache_refresh_debounce_ms: Milliseconds | None = None
    """How long a worker trusts its cached table before asking for newer rows (default 1 s; 0: every batch)."""

    @field_validator("backend_type", mode="before")
    @classmethod
    def _case_insensitive(cls, value: object) -> object:
        backend = _BACKENDS.get(re.sub(r"[-_\s]", "", value).lower()) if isinstance(value, str) else None
        if backend is None:
            raise ValueError("must be one of Postgres, InMemory (case-insensitive)")
        return backend

    @field_validator("backend_entity_name", "schema_", "column", "time_column")
    @classmethod
    def _fits_postgres(cls, value: str | None) -> str | None:
        return value if value is None else check_identifier(value)

    @model_validator(mode="after")
    def _one_filler(self) -> DynamicTableSpec:
        if self.from_ is not None and self.column is None and self.sql is None:
            raise ValueError("'from' needs 'column' or 'sql' to say what fills the table")
        if self.time_column is not None and self.time_column == self.value_column:
            raise ValueError(f"time_column must differ from the value column '{self.value_column}'")
        return self

    @property
    def value_column(self) -> str:
        return self.column or "value"

    @property
    def fills_from_column(self) -> bool:
        """Filled from the input column named `column` (not by `sql`)."""
        return self.sql is None and bool(split_columns(self.from_))

    def input_names(self) -> list[str]:
        names = super().input_names() or (SqlProgram(self.sql, "sql").references if self.sql else [])
        if len(names) > 1:
            raise StreamlingError.user(f"sql: a dynamic table is filled from one node, got {', '.join(names)}")
        return names


class DynamicTable(Transform[DynamicTableSpec]):
    spec_model: ClassVar[type[DynamicTableSpec]] = DynamicTableSpec
    adds_no_rows = True

    @property
    def label(self) -> str:
        return f"dynamic table '{self.name}'"

    def writes(self) -> list[ExternalObject]:
        """Its backing table, with the Postgres backend (an InMemory set lives only in the pipeline)."""
        if self.spec.backend_type != "Postgres":
            return []
        database = self.settings.dynamic_table_connection(self.name).database
        connection = self.settings.dynamic_table_connection_name(self.name)
        return [table_object(database, self.pg_schema, self.spec.backend_entity_name, connection)]

    @cached_property
    def program(self) -> SqlProgram | None:
        return SqlProgram(self.spec.sql, self.label) if self.spec.sql else None

    @property
    def pg_schema(self) -> str:
        """The table's Postgres schema (not a Spark schema): its `schema`, else
        ``dynamic_table_backend.postgres.dt_schema_name`` (the original's default for every table), else ``public``."""
        backend = self.settings.dynamic_table_backend.postgres
        if "schema_" in self.spec.model_fields_set or backend is None or backend.dt_schema_name is None:
            return self.spec.schema_
        return backend.dt_schema_name

    @property
    def cache(self) -> bool | None:
        """The table's `cache`, else ``dynamic_table_backend.postgres.cache_enabled`` (the original's default for
        every Postgres table)."""
        if self.spec.cache is not None:
            return self.spec.cache
        backend = self.settings.dynamic_table_backend.postgres
        return backend.cache_enabled if backend is not None else None

    @property
    def refresh_ms(self) -> int | None:
        """The table's `cache_refresh_debounce_ms`, else ``dynamic_table_backend.postgres``'s."""
        if self.spec.cache_refresh_debounce_ms is not None:
            return self.spec.cache_refresh_debounce_ms
        backend = self.settings.dynamic_table_backend.postgres
        return backend.cache_refresh_debounce_ms if backend is not None else None

    @cached_property
    def postgres(self) -> PostgresTable:
        backend = self.settings.dynamic_table_backend
        refresh = self.refresh_ms
        return PostgresTable(
            node=self.name,
            connection=self.settings.dynamic_table_connection(self.name),
            schema=self.pg_schema,
            table=self.spec.backend_entity_name,
            max_batch_size=backend.max_batch_size,
            cache_ttl_ms=backend.cache_ttl_ms,
            column=self.spec.value_column,
            time_column=self.spec.time_column,
            # A default from the settings applies only where it can: a table without a time_column has nothing to
            # top its cache up by, and queries the table every batch (its own `cache: true` gets a warning).
            cache=bool(self.cache) and self.spec.time_column is not None,
            refresh_ms=DEFAULT_REFRESH_MS if refresh is None else refresh,
        )

    def warnings(self) -> list[str]:
        spec, out = self.spec, []
        if spec.backend_type == "InMemory":
            for field in ("time_column", "cache", "cache_refresh_debounce_ms"):
                value = getattr(spec, field)
                if value is not None:
                    meaning = "an InMemory table is a set in driver memory, shipped to the workers when it changes"
                    out.append(ignored_field(self.label, field, value, meaning))
            if spec.column is not None and not spec.fills_from_column:
                meaning = "an InMemory table has no columns; 'column' names the input column only together with 'from'"
                out.append(ignored_field(self.label, "column", spec.column, meaning))
            return out
        if spec.cache and spec.time_column is None:
            meaning = "the cache needs a time_column to find newer rows by; lookups query the table every batch"
            out.append(ignored_field(self.label, "cache", spec.cache, meaning))
        if spec.cache_refresh_debounce_ms is not None and not self.postgres.cached:
            meaning = "it applies only with cache: true and a time_column"
            out.append(ignored_field(self.label, "cache_refresh_debounce_ms", spec.cache_refresh_debounce_ms, meaning))
        return out

    @cached_property
    def _memory(self) -> MemorySet:
        return MemorySet()

    _writer: PostgresWriter | None = None
    _appends = 0
    """Epochs in which this run added values to the Postgres table: the lookups' `generation`."""

    def initialize(self, ctx: RunContext) -> None:
        if self.spec.backend_type == "Postgres":
            self._writer = PostgresWriter(self.postgres)
            self._writer.create()

    def terminate(self) -> None:
        self._writer = None
        if "_memory" in self.__dict__:
            self._memory.release()

    def check_function(self, spark: SparkSession) -> str:
        """Register this table's membership UDF in `spark` and return its SQL name. An InMemory table
        gets one name per version of its set, so a plan keeps the version it was built with."""
        base = f"__sl_dt_{spark_name(self.name)}"
        lookup: udf.Lookup
        if self.spec.backend_type == "Postgres":
            name, lookup = base, PostgresLookup(self.postgres, self._appends)
        else:
            version, lookup = self._memory.snapshot(spark)
            name = f"{base}_v{version}"
        udf.register(spark, name, lookup)
        return name

    def apply(self, spark: SparkSession, inputs: Mapping[str, DataFrame], epoch: Epoch | None) -> DataFrame:
        values = self._values(spark, inputs, validating=epoch is None)
        if epoch is not None and inputs:
            self._add(values)
        return values

    def _values(self, spark: SparkSession, inputs: Mapping[str, DataFrame], validating: bool) -> DataFrame:
        """This epoch's candidate values as one string column ``value``; checks the shape at validation (on the empty
        inputs analysis gives it: an epoch's input plan holds its source's own operations, a read's MapInArrow)."""
        from pyspark.sql import functions as F
        from pyspark.sql.types import StringType

        if not inputs:
            return spark.createDataFrame([], value_schema())
        (node, frame), *_ = inputs.items()
        if self.program is not None:
            view = f"__sl_dt_{spark_name(self.name)}_input"
            frame.createOrReplaceTempView(view)
            rendered = self.program.render({node: view})
            plugin_functions.register_all(spark, self.program.called)
            try:
                df = spark.sql(rendered)
            except Exception as exc:  # AnalysisException, ParseException: the user's SQL is wrong
                raise StreamlingError.user(f"{self.label}: {first_line(exc)}") from None
            bad = forbidden_operations(df) if validating else []
            if bad:
                raise StreamlingError.user(
                    f"{self.label}: {', '.join(bad)} is not allowed; a dynamic table's sql is a projection of one "
                    "string expression with an optional filter"
                )
            df = df.drop(GS_OP)
            what = "sql"
        else:
            column = self.spec.value_column
            if column not in frame.columns:
                raise StreamlingError.user(
                    f"{self.label}: column '{column}' not found in '{node}'. "
                    f"Available columns: {', '.join(c for c in frame.columns if c != GS_OP)}"
                )
            df = frame.select(exact_column(column))
            what = f"column '{column}'"
        fields = df.schema.fields
        if len(fields) != 1 or not isinstance(fields[0].dataType, StringType):
            got = ", ".join(f"{f.name} {f.dataType.simpleString()}" for f in fields) or "no columns"
            raise StreamlingError.user(
                f"{self.label}: {what} must yield exactly one string column, got {got}; cast it with "
                "CAST(... AS STRING) or lower(...)"
            )
        return df.toDF("value").where(F.col("value").isNotNull())

    def _add(self, values: DataFrame) -> None:
        """Store this epoch's distinct values before the epoch flows on (idempotent, so replays are safe)."""
        distinct = values.distinct().toArrow().column("value").to_pylist()
        if not distinct:
            return
        if self.spec.backend_type == "Postgres":
            if self._writer is None:
                raise StreamlingError(f"{self.label}: used before initialize")
            self._writer.add(sorted(distinct))
            self._appends += 1
        else:
            self._memory.add(distinct)
