"""``now()`` and friends: Spark's own, pinned to the epoch's timestamp when a transform renders, so every
sink of an epoch (and a replay of it) sees the same time."""

from __future__ import annotations

from sqlglot import exp

from streamling.sql.functions.base import ArrowFunction, SparkFunction

FAMILY = "Time"
PINNED = "the epoch's time (UTC), the same in every row, node and sink of an epoch; never NULL"

SPARK_FUNCTIONS: list[SparkFunction] = [
    SparkFunction(
        "now",
        FAMILY,
        "",
        "timestamp",
        PINNED,
        aliases=("current_timestamp",),
        arity=(0, 0),
        build=lambda args: exp.CurrentTimestamp(),
        example="SELECT now() AS seen_at",
    ),
    SparkFunction(
        "current_time",
        FAMILY,
        "",
        "time",
        PINNED,
        arity=(0, 0),
        build=lambda args: exp.CurrentTime(),
        example="SELECT current_time()",
    ),
    SparkFunction(
        "current_date",
        FAMILY,
        "",
        "date",
        PINNED,
        aliases=("today",),
        arity=(0, 0),
        build=lambda args: exp.CurrentDate(),
        example="SELECT today()",
    ),
]
for _unit, _template in (
    ("seconds", "timestamp_seconds({0})"),
    ("millis", "timestamp_millis({0})"),
    ("micros", "timestamp_micros({0})"),
    ("nanos", "timestamp_micros(div({0}, 1000))"),
):
    SPARK_FUNCTIONS.append(
        SparkFunction(
            f"to_timestamp_{_unit}",
            FAMILY,
            f"{_unit} since 1970-01-01 UTC (integer)",
            "timestamp",
            "NULL → NULL" + ("; finer than microseconds is truncated" if _unit == "nanos" else ""),
            templates={1: _template},
            example=f"SELECT to_timestamp_{_unit}(block_timestamp)",
        )
    )
ARROW_FUNCTIONS: list[type[ArrowFunction]] = []
