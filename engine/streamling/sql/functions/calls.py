"""Rewrite a parsed query's function calls: catalogue functions with Spark built-ins become those, Arrow ones
take the name Spark registered them under; arity and literal arguments are checked on the way, so a wrong
call fails at ``--validate`` naming the function and what it takes."""

from __future__ import annotations

from dataclasses import dataclass

from sqlglot import exp

from streamling.errors import StreamlingError
from streamling.sql.functions import catalogue
from streamling.sql.functions.base import SparkFunction

SKIP = frozenset({"dynamic_table_check"})
"""Calls rewritten elsewhere (per epoch)."""
CALL = "streamling_call"
"""Meta key on a rewritten call's replacement: its index in `Rewritten.spark_calls`."""


@dataclass(frozen=True)
class SparkCall:
    """A call rewritten into Spark built-ins, kept to explain a Spark analysis error in its terms."""

    function: SparkFunction
    written: str
    args: list[exp.Expression]


@dataclass
class Rewritten:
    called: list[str]
    """Functions Spark must have registered (Arrow catalogue functions and, possibly, plugins')."""
    spark_calls: list[SparkCall]


def rewrite_calls(tree: exp.Expression, where: str) -> Rewritten:
    """Rewrite `tree` in place (innermost calls first); returns the other functions it calls, by the name
    Spark knows them under, and the calls rewritten into Spark built-ins."""
    from streamling.plugins.functions import arity_text, registered_name

    called: list[str] = []
    spark_calls: list[SparkCall] = []
    for call in reversed(list(tree.find_all(exp.Anonymous, bfs=False))):
        name = call.name.lower()
        if name in SKIP:
            continue
        entry = catalogue.lookup(name)
        args = list(call.expressions)
        if entry is None:
            called.append(name)
            continue
        if isinstance(entry, SparkFunction):
            least, most = entry.bounds()
            if not entry.accepts(len(args)):
                raise _arity_error(where, call, name, arity_text(least, most), f"{entry.name}({entry.arguments})")
            _check(where, call, name, entry.check(args) if entry.check else None)
            replacement = entry.rewrite(args)
            replacement.meta[CALL] = len(spark_calls)
            spark_calls.append(SparkCall(entry, written(call), [a.copy() for a in args]))
            call.replace(replacement)
            continue
        # Spark tells a vectorised function the batch's length only through an argument: one that takes none
        # (uuid7()) declares an optional argument and is called with a constant
        row_argument = getattr(entry, "row_argument", False)
        least, most = (0, 0) if row_argument else entry.arity()
        if len(args) < least or (most is not None and len(args) > most):
            raise _arity_error(where, call, name, arity_text(least, most), f"{entry.name}({entry.doc_arguments})")
        _check(where, call, name, entry.check(args))
        replacement = entry.rewrite(args)
        if replacement is not None:
            call.replace(replacement)
            continue
        spark_name = registered_name(entry, entry.name)
        call.set("this", spark_name)
        if row_argument:
            call.set("expressions", [exp.Literal.number(0)])
        called.append(spark_name)
    return Rewritten(sorted(set(called)), spark_calls)


def _check(where: str, call: exp.Anonymous, name: str, problem: str | None) -> None:
    if problem:
        raise StreamlingError.user(f"{where}: function {name}: {problem} in {written(call)}")


def _arity_error(where: str, call: exp.Anonymous, name: str, takes: str, signature: str) -> StreamlingError:
    got = len(call.expressions)
    return StreamlingError.user(f"{where}: function {name} takes {takes} — {signature} — got {got}: {written(call)}")


def written(call: exp.Expression) -> str:
    """A call as the user wrote it (sqlglot would upper-case the function name)."""
    return call.sql(dialect="spark", normalize_functions=False)
