"""Rewrite a parsed query's function calls: catalogue functions with Spark built-ins become those, Arrow ones
take the name Spark registered them under; arity and literal arguments are checked on the way, so a wrong
call fails at ``--validate`` naming the function and what it takes."""

from __future__ import annotations

from sqlglot import exp

from streamling.errors import StreamlingError
from streamling.sql.functions import catalogue
from streamling.sql.functions.base import SparkFunction

SKIP = frozenset({"dynamic_table_check"})
"""Calls rewritten elsewhere (per epoch)."""


def rewrite_calls(tree: exp.Expression, where: str) -> list[str]:
    """Rewrite `tree` in place (innermost calls first); returns the other functions it calls, by the name
    Spark knows them under (Arrow catalogue functions and, possibly, plugins' functions)."""
    from streamling.plugins.functions import arity_text, registered_name

    called: list[str] = []
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
            call.replace(entry.rewrite(args))
            continue
        least, most = entry.arity()
        if len(args) < least or (most is not None and len(args) > most):
            raise _arity_error(where, call, name, arity_text(least, most), f"{entry.name}({entry.doc_arguments})")
        _check(where, call, name, entry.check(args))
        replacement = entry.rewrite(args)
        if replacement is not None:
            call.replace(replacement)
            continue
        spark_name = registered_name(entry, entry.name)
        call.set("this", spark_name)
        called.append(spark_name)
    return sorted(set(called))


def _check(where: str, call: exp.Anonymous, name: str, problem: str | None) -> None:
    if problem:
        raise StreamlingError.user(f"{where}: function {name}: {problem} in {written(call)}")


def _arity_error(where: str, call: exp.Anonymous, name: str, takes: str, signature: str) -> StreamlingError:
    got = len(call.expressions)
    return StreamlingError.user(f"{where}: function {name} takes {takes} — {signature} — got {got}: {written(call)}")


def written(call: exp.Expression) -> str:
    """A call as the user wrote it (sqlglot would upper-case the function name)."""
    return call.sql(dialect="spark", normalize_functions=False)
