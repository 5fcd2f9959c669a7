"""The two SQL dialects transforms are parsed with — the original's Postgres-like one first, Spark SQL as a
fallback — with every catalogue function left as a plain call, in the order and case written, so the
catalogue (not sqlglot's idea of, say, ``split`` or ``locate``) decides what it means in Spark."""

from __future__ import annotations

from typing import Any

from sqlglot.dialects.postgres import Postgres
from sqlglot.dialects.spark import Spark
from sqlglot.tokens import TokenType

from streamling.sql.functions.catalogue import NAMES

KEEP = frozenset({"now", "current_timestamp", "current_date", "current_time"})
"""Parsed by sqlglot into its own nodes (also without parentheses), which rendering pins per epoch."""


def _plain(table: dict[str, Any]) -> dict[str, Any]:
    return {name: value for name, value in table.items() if name.lower() not in NAMES or name.lower() in KEEP}


class StreamlingPostgres(Postgres):
    class Tokenizer(Postgres.Tokenizer):
        # Postgres reads REGEXP as the `~` operator, which made ``REGEXP(data, '^data')`` a bitwise NOT of a tuple
        KEYWORDS = {
            k: v for k, v in Postgres.Tokenizer.KEYWORDS.items() if not (k == "REGEXP" and v == TokenType.RLIKE)
        }

    class Parser(Postgres.Parser):
        FUNCTIONS = _plain(Postgres.Parser.FUNCTIONS)
        FUNCTION_PARSERS = _plain(Postgres.Parser.FUNCTION_PARSERS)


class StreamlingSpark(Spark):
    class Parser(Spark.Parser):
        FUNCTIONS = _plain(Spark.Parser.FUNCTIONS)
        FUNCTION_PARSERS = _plain(Spark.Parser.FUNCTION_PARSERS)


DIALECTS = (StreamlingPostgres, StreamlingSpark)
