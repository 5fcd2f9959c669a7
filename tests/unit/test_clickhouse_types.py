"""ClickHouse type names read with clickhouse-connect's type registry: wrappers, precision, scale and families, and
the source's and sink's decisions made from them."""

from __future__ import annotations

import logging

import pytest
from pyspark.sql import types as T

from streamling.clickhouse.tables import ColumnInfo, select_expression, spark_field
from streamling.clickhouse.types import (
    base_type,
    can_hold,
    datetime_digits,
    decimal_digits,
    is_composite,
    normalize,
    parse_type,
    unwrap_nullable,
)
from streamling.core.markers import WIDE_DECIMAL_KEY
from streamling.errors import StreamlingError


@pytest.mark.parametrize(
    ("text", "bare", "is_nullable"),
    [
        ("Int64", "Int64", False),
        ("Nullable(Int64)", "Int64", True),
        ("LowCardinality(String)", "String", False),
        ("LowCardinality(Nullable(String))", "String", True),
        ("Nullable( Decimal(10,2) )", "Decimal(10, 2)", True),
        ("Decimal64(3)", "Decimal(18, 3)", False),
        ("Nullable(DateTime64(3, 'Europe/Berlin'))", "DateTime64(3, 'Europe/Berlin')", True),
        ("Array(Nullable(Int64))", "Array(Nullable(Int64))", False),
        ("Object('json')", "Object('json')", False),  # unknown to the registry: as written
        ("LowCardinality(Nullable(NoSuchType(1)))", "NoSuchType(1)", True),  # wrappers peeled as the registry does
    ],
)
def test_unwrap_nullable_reads_the_wrappers(text: str, bare: str, is_nullable: bool) -> None:
    assert unwrap_nullable(text) == (bare, is_nullable)
    assert normalize(text) == (f"Nullable({bare})" if is_nullable else bare)


def test_precision_scale_and_families_come_from_the_registry() -> None:
    assert decimal_digits("Decimal(76, 20)") == (76, 20)
    assert decimal_digits("Nullable(Decimal128(5))") == (38, 5)
    assert decimal_digits("Decimal32(2)") == (9, 2)
    assert decimal_digits("Float64") is None
    assert datetime_digits("DateTime") == 0
    assert datetime_digits("DateTime('UTC')") == 0
    assert datetime_digits("Nullable(DateTime64(9, 'UTC'))") == 9
    assert datetime_digits("Date32") is None
    assert base_type("LowCardinality(Nullable(FixedString(3)))") == "FixedString"
    assert base_type("Object('json')") == "Object"
    assert base_type("Nullable(NoSuchType(1))") == "NoSuchType"
    assert parse_type("Strin") is None and parse_type("Decimal(80, 2)") is None


def test_names_unknown_to_the_registry_log_nothing(caplog) -> None:
    with caplog.at_level(logging.DEBUG):
        assert parse_type("Object('json')") is None
        assert parse_type("NoSuchType(1)") is None
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


@pytest.mark.parametrize(
    ("text", "composite"),
    [
        ("Array(Int64)", True),
        ("Map(String, Nullable(Int64))", True),
        ("Tuple(a Int64, `b c` String)", True),
        ("Nested(a Int32)", True),
        ("Variant(String, Int64)", True),
        ("JSON", True),
        ("Object('json')", True),
        ("Nullable(Int64)", False),
        ("LowCardinality(String)", False),
    ],
)
def test_is_composite(text: str, composite: bool) -> None:
    assert is_composite(text) is composite


@pytest.mark.parametrize(
    ("existing", "required", "ok"),
    [
        ("Decimal128(2)", "Decimal(18, 2)", True),  # Decimal128(2) is Decimal(38, 2)
        ("Decimal(18,4)", "Decimal(18, 4)", True),
        ("Tuple(a Int64, b String)", "Tuple(a Int64, b String)", True),
        ("Nullable(DateTime64(6, 'UTC'))", "DateTime64(6, 'UTC')", True),
        ("DateTime64(3, 'UTC')", "DateTime64(6, 'UTC')", False),
        ("DateTime64(3)", "Date32", True),
        ("Enum8('a' = 1)", "String", True),
        ("LowCardinality(FixedString(3))", "Nullable(String)", True),
        ("UInt8", "Bool", True),
        ("Object('json')", "Object('json')", True),
        ("Object('json')", "String", False),
    ],
)
def test_can_hold_on_registry_types(existing: str, required: str, ok: bool) -> None:
    assert can_hold(existing, required) is ok


@pytest.mark.parametrize(
    ("text", "spark", "metadata"),
    [
        ("LowCardinality(Nullable(String))", T.StringType(), {}),
        ("Enum16('a' = 1000)", T.StringType(), {}),
        ("Nullable(UInt8)", T.ShortType(), {}),
        ("UInt64", T.DecimalType(20, 0), {}),
        ("Decimal(38, 4)", T.DecimalType(38, 4), {}),
        ("Decimal(60, 10)", T.StringType(), {WIDE_DECIMAL_KEY: "decimal(60,10)"}),
        ("Nullable(DateTime64(3, 'UTC'))", T.TimestampType(), {}),
        ("Date", T.DateType(), {}),
        ("Bool", T.BooleanType(), {}),
    ],
)
def test_spark_field_by_registry_type(text: str, spark: T.DataType, metadata: dict[str, str]) -> None:
    field = spark_field(ColumnInfo("c", text))
    assert (field.dataType, field.metadata) == (spark, metadata)


@pytest.mark.parametrize(
    "text", ["Array(Int64)", "Object('json')", "Time64(3)", "Map(String, Int64)", "AggregateFunction(sum, Int64)"]
)
def test_unsupported_types_keep_their_message(text: str) -> None:
    with pytest.raises(StreamlingError) as caught:
        spark_field(ColumnInfo("c", text))
    assert caught.value.message == (
        f"column 'c' has type {text}, which the ClickHouse source cannot read; leave it out with 'columns'"
    )


def test_select_expressions_follow_the_wrappers() -> None:
    assert select_expression(ColumnInfo("s", "LowCardinality(Nullable(String))")) == (
        "CAST(`s` AS Nullable(String)) AS `s`"
    )
    assert select_expression(ColumnInfo("s", "LowCardinality(String)")) == "toString(`s`) AS `s`"
    assert select_expression(ColumnInfo("n", "Nullable(UInt32)")) == "CAST(`n` AS Nullable(Int64)) AS `n`"
    assert select_expression(ColumnInfo("t", "DateTime('UTC')")) == "toDateTime64(`t`, 6, 'UTC') AS `t`"
    assert select_expression(ColumnInfo("f", "Float64")) == "`f`"
    assert not ColumnInfo("a", "Array(Nullable(Int64))").nullable
    assert ColumnInfo("a", "LowCardinality(Nullable(String))").nullable
