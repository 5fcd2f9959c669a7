"""The original's decimal_arb narrowing and ordering functions: ``decimal_arb_to_sort_key`` (a binary key whose
byte order is the numeric order), ``decimal_arb_to_decimal128`` (a Spark decimal) and ``decimal_arb_to_decimal256``
(a decimal_arb of at most 76 digits, Spark having no 256-bit decimal): exact values, the order of keys across signs
and scales, NULLs, rounding, and values that do not fit."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import DataFrame
from pyspark.sql import types as T

from streamling.core.markers import WIDE_DECIMAL_KEY
from streamling.errors import StreamlingError
from streamling.sql.functions.decimals import DecimalArbToDecimal128, DecimalArbToDecimal256, DecimalArbToSortKey
from streamling.sql.rewrite import SqlProgram
from tests.sql_functions import frame, query

WHERE = "SQL transform 'test'"


def key(text: str) -> bytes:
    (result,) = DecimalArbToSortKey()(pa.array([text], pa.string())).to_pylist()
    return result


def row(spark, expressions: dict[str, str], source: DataFrame | None = None) -> dict[str, Any]:
    sql = "SELECT " + ", ".join(f"{e} AS {name}" for name, e in expressions.items()) + " FROM t"
    (result,) = query(spark, sql, source).collect()
    return result.asDict()


def run_error(spark, expression: str, source: DataFrame | None = None) -> str:
    with pytest.raises(Exception) as caught:
        query(spark, f"SELECT {expression} AS v FROM t", source).collect()
    return str(caught.value)


def validate_error(sql: str) -> str:
    with pytest.raises(StreamlingError) as caught:
        SqlProgram(sql, WHERE).render({"t": "v"}, schemas={"t": T.StructType()})
    return str(caught.value)


# -- decimal_arb_to_sort_key -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0", "01"),
        ("-0.00", "01"),
        ("1", "02800000010a"),
        ("1.50", "02800000010f"),
        ("123.45", "02800000030c2232"),
        ("0.001", "027ffffffe0a"),
        ("1000", "02800000040a"),
        ("-1", "007ffffffef4ff"),
        ("-123.45", "007ffffffcf2dcccff"),
        ("-0.15", "007fffffffefff"),
    ],
)
def test_sort_key_bytes(text: str, expected: str) -> None:
    assert key(text).hex() == expected


def test_equal_numbers_get_equal_keys_at_any_scale() -> None:
    assert key("1.5") == key("1.50") == key("1.500000000000000000000000000000")
    assert key("0") == key("0.000") == key("-0")
    assert key("-100") == key("-100.00")


ORDERED = [
    "-" + "9" * 100,  # 100 integer digits
    "-" + str(2**256),
    "-1000000",
    "-123.45",
    "-10",
    "-9.99",
    "-2",
    "-1.5",
    "-1",
    "-0.15",
    "-0.1",
    "-0." + "0" * 49 + "1",  # -10^-50
    "0",
    "0." + "0" * 59 + "1",  # 10^-60
    "0.0001",
    "0.1",
    "0.105",
    "0.15",
    "1",
    "1.05",
    "1.5",
    "9",
    "10",
    "11",
    "99.99",
    "100",
    str(2**256 - 1),
    "1" + "0" * 200,
]


def test_keys_sort_numerically_across_signs_magnitudes_and_scales() -> None:
    assert [Decimal(t) for t in ORDERED] == sorted(Decimal(t) for t in ORDERED)
    keys = [key(t) for t in ORDERED]
    assert sorted(keys) == keys
    assert len(set(keys)) == len(keys)


def test_spark_orders_rows_by_the_key_numerically(spark) -> None:
    """Spark compares binary as unsigned bytes, so ORDER BY the key is the numeric order; the text is not."""
    shuffled = ORDERED[1::2] + ORDERED[0::2]
    source = frame(spark, [(t,) for t in shuffled] + [(None,)], "a string")
    df = query(spark, "SELECT a, decimal_arb_to_sort_key(a) AS k FROM t", source)
    assert df.schema["k"].dataType == T.BinaryType()
    rows = df.orderBy("k").collect()
    assert [r.a for r in rows] == [None, *ORDERED]  # NULL keys first, as Spark sorts NULLs
    assert rows[0].k is None


def test_sort_key_takes_decimal_arb_values_decimals_and_integers(spark) -> None:
    source = spark.createDataFrame(
        [(Decimal("-1.50"), -2, "2.5")],
        T.StructType(
            [
                T.StructField("d", T.DecimalType(10, 2)),
                T.StructField("n", T.LongType()),
                T.StructField("w", T.StringType(), metadata={WIDE_DECIMAL_KEY: "decimal(100,3)"}),
            ]
        ),
    )
    got = row(
        spark,
        {
            "d": "decimal_arb_to_sort_key(d)",
            "n": "decimal_arb_to_sort_key(n)",
            "w": "decimal_arb_to_sort_key(w)",
            "arb": "decimal_arb_to_sort_key(to_decimal_arb('1.5', 10, 3))",
            "sum": "decimal_arb_to_sort_key(w + d)",  # operators on decimal_arb values: exact, then the key
            "literal": "decimal_arb_to_sort_key(-1.5)",
            "lt": "decimal_arb_to_sort_key(to_decimal_arb('-2', 10, 0)) < decimal_arb_to_sort_key(-1.5)",
            "eq": "decimal_arb_to_sort_key(d) = decimal_arb_to_sort_key('-1.5000')",
        },
        source,
    )
    assert got == {
        "d": key("-1.5"),
        "n": key("-2"),
        "w": key("2.5"),
        "arb": key("1.5"),
        "sum": key("1"),
        "literal": key("-1.5"),
        "lt": True,
        "eq": True,
    }


def test_sort_key_of_malformed_text_fails_naming_the_value(spark) -> None:
    source = frame(spark, [("1.2.3",)], "a string")
    message = run_error(spark, "decimal_arb_to_sort_key(a)", source)
    assert "SQL function decimal_arb_to_sort_key: '1.2.3' is not a decimal number" in message


# -- decimal_arb_to_decimal128 / decimal_arb_to_decimal256 ------------------------------------------------------


def test_to_decimal128_is_a_spark_decimal_rounded_half_to_even(spark) -> None:
    df = query(
        spark,
        "SELECT decimal_arb_to_decimal128(to_decimal_arb('1.2345', 100, 4), 20, 2) AS a, "
        "decimal_arb_to_decimal128(to_decimal_arb('0.125', 10, 3), 5, 2) AS down, "
        "decimal_arb_to_decimal128(to_decimal_arb('0.135', 10, 3), 5, 2) AS up, "
        "decimal_arb_to_decimal128(to_decimal_arb('-0.125', 10, 3), 5, 2) AS neg_down, "
        "decimal_arb_to_decimal128(to_decimal_arb('-2.675', 10, 3), 5, 2) AS neg_up, "
        "decimal_arb_to_decimal128(to_decimal_arb('1.5', 10, 1), 10, 4) AS wider, "
        "decimal_arb_to_decimal128('" + "9" * 38 + "', 38, 0) AS widest, "
        "decimal_arb_to_decimal128(to_decimal_arb('0.00000000000000000000000000000000000001', 40, 38), 38, 38) "
        "AS smallest, "
        "decimal_arb_to_decimal128(17, 5, 1) AS from_int "
        "FROM t",
    )
    types = {f.name: f.dataType for f in df.schema.fields}
    assert types["a"] == T.DecimalType(20, 2) and types["widest"] == T.DecimalType(38, 0)
    assert all(WIDE_DECIMAL_KEY not in (f.metadata or {}) for f in df.schema.fields)  # a plain Spark decimal
    (got,) = df.collect()
    assert got.asDict() == {
        "a": Decimal("1.23"),
        "down": Decimal("0.12"),
        "up": Decimal("0.14"),
        "neg_down": Decimal("-0.12"),
        "neg_up": Decimal("-2.68"),
        "wider": Decimal("1.5000"),
        "widest": Decimal("9" * 38),
        "smallest": Decimal("1E-38"),
        "from_int": Decimal("17.0"),
    }


def test_to_decimal256_is_a_decimal_arb_of_at_most_76_digits(spark) -> None:
    source = frame(
        spark,
        [(str(2**252), "2.675", "-0.0049")],
        "big string, half string, tiny string",
    )
    df = query(
        spark,
        "SELECT decimal_arb_to_decimal256(big, 76, 0) AS big, decimal_arb_to_decimal256(half, 76, 2) AS half, "
        "decimal_arb_to_decimal256(tiny, 10, 2) AS tiny, decimal_arb_to_decimal256(to_decimal_arb('1.5', 10, 1), "
        "40, 3) AS wider, decimal_arb_to_decimal256(decimal_arb_to_decimal256(big, 76, 0) + 1, 76, 0) AS plus "
        "FROM t",
        source,
    )
    markers = {f.name: (f.metadata or {}).get(WIDE_DECIMAL_KEY) for f in df.schema.fields}
    assert markers == {
        "big": "decimal(76,0)",
        "half": "decimal(76,2)",
        "tiny": "decimal(10,2)",
        "wider": "decimal(40,3)",
        "plus": "decimal(76,0)",
    }
    assert all(f.dataType == T.StringType() for f in df.schema.fields)
    (got,) = df.collect()
    assert got.asDict() == {
        "big": str(2**252),  # 76 digits
        "half": "2.68",
        "tiny": "0.00",
        "wider": "1.500",
        "plus": str(2**252 + 1),
    }


def test_nulls_stay_null(spark) -> None:
    source = frame(spark, [(None,)], "a string")
    got = row(
        spark,
        {
            "key": "decimal_arb_to_sort_key(a)",
            "d128": "decimal_arb_to_decimal128(a, 10, 2)",
            "d256": "decimal_arb_to_decimal256(a, 60, 2)",
            "arb": "decimal_arb_to_decimal128(to_decimal_arb(a, 100, 2), 10, 2)",
            "null": "decimal_arb_to_sort_key(NULL)",
        },
        source,
    )
    assert got == {name: None for name in got}


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        # 99999999.995 rounds to 100000000.00: eleven digits
        (
            "decimal_arb_to_decimal128(a, 10, 2)",
            "SQL function decimal_arb_to_decimal128: 99999999.995 does not fit decimal(10,2) (rounded to 2 "
            "fractional digits)",
        ),
        ("decimal_arb_to_decimal128(b, 38, 0)", f"decimal_arb_to_decimal128: {10**38} does not fit decimal(38,0)"),
        ("decimal_arb_to_decimal256(b, 38, 0)", f"decimal_arb_to_decimal256: {10**38} does not fit decimal(38,0)"),
        ("decimal_arb_to_decimal256(c, 76, 0)", f"decimal_arb_to_decimal256: {10**76} does not fit decimal(76,0)"),
        ("decimal_arb_to_decimal128(d, 10, 2)", "decimal_arb_to_decimal128: 'abc' is not a decimal number"),
    ],
)
def test_a_value_that_does_not_fit_fails_the_epoch_naming_it(spark, expression: str, message: str) -> None:
    source = frame(spark, [("99999999.995", str(10**38), str(10**76), "abc")], "a string, b string, c string, d string")
    assert message in run_error(spark, expression, source)


@pytest.mark.parametrize(
    ("function", "args", "message"),
    [
        (DecimalArbToDecimal128, ["1.5", 39, 0], "1 ≤ precision ≤ 38 and 0 ≤ scale ≤ precision; got precision 39"),
        (DecimalArbToDecimal256, ["1.5", 77, 0], "1 ≤ precision ≤ 76 and 0 ≤ scale ≤ precision; got precision 77"),
        (DecimalArbToDecimal128, ["1.5", 5, 6], "got precision 5, scale 6"),
    ],
)
def test_the_functions_check_their_declaration(function: type, args: list[Any], message: str) -> None:
    value, precision, scale = args
    with pytest.raises(StreamlingError) as caught:
        function()(pa.array([value]), pa.array([precision], pa.int64()), pa.array([scale], pa.int64()))
    assert message in str(caught.value)


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        (
            "SELECT decimal_arb_to_decimal128(a, 39, 2) FROM t",
            "function decimal_arb_to_decimal128: precision and scale must be integer literals with "
            "1 <= precision <= 38 and 0 <= scale <= precision, got 39, 2",
        ),
        (
            "SELECT decimal_arb_to_decimal256(a, 77, 0) FROM t",
            "function decimal_arb_to_decimal256: precision and scale must be integer literals with "
            "1 <= precision <= 76",
        ),
        ("SELECT decimal_arb_to_decimal128(a, p, 2) FROM t", "must be integer literals"),
        ("SELECT decimal_arb_to_decimal128(a, 10) FROM t", "function decimal_arb_to_decimal128 takes 3 arguments"),
        ("SELECT decimal_arb_to_sort_key(a, b) FROM t", "function decimal_arb_to_sort_key takes 1 argument"),
    ],
)
def test_bad_calls_fail_at_validate(sql: str, message: str) -> None:
    error = validate_error(sql)
    assert error.startswith(WHERE) and message in error


def test_a_branch_not_taken_does_not_fail_and_reads_its_declaration(spark) -> None:
    """Spark runs a Python function on every row, also where its CASE branch is not taken: the value is guarded
    there (NULL, no error), while precision and scale stay the literals the function reads from the first row."""
    source = frame(spark, [("999.999", False), ("1.5", True)], "a string, ok boolean")
    df = query(
        spark,
        "SELECT CASE WHEN ok THEN decimal_arb_to_decimal128(a, 4, 2) END AS d, "
        "CASE WHEN ok THEN decimal_arb_to_decimal256(a, 4, 2) END AS w FROM t",
        source,
    )
    assert [(r.d, r.w) for r in df.collect()] == [(None, None), (Decimal("1.50"), "1.50")]
