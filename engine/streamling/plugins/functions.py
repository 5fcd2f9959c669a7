"""Plugins' SQL functions in Spark: registered as Arrow UDFs in every session that runs or validates a ``sql``
transform, and their calls checked in the analysed plan.

Spark takes any number and type of arguments for a Python UDF, so the check is ours: after analysis, every
call of a plugin function must have the declared count of arguments, each of the declared type or one that
widens to it without loss (an integer to a wider integer or a double, a NULL literal to anything). Arguments
are cast to the declared Arrow types before the function sees them. Nothing here runs plugin code, so
``--validate`` does no plugin I/O.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import types as T
from pyspark.sql.pandas.types import from_arrow_type, to_arrow_type

from streamling.errors import StreamlingError, first_line
from streamling.plugins.registry import REGISTRY
from streamling.types import parse_type

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from streamling.plugin import SqlFunction

_REGISTERED = "_streamling_plugin_functions"
_INTEGERS = ["tinyint", "smallint", "int", "bigint"]
_WIDENS = {
    **{small: {*_INTEGERS[i:], "float", "double"} for i, small in enumerate(_INTEGERS)},
    "float": {"float", "double"},
}


def spark_type(declared: Any) -> T.DataType:
    """A declared type (YAML type name or Arrow type) as a Spark type."""
    if isinstance(declared, pa.DataType):
        return from_arrow_type(declared)
    return parse_type(str(declared))


def signature(function: SqlFunction) -> str:
    args = ", ".join(spark_type(a).simpleString() for a in function.arguments)
    return f"{function.name}({args}) -> {spark_type(function.returns).simpleString()}"


def register_all(spark: SparkSession) -> dict[str, SqlFunction]:
    """Register every loaded plugin function in `spark` (once per session and function)."""
    from pyspark.sql.functions import ArrowUDFType, arrow_udf

    functions = REGISTRY.functions()
    done: set[str] = getattr(spark, _REGISTERED, set())
    for name, function in functions.items():
        if name in done:
            continue
        try:
            returns = spark_type(function.returns)
            arguments = [to_arrow_type(spark_type(a), timezone="UTC") for a in function.arguments]
        except StreamlingError as exc:
            raise StreamlingError.user(f"SQL function '{name}': {exc.message}") from None
        call = _Call(function, arguments, to_arrow_type(returns, timezone="UTC"))
        with warnings.catch_warnings():  # it prefers type hints, which a function of any arity cannot give
            warnings.simplefilter("ignore", UserWarning)
            udf = arrow_udf(call, returns, ArrowUDFType.SCALAR)
        if not function.deterministic:
            udf = udf.asNondeterministic()
        spark.udf.register(name, udf)
        done.add(name)
    setattr(spark, _REGISTERED, done)
    return functions


class _Call:
    """What the executors run: the arguments cast to the declared types, the plugin function, the result
    checked. Pickled by reference to the plugin's class, which the workers import."""

    def __init__(self, function: SqlFunction, arguments: list[pa.DataType], returns: pa.DataType) -> None:
        self.function = function
        self.arguments = arguments
        self.returns = returns
        self.__name__ = function.name  # arrow_udf names the UDF after it

    def __call__(self, *args: pa.Array) -> pa.Array:
        name = self.function.name
        try:
            cast = [
                arg if arg.type == target else pc.cast(arg, target)
                for arg, target in zip(args, self.arguments, strict=True)
            ]
            result = self.function(*cast)
            if isinstance(result, pa.ChunkedArray):
                result = result.combine_chunks()
            if len(result) != len(args[0] if args else result):
                raise ValueError(f"returned {len(result)} values for {len(args[0])} rows")
            return result if result.type == self.returns else pc.cast(result, self.returns)
        except StreamlingError:
            raise
        except Exception as exc:
            raise StreamlingError.user(f"SQL function '{name}': {type(exc).__name__}: {first_line(exc)}") from None


def call_problems(df: DataFrame, functions: dict[str, SqlFunction]) -> list[str]:
    """Calls of plugin functions in `df`'s analysed plan with the wrong count or types of arguments."""
    if not functions:
        return []
    problems: list[str] = []
    plans = [df._jdf.queryExecution().analyzed()]
    while plans:
        plan = plans.pop()
        plans.extend(_seq(plan.children()))
        plans.extend(_seq(plan.subqueries()))
        exprs = _seq(plan.expressions())
        while exprs:
            expr = exprs.pop()
            exprs.extend(_seq(expr.children()))
            if expr.nodeName() != "PythonUDF":
                continue
            function = functions.get(expr.name())
            if function is None:
                continue
            problem = _argument_problem(function, [c.dataType() for c in _seq(expr.children())])
            if problem and problem not in problems:
                problems.append(problem)
    return problems


def _argument_problem(function: SqlFunction, given: list[Any]) -> str | None:
    wanted = [spark_type(a).simpleString() for a in function.arguments]
    got = [t.simpleString() for t in given]
    plural = "" if len(wanted) == 1 else "s"
    if len(got) != len(wanted):
        return (
            f"function {function.name} takes {len(wanted)} argument{plural} ({', '.join(wanted)}), "
            f"got {len(got)} ({', '.join(got)})"
        )
    for index, (want, have) in enumerate(zip(wanted, got, strict=True), start=1):
        if have == want or have == "void" or want in _WIDENS.get(have, ()):
            continue
        return f"function {function.name}: argument {index} must be {want}, got {have} (declared {signature(function)})"
    return None


def _seq(scala_seq: Any) -> list[Any]:
    return [scala_seq.apply(i) for i in range(scala_seq.size())]
