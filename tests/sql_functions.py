"""Evaluate catalogue SQL functions the way a ``sql`` transform does: parsed with the transform's dialects,
rewritten, the Arrow functions registered, run by Spark on real rows."""

from __future__ import annotations

from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from streamling.errors import first_line
from streamling.plugins import functions as plugin_functions
from streamling.sql.functions import numeric_rewrite
from streamling.sql.rewrite import SqlProgram


def frame(spark: SparkSession, rows: list[tuple] | None = None, schema: str | None = None) -> DataFrame:
    """The input node ``t`` (one row with ``x = 1`` unless given); `schema` is a Spark DDL string."""
    if rows is None:
        return spark.createDataFrame([(1,)], "x bigint")
    return spark.createDataFrame(rows, schema)


def query(spark: SparkSession, sql: str, source: DataFrame | None = None, epoch_ms: int | None = None) -> DataFrame:
    """`sql` (reading node ``t``) as the DataFrame a transform would produce (``_gs_op`` dropped)."""
    program = SqlProgram(sql, "SQL transform 'test'")
    source = source if source is not None else frame(spark)
    if "_gs_op" not in source.columns:  # every node's rows carry their operation
        source = source.withColumn("_gs_op", F.lit("i"))
    source.createOrReplaceTempView("__sl_test_t")
    rendered = program.render({"t": "__sl_test_t"}, epoch_ms, {}, schemas={"t": source.schema})
    plugin_functions.register_all(spark, program.called)
    return numeric_rewrite.mark(spark.sql(rendered), program.output_types).drop("_gs_op")


def values(spark: SparkSession, expression: str, source: DataFrame | None = None) -> list[Any]:
    """`expression` evaluated for every row of ``t``, in order."""
    return [row[0] for row in query(spark, f"SELECT {expression} AS v FROM t", source).collect()]


def value(spark: SparkSession, expression: str, source: DataFrame | None = None) -> Any:
    """`expression` evaluated once (``t`` has one row unless `source` says otherwise)."""
    (result,) = values(spark, expression, source)
    return result


def evaluated(spark: SparkSession, cases: list[tuple[str, object]]) -> list[tuple[str, object]]:
    """Each case's expression with its value, all evaluated in one query (one Spark job, not one per case)."""
    sql = "SELECT " + ", ".join(f"{expression} AS v{i}" for i, (expression, _) in enumerate(cases)) + " FROM t"
    (row,) = query(spark, sql).collect()
    return [(expression, row[i]) for i, (expression, _) in enumerate(cases)]


def failure(spark: SparkSession, expression: str, source: DataFrame | None = None) -> str:
    """The first line of the error evaluating `expression` (what a failed epoch reports)."""
    with pytest.raises(Exception) as caught:
        value(spark, expression, source)
    return first_line(caught.value)
