"""The SQL transform: stateless Spark SQL over upstream nodes, referenced by name."""

from __future__ import annotations

from collections.abc import Mapping
from functools import cached_property
from typing import TYPE_CHECKING, ClassVar, Literal

from pydantic import Field, PositiveInt

from streamling.core.rows import GS_OP
from streamling.errors import StreamlingError, first_line
from streamling.plugin import Epoch, Operator, Transform
from streamling.plugins import functions as plugin_functions
from streamling.spec import NodeSpec, TransformSpec
from streamling.sql.diagnose import culprit
from streamling.sql.dynamic_tables.transform import DynamicTable, DynamicTableSpec
from streamling.sql.functions import numeric_rewrite
from streamling.sql.rewrite import SqlProgram, spark_name, undefined_dynamic_table
from streamling.sql.stateless import forbidden_operations
from streamling.types import spread

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


class SqlTransformSpec(TransformSpec):
    type: Literal["sql"]
    sql: str = Field(min_length=1)
    primary_key: str | list[str]
    parallelism: PositiveInt | None = None
    """The output's Spark partitions, hashed by the primary key: the tasks of every node after it."""

    def input_names(self) -> list[str]:
        explicit = super().input_names()
        return explicit or SqlProgram(self.sql, "sql").references

    def after_names(self) -> list[str]:
        """Dynamic tables it checks: filled earlier in the epoch, so lookups see this epoch's values."""
        return SqlProgram(self.sql, "sql").dynamic_tables

    def graph_errors(self, nodes: Mapping[str, NodeSpec]) -> list[str]:
        errors = []
        reads = sorted(self.input_names())
        for name in self.after_names():
            table = nodes.get(name)
            if not isinstance(table, DynamicTableSpec):
                errors.append(undefined_dynamic_table(name))
            elif table.sql is not None and sorted(table.input_names()) != reads:
                errors.append(
                    f"dynamic table '{name}' uses source '{', '.join(table.input_names())}' but SQL transform uses "
                    f"source '{', '.join(reads)}'; a SQL transform that checks a dynamic table populated by 'sql' "
                    "must read the same input, so lookups see this epoch's values"
                )
        return errors


class SqlTransform(Transform[SqlTransformSpec]):
    spec_model: ClassVar[type[SqlTransformSpec]] = SqlTransformSpec
    adds_no_rows = True

    @property
    def label(self) -> str:
        return f"SQL transform '{self.name}'"

    @cached_property
    def program(self) -> SqlProgram:
        return SqlProgram(self.spec.sql, self.label)

    def inputs(self) -> list[str]:
        return self.program.references

    _tables: dict[str, DynamicTable] | None = None

    def bind(self, operators: Mapping[str, Operator]) -> None:
        tables = {}
        for name in self.program.dynamic_tables:
            table = operators.get(name)
            if not isinstance(table, DynamicTable):
                raise StreamlingError.user(f"{self.label}: {undefined_dynamic_table(name)}")
            tables[name] = table
        self._tables = tables

    def apply(self, spark: SparkSession, inputs: Mapping[str, DataFrame], epoch: Epoch | None) -> DataFrame:
        if self._tables is None and self.program.dynamic_tables:
            raise StreamlingError(f"{self.label}: dynamic tables used before the plan bound them")
        checks = {name: table.check_function(spark) for name, table in (self._tables or {}).items()}
        views = {}
        for index, (node, frame) in enumerate(sorted(inputs.items())):
            view = f"__sl_{spark_name(self.name)}_{index}"
            frame.createOrReplaceTempView(view)
            views[node] = view
        schemas = {node: frame.schema for node, frame in inputs.items()}
        sql = self.program.render(views, epoch.timestamp_ms if epoch else None, checks, schemas=schemas)
        functions = plugin_functions.register_all(spark, self.program.called)
        try:
            df = spark.sql(sql)
        except Exception as exc:  # AnalysisException, ParseException: the user's SQL is wrong
            epoch_ms = epoch.timestamp_ms if epoch else None
            blame = culprit(
                spark, self.program, lambda tree: self.program.render(views, epoch_ms, checks, tree, schemas)
            )
            raise StreamlingError.user(f"{self.label}: {blame or first_line(exc)}") from None
        df = numeric_rewrite.mark(df, self.program.output_types)
        if epoch is None:
            bad = forbidden_operations(df)
            if bad:
                raise StreamlingError.user(
                    f"{self.label}: {', '.join(bad)} is not allowed; SQL transforms accept only stateless "
                    "operations (projection, filter, union, unnest)"
                )
            problems = plugin_functions.call_problems(df, functions)
            if problems:
                raise StreamlingError.user(f"{self.label}: {'; '.join(problems)}")
            return _single_gs_op(df)
        return spread(_single_gs_op(df), self.spec.parallelism, self.spec.primary_key_columns())


def _single_gs_op(df: DataFrame) -> DataFrame:
    from pyspark.sql import functions as F

    positions = [i for i, name in enumerate(df.columns) if name == GS_OP]
    if not positions:
        return df.withColumn(GS_OP, F.lit("i"))
    if len(positions) == 1:
        return df
    keep = [df.columns[i] if i not in positions[1:] else None for i in range(len(df.columns))]
    renamed = df.toDF(*[name or f"__dup_{i}" for i, name in enumerate(keep)])
    return renamed.select(*[c for c in renamed.columns if not c.startswith("__dup_")])
