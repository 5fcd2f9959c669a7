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
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from streamling.errors import StreamlingError, first_line
from streamling.plugins.registry import REGISTRY
from streamling.types import parse_type

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql import types as T

    from streamling.plugin import SqlFunction

_REGISTERED = "_streamling_sql_functions"
_INTEGERS = ["tinyint", "smallint", "int", "bigint"]
_WIDENS = {
    **{small: {*_INTEGERS[i:], "float", "double"} for i, small in enumerate(_INTEGERS)},
    "float": {"float", "double"},
}


def spark_type(declared: Any) -> T.DataType:
    """A declared type (YAML type name or Arrow type) as a Spark type."""
    from pyspark.sql.pandas.types import from_arrow_type

    if isinstance(declared, pa.DataType):
        return from_arrow_type(declared)
    return parse_type(str(declared))


def signature(function: SqlFunction) -> str:
    return f"{function.name}({signature_arguments(function)}) -> {spark_type(function.returns).simpleString()}"


def signature_arguments(function: SqlFunction) -> str:
    """``string, bigint[, int]``: the declared argument types, optional ones in brackets."""
    names = ["any" if _any(a) else spark_type(a).simpleString() for a in function.arguments]
    least, _ = function.arity()
    args = ", ".join(names[:least])
    for index, name in enumerate(names[least:]):
        args += f"[{', ' if args or index else ''}{name}"
    args += "]" * (len(names) - least)
    if function.variadic:
        args += ", ..."
    return args


def register_all(spark: SparkSession, names: Iterable[str] | None = None) -> dict[str, SqlFunction]:
    """Register the loaded functions SQL calls by `names` (every one when None) in `spark`, once per session and
    name. Returns them by the name Spark knows them under (what the analysed plan shows)."""
    from pyspark.sql.functions import ArrowUDFType, arrow_udf
    from pyspark.sql.pandas.types import to_arrow_type

    by_call: dict[str, SqlFunction] = {}
    for function in REGISTRY.functions().values():
        for name in (function.name, *function.aliases, registered_name(function)):
            by_call[name.lower()] = function
    wanted = by_call if names is None else {n.lower(): by_call[n.lower()] for n in names if n.lower() in by_call}
    done: dict[str, SqlFunction] = getattr(spark, _REGISTERED, {})
    registered: dict[str, SqlFunction] = {}
    for name, function in wanted.items():
        spark_name = registered_name(function, name)
        registered[spark_name] = function
        if spark_name in done:
            continue
        try:
            returns = spark_type(function.returns)
            arguments = [None if _any(a) else to_arrow_type(spark_type(a), timezone="UTC") for a in function.arguments]
        except StreamlingError as exc:
            raise StreamlingError.user(f"SQL function '{function.name}': {exc.message}") from None
        call = _Call(function, spark_name, arguments, to_arrow_type(returns, timezone="UTC"))
        with warnings.catch_warnings():  # it prefers type hints, which a function of any arity cannot give
            warnings.simplefilter("ignore", UserWarning)
            udf = arrow_udf(call, returns, ArrowUDFType.SCALAR)
        if not function.deterministic:
            udf = udf.asNondeterministic()
        spark.udf.register(spark_name, udf)
        done[spark_name] = function
    setattr(spark, _REGISTERED, done)
    return registered


def registered_name(function: SqlFunction, called: str | None = None) -> str:
    """The name Spark knows `function` by: a built-in's `spark_name` (Spark's own functions of the same name
    cannot be overridden), else the name SQL called it by."""
    return getattr(function, "spark_name", None) or (called or function.name).lower()


def _any(declared: Any) -> bool:
    return isinstance(declared, str) and declared.strip().lower() == "any"


class _Call:
    """What the executors run: the arguments cast to the declared types, the plugin function, the result
    checked. Pickled by reference to the plugin's class, which the workers import."""

    def __init__(
        self, function: SqlFunction, spark_name: str, arguments: list[pa.DataType | None], returns: pa.DataType
    ) -> None:
        self.function = function
        self.arguments = arguments
        self.returns = returns
        self.__name__ = spark_name  # arrow_udf names the UDF after it; the analysed plan shows it

    def _targets(self, count: int) -> list[pa.DataType | None]:
        declared = list(self.arguments)
        if count > len(declared) and declared:
            declared += [declared[-1]] * (count - len(declared))
        return declared[:count]

    def __call__(self, *args: pa.Array) -> pa.Array:
        name = self.function.name
        try:
            cast = [
                arg if target is None or arg.type == target else pc.cast(arg, target)
                for arg, target in zip(args, self._targets(len(args)), strict=True)
            ]
            result = self.function(*cast)
            if isinstance(result, pa.ChunkedArray):
                result = result.combine_chunks()
            if args and len(result) != len(args[0]):
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


def arity_text(least: int, most: int | None) -> str:
    if most is None:
        return f"at least {least} argument{'' if least == 1 else 's'}"
    if least == most:
        return f"{least} argument{'' if least == 1 else 's'}"
    return f"{least} to {most} arguments"


def _argument_problem(function: SqlFunction, given: list[Any]) -> str | None:
    got = [t.simpleString() for t in given]
    least, most = function.arity()
    if len(got) < least or (most is not None and len(got) > most):
        return (
            f"function {function.name} takes {arity_text(least, most)} ({signature_arguments(function)}), "
            f"got {len(got)} ({', '.join(got)})"
        )
    declared = function.argument_types(len(got))
    for index, (want_type, have) in enumerate(zip(declared, got, strict=True), start=1):
        if _any(want_type):
            continue
        want = spark_type(want_type).simpleString()
        if have == want or have == "void" or want in _WIDENS.get(have, ()):
            continue
        return f"function {function.name}: argument {index} must be {want}, got {have} (declared {signature(function)})"
    return None


def _seq(scala_seq: Any) -> list[Any]:
    return [scala_seq.apply(i) for i in range(scala_seq.size())]
