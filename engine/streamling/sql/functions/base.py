"""The two kinds of catalogue function: a `SparkFunction` is rewritten into Spark built-ins before Spark sees
the SQL (it runs in the JVM, at no Python cost); an `ArrowFunction` is a `SqlFunction` like a plugin's,
registered as a vectorised Arrow UDF. Both carry the documentation the reference table of docs/transforms.md is built
from."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import ClassVar

import sqlglot
from sqlglot import exp

from streamling.plugin import SqlFunction

ARG = "__sl_arg"
"""Templates name argument i `{i}`; it is parsed as the column ``__sl_arg<i>`` and replaced by the argument."""


@dataclass(frozen=True)
class Doc:
    """One row of the function reference in docs/transforms.md."""

    name: str
    family: str
    arguments: str
    """As the reader writes them: ``text, pattern[, group]``."""
    returns: str
    nulls: str
    """What NULL arguments (and out-of-range or malformed ones) give."""
    engine: str
    aliases: tuple[str, ...] = ()
    example: str = ""


@dataclass(frozen=True)
class SparkFunction:
    """A function with Spark built-ins of the same meaning: each call is replaced by a Spark SQL expression.

    `templates` maps an argument count to Spark SQL over ``{0}``, ``{1}``… (lambda variables start with ``__``
    so they never meet a column). `build` instead builds the expression from the argument nodes (variadic
    functions); `check` reports a problem with the arguments (a literal that must be one of a few words) as
    text, or None. `arity` defaults to the template keys."""

    name: str
    family: str
    arguments: str
    returns: str
    nulls: str
    templates: Mapping[int, str] = field(default_factory=dict)
    aliases: tuple[str, ...] = ()
    example: str = ""
    build: Callable[[list[exp.Expression]], exp.Expression] | None = None
    check: Callable[[list[exp.Expression]], str | None] | None = None
    arity: tuple[int, int | None] | None = None
    """(least, most) arguments; most None for any number."""

    @property
    def names(self) -> tuple[str, ...]:
        return (self.name, *self.aliases)

    def bounds(self) -> tuple[int, int | None]:
        if self.arity is not None:
            return self.arity
        return min(self.templates), max(self.templates)

    def accepts(self, count: int) -> bool:
        least, most = self.bounds()
        if self.templates and self.build is None:
            return count in self.templates
        return count >= least and (most is None or count <= most)

    def rewrite(self, args: list[exp.Expression]) -> exp.Expression:
        if self.build is not None:
            return self.build(args)
        return fill(self.templates[len(args)], args)

    def doc(self) -> Doc:
        return Doc(
            self.name,
            self.family,
            self.arguments,
            self.returns,
            self.nulls,
            "Spark built-in",
            self.aliases,
            self.example,
        )


@cache
def _template(sql: str) -> exp.Expression:
    text = sql
    for index in range(10):
        text = text.replace("{" + str(index) + "}", f"{ARG}{index}")
    return sqlglot.parse_one(text, read="spark")


def fill(template: str, args: Sequence[exp.Expression]) -> exp.Expression:
    """The template's expression with ``{i}`` replaced by (a copy of) ``args[i]``."""
    tree = _template(template).copy()
    for column in list(tree.find_all(exp.Column)):
        name = column.name
        if not column.table and name.startswith(ARG):
            column.replace(paren(args[int(name[len(ARG) :])].copy()))
    return tree


def paren(node: exp.Expression) -> exp.Expression:
    """`node`, parenthesised when it is an operator expression (so ``{0} + 1`` keeps its meaning)."""
    if isinstance(node, exp.Binary | exp.Unary | exp.Connector) and not isinstance(node, exp.Paren):
        return exp.Paren(this=node)
    return node


class ArrowFunction(SqlFunction):
    """A built-in vectorised function: a `SqlFunction` (the plugin interface) with its documentation.

    `spark_name` is the name it is registered under in Spark: its own name unless Spark has a built-in of that
    name, which a session function cannot override (then ``streamling_<name>``)."""

    family: ClassVar[str]
    doc_arguments: ClassVar[str]
    doc_returns: ClassVar[str]
    nulls: ClassVar[str]
    example: ClassVar[str] = ""
    spark_name: ClassVar[str | None] = None

    @classmethod
    def check(cls, args: list[exp.Expression]) -> str | None:
        """A problem with the call's literal arguments (an unknown mode word), reported at ``--validate``."""
        return None

    @classmethod
    def rewrite(cls, args: list[exp.Expression]) -> exp.Expression | None:
        """The call as Spark SQL when it needs no Python (Spark cannot run an Arrow UDF without arguments,
        so ``json_array()`` becomes ``'[]'``); None runs the function."""
        return None

    @classmethod
    def doc(cls) -> Doc:
        return Doc(
            cls.name,
            cls.family,
            cls.doc_arguments,
            cls.doc_returns,
            cls.nulls,
            "Arrow",
            tuple(cls.aliases),
            cls.example,
        )
