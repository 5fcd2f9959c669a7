"""The two SQL dialects transforms are parsed with — the original's Postgres-like one first, Spark SQL as a
fallback — with every catalogue function left as a plain call, in the order and case written, so the
catalogue (not sqlglot's idea of, say, ``split`` or ``locate``) decides what it means in Spark."""

from __future__ import annotations

from typing import Any

from sqlglot import exp
from sqlglot.dialects.postgres import Postgres
from sqlglot.dialects.spark import Spark
from sqlglot.parser import Parser
from sqlglot.tokens import TokenType

from streamling.sql.functions.catalogue import NAMES

KEEP = frozenset({"now", "current_timestamp", "current_date", "current_time"})
"""Parsed by sqlglot into its own nodes (also without parentheses), which rendering pins per epoch."""


def _plain(table: dict[str, Any]) -> dict[str, Any]:
    return {name: value for name, value in table.items() if name.lower() not in NAMES or name.lower() in KEEP}


def _case_insensitive(pattern: exp.Expression) -> exp.Expression:
    if isinstance(pattern, exp.Literal) and pattern.is_string:
        return exp.Literal.string("(?i)" + pattern.this)
    return exp.Concat(expressions=[exp.Literal.string("(?i)"), pattern], safe=False)


def _regexp_match(case_insensitive: bool) -> Any:
    """``text ~* pattern`` and ``text SIMILAR TO pattern`` as ``RLIKE`` (Spark has neither): the original's engine
    (DataFusion) also reads a SIMILAR TO pattern as a regular expression matched anywhere in the text."""

    def parse(self: Parser, this: exp.Expression | None) -> exp.Expression | None:
        pattern = self._parse_bitwise()
        if pattern is not None and case_insensitive:
            pattern = _case_insensitive(pattern)
        return self._parse_escape(self.expression(exp.RegexpLike(this=this, expression=pattern)))

    return parse


_RANGE = {TokenType.IRLIKE: _regexp_match(True), TokenType.SIMILAR_TO: _regexp_match(False)}


def _map(args: list[exp.Expression]) -> exp.Expression:
    """DataFusion's ``map``: with two arguments either two arrays (keys, values) or one key and its value, which
    only the arguments' types tell apart, so it stays an `exp.Map` that rendering resolves once they are known
    (`SqlProgram._resolve_maps`); with another even number, key/value pairs (Spark's ``map``). Postgres' parser
    took two arguments only, so ``map('a', 1, 'b', 2)`` failed and the whole query fell back to Spark SQL."""
    if len(args) == 2:
        return exp.Map(keys=args[0], values=args[1])
    return _pairs(args)


def _pairs(args: list[exp.Expression]) -> exp.Expression:
    """DataFusion's ``make_map(k1, v1, k2, v2, …)``: Spark's ``map`` of the same pairs."""
    if len(args) % 2:  # Spark's map reports it: "map expects a positive even number of arguments"
        return exp.Anonymous(this="map", expressions=args)
    return exp.VarMap(keys=exp.Array(expressions=args[0::2]), values=exp.Array(expressions=args[1::2]))


class StreamlingPostgres(Postgres):
    class Tokenizer(Postgres.Tokenizer):
        # Postgres reads REGEXP as the `~` operator, which made ``REGEXP(data, '^data')`` a bitwise NOT of a tuple
        KEYWORDS = {
            k: v for k, v in Postgres.Tokenizer.KEYWORDS.items() if not (k == "REGEXP" and v == TokenType.RLIKE)
        }

    class Parser(Postgres.Parser):
        FUNCTIONS = {**_plain(Postgres.Parser.FUNCTIONS), "MAP": _map, "MAKE_MAP": _pairs}
        FUNCTION_PARSERS = _plain(Postgres.Parser.FUNCTION_PARSERS)
        RANGE_PARSERS = {**Postgres.Parser.RANGE_PARSERS, **_RANGE}


class StreamlingSpark(Spark):
    class Parser(Spark.Parser):
        FUNCTIONS = _plain(Spark.Parser.FUNCTIONS)
        FUNCTION_PARSERS = _plain(Spark.Parser.FUNCTION_PARSERS)
        RANGE_PARSERS = {**Spark.Parser.RANGE_PARSERS, **_RANGE}


DIALECTS = (StreamlingPostgres, StreamlingSpark)
