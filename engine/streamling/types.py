"""Column types written in pipeline YAML (``bigint``, ``decimal(20,4)``, ``timestamp``) as Spark types."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from streamling.core.rows import GS_OP
from streamling.errors import StreamlingError

if TYPE_CHECKING:  # Spark's planner processes import this module through the Kafka reader and need no Arrow
    import pyarrow as pa
    from pyspark.sql import Column, DataFrame
    from pyspark.sql import types as T


_SIMPLE: dict[str, str] = {
    **dict.fromkeys(("tinyint", "byte", "int8"), "ByteType"),
    **dict.fromkeys(("smallint", "short", "int16"), "ShortType"),
    **dict.fromkeys(("int", "integer", "int32"), "IntegerType"),
    **dict.fromkeys(("bigint", "long", "int64"), "LongType"),
    **dict.fromkeys(("float", "real", "float32"), "FloatType"),
    **dict.fromkeys(("double", "double precision", "float64"), "DoubleType"),
    **dict.fromkeys(("string", "text", "varchar", "utf8"), "StringType"),
    **dict.fromkeys(("boolean", "bool"), "BooleanType"),
    **dict.fromkeys(("binary", "bytea", "bytes"), "BinaryType"),
    "date": "DateType",
    **dict.fromkeys(("timestamp", "timestamptz", "timestamp with time zone"), "TimestampType"),
    **dict.fromkeys(("timestamp_ntz", "timestamp without time zone"), "TimestampNTZType"),
}
"""Each spelling of a simple type, by the name of its Spark type class (`pyspark.sql.types`)."""
_DECIMAL = re.compile(r"^(?:decimal|numeric)\s*(?:\(\s*(\d+)\s*(?:,\s*(\d+)\s*)?\))?$")
_VARCHAR = re.compile(r"^(?:varchar|char|character varying)\s*\(\s*\d+\s*\)$")


def _read_type(text: str) -> tuple[str, tuple[int, ...]]:
    """`text` as the name of its Spark type class and that class's arguments, or the user error naming it. Needs no
    Spark, so a pipeline's column types are checked where Spark is not imported (a Dagster code location)."""
    key = " ".join(str(text).strip().lower().split())
    if key in _SIMPLE:
        return _SIMPLE[key], ()
    if _VARCHAR.match(key):
        return "StringType", ()
    match = _DECIMAL.match(key)
    if match:
        precision = int(match.group(1) or 38)
        scale = int(match.group(2) or 0)
        if not 1 <= precision <= 38 or scale > precision:
            raise StreamlingError.user(f"unsupported decimal type '{text}': precision must be 1..38, scale ≤ precision")
        return "DecimalType", (precision, scale)
    raise StreamlingError.user(
        f"unknown column type '{text}'; use one of: bigint, int, smallint, tinyint, double, float, "
        "string, boolean, binary, date, timestamp, decimal(p,s)"
    )


def parse_type(text: str) -> T.DataType:
    from pyspark.sql import types as T

    name, arguments = _read_type(text)
    data_type: T.DataType = getattr(T, name)(*arguments)
    return data_type


def check_column_types(columns: dict[str, str] | None) -> None:
    """For spec validators: every type in `columns` parses; a ValueError names the column otherwise."""
    for column, type_text in (columns or {}).items():
        try:
            _read_type(type_text)
        except StreamlingError as exc:
            raise ValueError(f"column '{column}': {exc.message}") from None


def quoted_name(name: str) -> str:
    """`name` as a Spark SQL identifier: backquoted, its backquotes doubled."""
    return "`" + name.replace("`", "``") + "`"


def exact_column(name: str) -> Column:
    """The column called exactly `name`: Spark would read dots and backticks in a plain string as a path."""
    from pyspark.sql import functions as F

    return F.col(quoted_name(name))


def exact_columns(names: list[str]) -> list[Column]:
    return [exact_column(name) for name in names]


def select_exact(df: DataFrame, names: list[str]) -> DataFrame:
    """``df.select`` of the columns called exactly `names`, in one call to the JVM rather than one per column
    (each epoch of a sink pays it: ~20 ms for nine columns on a loaded driver); `df` itself when it has exactly
    those columns in that order (another DataFrame is another analysis in the JVM)."""
    if df.columns == list(names):
        return df
    return df.selectExpr(*(quoted_name(name) for name in names))


def spread(df: DataFrame, parallelism: int | None, keys: list[str]) -> DataFrame:
    """`df` in `parallelism` partitions (a node's ``parallelism``: that many Spark tasks work on it), hashed by
    `keys` so that each key is handled by one task (rows of a key from one input partition keep their order);
    round-robin without keys. Unchanged without a parallelism."""
    if not parallelism:
        return df
    present = [k for k in keys if k in df.columns]
    return df.repartition(parallelism, *exact_columns(present)) if present else df.repartition(parallelism)


def arrow_map(
    df: DataFrame, fn: Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]], schema: T.StructType | str
) -> DataFrame:
    """``df.mapInArrow(fn, schema)`` without PySpark's pandas version check, which imports pandas (~0.2 s of a
    driver's start, where nothing else of a Kafka → SQL → Postgres run needs it): the same UDF, built the way
    `mapInArrow` builds it after that check."""
    from pyspark.sql.classic.dataframe import DataFrame as ClassicDataFrame
    from pyspark.sql.pandas.functions import vectorized_udf
    from pyspark.util import PythonEvalType

    udf = vectorized_udf(fn, schema, PythonEvalType.SQL_MAP_ARROW_ITER_UDF, "pandas")
    column = udf(*[df[name] for name in df.columns])
    return ClassicDataFrame(df._jdf.mapInArrow(column._jc, False, None), df.sparkSession)


def map_in_arrow(df: DataFrame, fn: Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]], schema: str):
    """``df.mapInArrow(fn, schema)`` for any column names: Spark's mapInArrow rejects some (an unpaired backtick),
    so the columns travel under positional names and `fn` sees the real ones."""
    names = df.columns
    safe = df.toDF(*[f"_c{i}" for i in range(len(names))])

    def renamed(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow as pa

        return fn(pa.RecordBatch.from_arrays(batch.columns, names=names) for batch in batches)

    return arrow_map(safe, renamed, schema)


def with_gs_op(schema: T.StructType) -> T.StructType:
    """`schema` with a string ``_gs_op`` column appended unless it already has one."""
    from pyspark.sql import types as T

    if GS_OP in schema.fieldNames():
        return schema
    return T.StructType([*schema.fields, T.StructField(GS_OP, T.StringType(), False)])
