"""(filled in by the family's implementation)"""

from __future__ import annotations

from streamling.sql.functions.base import ArrowFunction, SparkFunction

SPARK_FUNCTIONS: list[SparkFunction] = []
ARROW_FUNCTIONS: list[type[ArrowFunction]] = []
