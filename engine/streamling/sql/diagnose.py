"""Explain a Spark analysis error in the terms the user wrote: a type mismatch inside the built-ins a catalogue
call was rewritten into names Spark's functions, not the call. Runs only after analysis failed."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from sqlglot import exp

from streamling.errors import first_line
from streamling.sql.functions.calls import CALL
from streamling.sql.rewrite import SqlProgram

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def culprit(spark: SparkSession, program: SqlProgram, render: Callable[[exp.Query], str]) -> str | None:
    """The first rewritten call whose arguments analyse but whose rewrite does not, described with the types it
    got and what it takes; None when no call is to blame (the error is elsewhere). `render` renders a variant of
    `program.rewritten` the way the failed query was rendered."""
    for index, call in enumerate(program.calls.spark_calls):
        probe = program.rewritten.copy()
        node = next((n for n in probe.find_all(exp.Expression) if n.meta.get(CALL) == index), None)
        select = node.find_ancestor(exp.Select) if node is not None else None
        if select is None or not call.args:
            continue
        select.set("expressions", [exp.alias_(arg.copy(), f"__sl_a{i}") for i, arg in enumerate(call.args)])
        select.set("where", None)
        try:
            fields = spark.sql(render(probe)).schema.fields[: len(call.args)]
        except Exception:  # the arguments fail themselves: not this call
            continue
        typed = [exp.cast(exp.Null(), exp.DataType.build(f.dataType.simpleString(), dialect="spark")) for f in fields]
        try:
            spark.sql(f"SELECT {call.function.rewrite(typed).sql(dialect='spark')}").schema  # noqa: B018
        except Exception as exc:
            given = ", ".join(f.dataType.simpleString() for f in fields)
            function = call.function
            return (
                f"function {function.name} cannot take ({given}) in {call.written}: it takes "
                f"{function.name}({function.arguments}) ({first_line(exc)})"
            )
    return None
