"""Time functions: pinned to the epoch's timestamp, so every row, node and sink of an epoch agree."""

from __future__ import annotations

from datetime import date, datetime, time

import pytest

from tests.sql_functions import query, value

EPOCH_MS = 1_700_000_000_123  # 2023-11-14 22:13:20.123 UTC


def pinned(spark, expression: str):
    (row,) = query(spark, f"SELECT {expression} AS v FROM t", epoch_ms=EPOCH_MS).collect()
    return row.v


@pytest.mark.parametrize(
    "expression", ["now()", "NOW()", "current_timestamp", "current_timestamp()", "CURRENT_TIMESTAMP"]
)
def test_now_is_the_epoch_time(spark, expression: str) -> None:
    assert pinned(spark, expression) == datetime(2023, 11, 14, 22, 13, 20, 123000)


@pytest.mark.parametrize("expression", ["current_date", "current_date()", "today()", "Today()", "TODAY()"])
def test_today_is_the_epoch_date(spark, expression: str) -> None:
    assert pinned(spark, expression) == date(2023, 11, 14)


@pytest.mark.parametrize("expression", ["current_time()", "CURRENT_TIME", "Current_Time()"])
def test_current_time_is_the_epoch_time_of_day(spark, expression: str) -> None:
    assert pinned(spark, expression) == time(22, 13, 20, 123000)


def test_the_original_example_filter_compares_with_the_pinned_time(spark) -> None:
    rows = query(
        spark,
        "SELECT x FROM t WHERE created_at > now() - interval '1 hour'",
        spark.createDataFrame(
            [(1, datetime(2023, 11, 14, 21, 30)), (2, datetime(2023, 11, 14, 20, 0))], "x bigint, created_at timestamp"
        ),
        epoch_ms=EPOCH_MS,
    ).collect()
    assert [r.x for r in rows] == [1]


def test_without_an_epoch_the_functions_are_sparks_own(spark) -> None:
    assert isinstance(value(spark, "now()"), datetime)
    assert isinstance(value(spark, "current_time()"), time)
    assert isinstance(value(spark, "today()"), date)


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("to_timestamp(1700000000)", datetime(2023, 11, 14, 22, 13, 20)),
        ("to_timestamp_seconds(1700000000)", datetime(2023, 11, 14, 22, 13, 20)),
        ("to_timestamp_millis(1700000000123)", datetime(2023, 11, 14, 22, 13, 20, 123000)),
        ("to_timestamp_micros(1700000000123456)", datetime(2023, 11, 14, 22, 13, 20, 123456)),
        ("To_Timestamp_Nanos(1700000000123456789)", datetime(2023, 11, 14, 22, 13, 20, 123456)),
        ("to_timestamp_micros(CAST(NULL AS BIGINT))", None),
        ("date_part('hour', to_timestamp(1700000000))", 22),
    ],
)
def test_epoch_numbers_become_timestamps(spark, expression: str, expected) -> None:
    assert value(spark, expression) == expected


def test_a_time_function_with_arguments_is_refused_naming_it() -> None:
    from streamling.errors import StreamlingError
    from streamling.sql.rewrite import SqlProgram

    with pytest.raises(StreamlingError) as caught:
        _ = SqlProgram("SELECT today(1) AS d FROM t", "SQL transform 'x'").rewritten
    assert str(caught.value) == (
        "SQL transform 'x': function today takes 0 arguments — current_date() — got 1: today(1)"
    )
