"""Wide integers (u256/i256) and arbitrary-precision decimals: the functions on real Spark rows, the original's
examples, NULL and error cases, operators on marked columns rewritten into them, and the markers sinks read."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import DataFrame
from pyspark.sql import types as T

from streamling.clickhouse.tables import ColumnInfo, select_expression, spark_field
from streamling.clickhouse.types import can_hold, ch_type
from streamling.core.markers import WIDE_DECIMAL_KEY
from streamling.errors import StreamlingError
from streamling.postgres.types import pg_type
from streamling.sql.functions.decimals import (
    DecimalArbAdd,
    DecimalArbMod,
    DecimalArbRescale,
    ToDecimalArb,
    ToDecimalArbFromString,
)
from streamling.sql.functions.wide_integers import (
    I256Div,
    I256Mod,
    I256Neg,
    I256Sub,
    ToI256,
    ToInt64,
    ToU256,
    U256Add,
    U256Div,
    U256Mul,
)
from streamling.sql.rewrite import SqlProgram
from tests.sql_functions import frame, query

MAX = 2**256 - 1
I_MIN, I_MAX = -(2**255), 2**255 - 1
WHERE = "SQL transform 'test'"


def row(spark, expressions: dict[str, str], source: DataFrame | None = None) -> dict[str, Any]:
    """Every expression evaluated on the one row of ``t``, in one Spark job."""
    sql = "SELECT " + ", ".join(f"{e} AS {name}" for name, e in expressions.items()) + " FROM t"
    (result,) = query(spark, sql, source).collect()
    return result.asDict()


def markers(df: DataFrame) -> dict[str, str | None]:
    return {f.name: (f.metadata or {}).get(WIDE_DECIMAL_KEY) for f in df.schema.fields}


def marked(spark, rows: list[tuple], fields: list[tuple[str, T.DataType, str | None]]) -> DataFrame:
    schema = T.StructType([T.StructField(n, t, True, {WIDE_DECIMAL_KEY: m} if m else {}) for n, t, m in fields])
    return spark.createDataFrame(rows, schema)


def run_error(spark, expression: str, source: DataFrame) -> str:
    with pytest.raises(Exception) as caught:
        query(spark, f"SELECT {expression} AS v FROM t", source).collect()
    return str(caught.value)


def render_error(sql: str, schema: T.StructType | None = None) -> str:
    with pytest.raises(StreamlingError) as caught:
        SqlProgram(sql, WHERE).render({"t": "v"}, schemas={"t": schema or T.StructType()})
    return str(caught.value)


def test_wide_integer_functions_and_the_originals_examples(spark) -> None:
    wei = frame(spark, [("2500000000000000000", str(MAX))], "wei string, top string")
    got = row(
        spark,
        {
            "eth": "u256_to_string(to_u256(wei) / to_u256('1000000000000000000'))",
            "add": "u256_add(to_u256(1), to_u256(2))",
            "cased": "U256_Add(U256(1), 2)",
            "sub": "u256_sub(to_u256(5), 3)",
            "mul": "u256_mul(to_u256(10), to_u256(3))",
            "div": "u256_div(to_u256(7), to_u256(2))",
            "mod": "u256_mod(to_u256(7), to_u256(2))",
            "edge": f"u256_add(to_u256('{MAX - 1}'), 1)",
            "hex": "u256_to_string(to_u256('0x10'))",
            "top": "u256_to_string(to_u256(top))",
            "iadd": "i256_add(to_i256(-5), 3)",
            "isub": "I256_Sub(i256(3), 5)",
            "imul": "i256_mul(to_i256(-4), 3)",
            "idiv": "i256_div(to_i256(-7), 2)",
            "imod": "i256_mod(to_i256(-7), 2)",
            "neg": "i256_neg(to_i256(5))",
            "abs": "i256_abs(to_i256(-5))",
            "itext": "i256_to_string(to_i256(-5))",
            "low": f"i256_to_string(to_i256('{I_MIN}'))",
            "int64": "to_int64(to_u256(42))",
            "int64_low": "To_Int64(to_i256('-9223372036854775808'))",
        },
        wei,
    )
    assert got == {
        "eth": "2",
        "add": "3",
        "cased": "3",
        "sub": "2",
        "mul": "30",
        "div": "3",
        "mod": "1",
        "edge": str(MAX),
        "hex": "16",
        "top": str(MAX),
        "iadd": "-2",
        "isub": "-2",
        "imul": "-12",
        "idiv": "-3",
        "imod": "-1",
        "neg": "-5",
        "abs": "5",
        "itext": "-5",
        "low": str(I_MIN),
        "int64": 42,
        "int64_low": -(2**63),
    }


def test_results_are_marked_and_text_is_not(spark) -> None:
    df = query(
        spark,
        "SELECT to_u256(x) AS u, u256_add(to_u256(x), 1) AS plus, to_i256(x) AS i, i256_neg(to_i256(x)) AS n, "
        "u256_to_string(to_u256(x)) AS text, to_decimal_arb(x, 100, 4) AS d, "
        "decimal_arb_div(to_decimal_arb(x, 100, 4), to_decimal_arb(3, 10, 0)) AS q, "
        "to_decimal_arb_from_string('5', 78, 0, 'u256') AS native, to_int64(to_u256(x)) AS small FROM t",
    )
    assert markers(df) == {
        "u": "u256",
        "plus": "u256",
        "i": "i256",
        "n": "i256",
        "text": None,
        "d": "decimal(100,4)",
        "q": "decimal(114,18)",
        "native": "u256",
        "small": None,
    }
    assert df.collect()[0].asDict() == {
        "u": "1",
        "plus": "2",
        "i": "1",
        "n": "-1",
        "text": "1",
        "d": "1.0000",
        "q": "0.333333333333333333",
        "native": "5",
        "small": 1,
    }


def test_null_in_null_out(spark) -> None:
    source = frame(spark, [(None, None)], "s string, n bigint")
    got = row(
        spark,
        {
            "u": "to_u256(s)",
            "add": "u256_add(to_u256(s), 1)",
            "iadd": "i256_add(1, to_i256(n))",
            "neg": "i256_neg(to_i256(s))",
            "text": "u256_to_string(to_u256(s))",
            "int64": "to_int64(to_u256(s))",
            "d": "to_decimal_arb(s, 10, 2)",
            "dadd": "decimal_arb_add(to_decimal_arb(s, 10, 2), 1)",
            "deq": "decimal_arb_eq(to_decimal_arb(s, 10, 2), 1)",
            "greatest": "decimal_arb_greatest(to_decimal_arb(s, 10, 2), NULL, to_decimal_arb('1.5', 10, 1))",
            "all_null": "decimal_arb_least(to_decimal_arb(s, 10, 2), NULL)",
            "dtext": "decimal_arb_to_string(to_decimal_arb(s, 10, 2))",
            "rescaled": "decimal_arb_rescale(to_decimal_arb(s, 10, 2), 20, 4)",
        },
        source,
    )
    assert got == {name: None for name in got} | {"greatest": "1.50"}


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("u256_sub(to_u256(a), to_u256(b))", "SQL function u256_sub: 1 - 2 = -1 is out of range for u256 (0 to "),
        ("to_u256(n)", "SQL function to_u256: '-1' is out of range for u256 (0 to "),
        ("decimal_arb_div(to_decimal_arb(f, 10, 1), to_decimal_arb(z, 10, 0))", "decimal_arb_div: division by zero"),
    ],
)
def test_a_bad_value_fails_the_query_naming_the_function_and_value(spark, expression: str, message: str) -> None:
    source = frame(spark, [("1", "2", "0", "-1", "1.5")], "a string, b string, z string, n string, f string")
    assert message in run_error(spark, expression, source)


def strings(*values: str | None) -> pa.Array:
    return pa.array(values, pa.string())


@pytest.mark.parametrize(
    ("function", "args", "message"),
    [
        (U256Add, [strings(str(MAX)), strings("1")], f"u256_add: {MAX} + 1 = {MAX + 1} is out of range for u256"),
        (U256Mul, [strings(str(2**128)), strings(str(2**128))], "u256_mul: 3402823669209384634633746074317682114"),
        (U256Div, [strings("1", "2"), strings("3", "0")], "u256_div: division by zero (2 / 0)"),
        (U256Add, [strings("-5"), strings("1")], f"u256_add: '-5' is not a u256 (0 to {MAX})"),
        (I256Mod, [strings("1"), strings("0")], "i256_mod: division by zero (1 % 0)"),
        (I256Div, [strings(str(I_MIN)), strings("-1")], f"i256_div: {I_MIN} / -1 = {-I_MIN} is out of range"),
        (I256Neg, [strings(str(I_MIN))], f"i256_neg: i256_neg({I_MIN}) = {-I_MIN} is out of range for i256"),
        (I256Sub, [strings(str(I_MIN)), strings("1")], f"i256_sub: {I_MIN} - 1 = {I_MIN - 1} is out of range"),
        (ToU256, [strings("1.5")], "to_u256: '1.5' is not an integer"),
        (ToI256, [strings(str(2**255))], f"to_i256: '{2**255}' is out of range for i256"),
        (ToInt64, [strings(str(MAX))], f"to_int64: {MAX} is out of range for bigint"),
        (ToInt64, [strings("abc")], "to_int64: 'abc' is not an integer"),
        (DecimalArbMod, [strings("1.5"), strings("0.00")], "decimal_arb_mod: division by zero (1.5 % 0.00)"),
        (DecimalArbAdd, [strings("x"), strings("1")], "decimal_arb_add: 'x' is not a decimal number"),
        (ToDecimalArb, [strings("1.55"), pa.array([10]), pa.array([1])], "'1.55' has more than 1 fractional digits"),
        (ToDecimalArb, [strings(str(MAX)), pa.array([10]), pa.array([0])], f"'{MAX}' does not fit decimal(10,0)"),
        (ToDecimalArbFromString, [strings("1.5"), pa.array([2]), pa.array([2])], "'1.5' does not fit decimal(2,2)"),
        (
            ToDecimalArbFromString,
            [strings("-1"), pa.array([78]), pa.array([0]), strings("u256")],
            "to_decimal_arb_from_string: '-1' is out of range for u256",
        ),
        (DecimalArbRescale, [strings("1.25"), pa.array([10]), pa.array([1])], "'1.25' has more than 1 fractional"),
    ],
)
def test_bad_values_name_the_function_and_value(function: type, args: list[pa.Array], message: str) -> None:
    with pytest.raises(StreamlingError) as caught:
        function()(*args)
    assert message in str(caught.value) and str(caught.value).startswith(f"SQL function {function.name}: ")


def test_decimal_functions(spark) -> None:
    got = row(
        spark,
        {
            "conv": "decimal_arb_to_string(to_decimal_arb('123.45', 100, 4))",
            "from_string": "to_decimal_arb_from_string('123.45', 100, 2)",
            "try_bad": "try_to_decimal_arb_from_string('bad', 100, 2)",
            "try_wide": "try_to_decimal_arb_from_string('123.45', 4, 2)",
            "try_ok": "Try_To_Decimal_Arb_From_String(' -0.5 ', 10, 3)",
            "from_int": "to_decimal_arb_from_int(123, 100, 2)",
            "from_decimal": "to_decimal_arb(CAST(12.5 AS DECIMAL(10, 2)), 20, 3)",
            "trailing_zeros": "to_decimal_arb('1.500', 10, 2)",
            "add": "decimal_arb_add(to_decimal_arb('1.5', 10, 1), to_decimal_arb('2.25', 10, 2))",
            "sub": "decimal_arb_sub(to_decimal_arb('1.5', 10, 1), to_decimal_arb('2.25', 10, 2))",
            "mul": "decimal_arb_mul(to_decimal_arb('1.5', 10, 1), to_decimal_arb('2.25', 10, 2))",
            "div": "decimal_arb_div(to_decimal_arb(2, 10, 0), to_decimal_arb(3, 10, 0))",
            "half_even_down": "decimal_arb_div(to_decimal_arb(1, 10, 0), to_decimal_arb('2000000000000000000', 30, 0))",
            "half_even_up": "decimal_arb_div(to_decimal_arb(3, 10, 0), to_decimal_arb('2000000000000000000', 30, 0))",
            "div_scale": "decimal_arb_div(to_decimal_arb(1, 30, 20), to_decimal_arb(8, 10, 0))",
            "mod": "decimal_arb_mod(to_decimal_arb('7.5', 10, 1), to_decimal_arb(2, 10, 0))",
            "mod_negative": "decimal_arb_mod(to_decimal_arb('-7.5', 10, 1), to_decimal_arb(2, 10, 0))",
            "neg": "decimal_arb_neg(to_decimal_arb('1.50', 10, 2))",
            "neg_zero": "decimal_arb_neg(to_decimal_arb(0, 10, 2))",
            "abs": "decimal_arb_abs(to_decimal_arb('-1.50', 10, 2))",
            "eq": "decimal_arb_eq(to_decimal_arb('1.50', 10, 2), to_decimal_arb('1.5', 10, 1))",
            "neq": "decimal_arb_neq(to_decimal_arb('1.50', 10, 2), to_decimal_arb('1.5', 10, 1))",
            "lt": "decimal_arb_lt(to_decimal_arb('-2', 10, 0), to_decimal_arb('1.5', 10, 1))",
            "lte": "decimal_arb_lte(to_decimal_arb('1.5', 10, 1), 1.5)",
            "gt": "decimal_arb_gt(to_decimal_arb('10', 10, 0), to_decimal_arb('9.99', 10, 2))",
            "gte": "DECIMAL_ARB_GTE(to_decimal_arb('1', 10, 0), 2)",
            "greatest": "decimal_arb_greatest(to_decimal_arb('1.5', 10, 1), to_decimal_arb(2, 10, 0), NULL)",
            "least": "decimal_arb_least(to_decimal_arb('1.5', 10, 1), to_decimal_arb(2, 10, 0))",
            "rescale": "decimal_arb_to_string(decimal_arb_rescale(to_decimal_arb('1.5', 10, 1), 100, 4))",
            "rescale_down": "decimal_arb_rescale(to_decimal_arb('1.500', 10, 3), 10, 1)",
            "wide": "decimal_arb_mul(to_decimal_arb(repeat('9', 60), 60, 0), to_decimal_arb(repeat('9', 60), 60, 0))",
        },
    )
    assert got == {
        "conv": "123.4500",
        "from_string": "123.45",
        "try_bad": None,
        "try_wide": None,
        "try_ok": "-0.500",
        "from_int": "123.00",
        "from_decimal": "12.500",
        "trailing_zeros": "1.50",
        "add": "3.75",
        "sub": "-0.75",
        "mul": "3.375",
        "div": "0.666666666666666667",
        "half_even_down": "0.000000000000000000",
        "half_even_up": "0.000000000000000002",
        "div_scale": "0.12500000000000000000",
        "mod": "1.5",
        "mod_negative": "-1.5",
        "neg": "-1.50",
        "neg_zero": "0.00",
        "abs": "1.50",
        "eq": True,
        "neq": False,
        "lt": True,
        "lte": True,
        "gt": True,
        "gte": False,
        "greatest": "2.0",
        "least": "1.5",
        "rescale": "1.5000",
        "rescale_down": "1.5",
        "wide": str((10**60 - 1) ** 2),
    }


def test_operators_on_marked_input_columns_become_exact_functions(spark) -> None:
    """As the original: once a column is u256, i256 or decimal(p,s) (an Avro decimal(78,0), a ClickHouse UInt256,
    an upstream to_u256), operators, comparisons, BETWEEN, IN and CAST(… AS TEXT) on it are exact."""
    big = MAX - 5
    source = marked(
        spark,
        [(3, str(big), "-7", "1.2500", str(10**70))],
        [
            ("id", T.LongType(), None),
            ("wei", T.StringType(), "u256"),
            ("delta", T.StringType(), "i256"),
            ("price", T.StringType(), "decimal(20,4)"),
            ("amount", T.StringType(), "decimal(78,0)"),
        ],
    )
    df = query(
        spark,
        """
        SELECT wei + 5 AS plus, wei / 2 AS half, (wei - 1) % 1000 AS rem, wei * 1 AS same, to_u256(id) * id AS sq,
               delta - 10 AS lower, -delta AS flipped, coalesce(delta, 0) AS kept, price * 2 AS twice,
               price / 3 AS third, price + id AS shifted, amount / to_u256('1000') AS milli, amount + 1 AS next,
               CAST(wei AS TEXT) AS text, wei AS passed,
               wei = '115792089237316195423570985008687907853269984665640564039457584007913129639930' AS eq,
               wei > 99 AS gt, wei <> 1 AS ne, price = 1.25 AS peq, price < 1.3 AS plt, delta >= -7 AS dge,
               wei BETWEEN 1 AND 2 AS btw, delta IN (1, -7) AS inn, price NOT IN (1.25) AS nin
        FROM t WHERE wei > 1000000 AND price BETWEEN 1 AND 2
        """,
        source,
    )
    assert df.collect()[0].asDict() == {
        "plus": str(MAX),
        "half": str(big // 2),
        "rem": str((big - 1) % 1000),
        "same": str(big),
        "sq": "9",
        "lower": "-17",
        "flipped": "7",
        "kept": "-7",
        "twice": "2.5000",
        "third": "0.416666666666666667",
        "shifted": "4.2500",
        "milli": str(10**67),
        "next": str(10**70 + 1),
        "text": str(big),
        "passed": str(big),
        "eq": True,
        "gt": True,
        "ne": True,
        "peq": True,
        "plt": True,
        "dge": True,
        "btw": False,
        "inn": True,
        "nin": False,
    }
    got = markers(df)
    assert {k: got[k] for k in ("plus", "half", "sq", "lower", "kept", "twice", "third", "milli", "next")} == {
        "plus": "u256",
        "half": "u256",
        "sq": "u256",
        "lower": "i256",
        "kept": "i256",
        "twice": "decimal(22,4)",
        "third": "decimal(34,18)",
        "milli": "u256",
        "next": "decimal(79,0)",
    }
    assert got["text"] is None and got["passed"] == "u256" and got["eq"] is None


def test_columns_resolve_through_ctes_and_subqueries(spark) -> None:
    source = frame(spark, [(str(MAX // 2),)], "s string")
    df = query(
        spark,
        "WITH c AS (SELECT to_u256(s) AS w, s FROM t) "
        "SELECT w * 2 AS doubled, w AS kept, s FROM (SELECT * FROM c) q WHERE w > 1 "
        "UNION ALL SELECT to_u256(1), to_u256(2), 'x' FROM t",
        source,
    )
    assert [r.asDict() for r in df.collect()] == [
        {"doubled": str(MAX - 1), "kept": str(MAX // 2), "s": str(MAX // 2)},
        {"doubled": "1", "kept": "2", "s": "x"},
    ]
    assert markers(df) == {"doubled": "u256", "kept": "u256", "s": None}


def test_a_branch_not_taken_does_not_fail(spark) -> None:
    """Spark runs Python functions for every row, also in CASE/IF branches a row does not take; the original
    evaluates only the branch taken, so ``b - a`` must not underflow where ``b > a`` is false."""
    source = marked(
        spark, [("5", "3"), ("3", "5"), ("7", None)], [("a", T.StringType(), "u256"), ("b", T.StringType(), "u256")]
    )
    got = query(
        spark,
        "SELECT CASE WHEN b > a THEN b - a WHEN b IS NULL THEN a * 2 ELSE to_u256(0) END AS gain, "
        "IF(a > b, a - b, NULL) AS loss, CASE a WHEN '3' THEN u256_sub(b, a) END AS odd FROM t",
        source,
    )
    assert [r.asDict() for r in got.collect()] == [
        {"gain": "0", "loss": "2", "odd": None},
        {"gain": "2", "loss": None, "odd": "2"},
        {"gain": "14", "loss": None, "odd": None},
    ]
    assert markers(got) == {"gain": "u256", "loss": "u256", "odd": "u256"}


def test_rendered_sql_does_literal_work_once_and_compares_equal_text_in_spark() -> None:
    schema = T.StructType([T.StructField("wei", T.StringType(), True, {WIDE_DECIMAL_KEY: "u256"})])
    program = SqlProgram(
        "SELECT wei / to_u256('1000000000000000000') AS eth FROM t WHERE wei = 5 OR wei IN (1, 2)", WHERE
    )
    rendered = program.render({"t": "v"}, schemas={"t": schema})
    assert rendered == (
        "SELECT U256_DIV(wei, '1000000000000000000') AS eth, _gs_op FROM `v` AS `t` "
        "WHERE wei = '5' OR (wei = '1' OR wei = '2')"
    )
    assert program.output_types == {"eth": "u256"}
    assert program.called == ["to_u256", "u256_div"]


def test_case_and_coalesce_are_wide_only_when_every_branch_is() -> None:
    schema = T.StructType([T.StructField("wei", T.StringType(), True, {WIDE_DECIMAL_KEY: "u256"})])
    program = SqlProgram(
        "SELECT coalesce(wei, 0) AS zeroed, CASE WHEN wei IS NULL THEN 'n/a' ELSE wei END AS label, "
        "IF(wei > 5, wei, -1) AS signed FROM t",
        WHERE,
    )
    rendered = program.render({"t": "v"}, schemas={"t": schema})
    assert program.output_types == {"zeroed": "u256", "label": None, "signed": None}
    assert "COALESCE(wei, '0') AS zeroed" in rendered and "ELSE wei END AS label" in rendered


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        (
            "SELECT to_u256(s) + -1 AS x FROM t",
            "SQL function to_u256: '-1' is out of range for u256 (0 to ",
        ),
        ("SELECT to_u256(s) - to_i256(s) AS x FROM t", "mixes u256 and i256 values; convert one side with to_i256"),
        ("SELECT -to_u256(s) AS x FROM t", "a u256 cannot be negative; convert it with to_i256(…) first"),
        (
            "SELECT to_decimal_arb(s, n, 2) AS x FROM t",
            "function to_decimal_arb: precision and scale must be integer literals with 1 <= precision <= 65535 "
            "and 0 <= scale <= precision, got n, 2 in to_decimal_arb(s, n, 2)",
        ),
        ("SELECT decimal_arb_rescale(to_decimal_arb(s, 5, 2), 3, 4) AS x FROM t", "got 3, 4"),
        ("SELECT to_decimal_arb(s, 0, 0) AS x FROM t", "got 0, 0"),
        (
            "SELECT to_decimal_arb_from_string(s, 78, 0, 'u512') AS x FROM t",
            "native_int_kind must be the literal 'u256' or 'i256', got 'u512'",
        ),
        (
            "SELECT to_decimal_arb(s, 10, 2) + s AS x FROM t",
            "s is used with decimal_arb values in TO_DECIMAL_ARB(s, 10, 2) + s but is not an integer or decimal of "
            "known scale; convert it with to_decimal_arb(value, precision, scale)",
        ),
    ],
)
def test_bad_sql_fails_at_validate_naming_the_transform(sql: str, message: str) -> None:
    schema = T.StructType([T.StructField("s", T.StringType()), T.StructField("n", T.LongType())])
    text = render_error(sql, schema)
    assert text.startswith(f"{WHERE}: ") and message in text


def test_wrong_arity_names_the_signature() -> None:
    with pytest.raises(StreamlingError) as caught:
        _ = SqlProgram("SELECT u256_add(to_u256(x)) FROM t", WHERE).rewritten
    assert str(caught.value) == (
        f"{WHERE}: function u256_add takes 2 arguments — u256_add(left, right (u256; other integers are converted)) "
        "— got 1: u256_add(to_u256(x))"
    )


def test_sinks_and_the_clickhouse_source_map_the_markers() -> None:
    assert [
        pg_type(pa.string(), m) for m in ("u256", "i256", "decimal(78,0)", "decimal(100,4)", "decimal(1001,0)")
    ] == [
        "numeric(78,0)",
        "numeric(78,0)",
        "numeric(78,0)",
        "numeric(100,4)",
        "numeric",
    ]
    assert [ch_type(pa.string(), m) for m in ("u256", "i256", "decimal(76,4)", "decimal(78,0)")] == [
        "UInt256",
        "Int256",
        "Decimal(76, 4)",
        "String",
    ]
    assert can_hold("Nullable(String)", "Nullable(UInt256)") and can_hold("UInt256", "UInt256")
    assert not can_hold("Int256", "UInt256") and not can_hold("UInt128", "UInt256")
    assert spark_field(ColumnInfo("a", "UInt256")).metadata == {WIDE_DECIMAL_KEY: "u256"}
    assert spark_field(ColumnInfo("a", "Nullable(Int256)")).metadata == {WIDE_DECIMAL_KEY: "i256"}
    assert spark_field(ColumnInfo("a", "Decimal(60, 10)")).metadata == {WIDE_DECIMAL_KEY: "decimal(60,10)"}
    assert select_expression(ColumnInfo("a", "Decimal(60, 10)")) == "toDecimalString(`a`, 10) AS `a`"
