"""Every function of the original's SQL function catalogue (its generated reference of registered functions) and
of its decimal_arb UDF contract resolves here through the engine's SQL path, and exact values of the functions
added for it: ``decimal_arb_round``, the conversions to and from floats, ints, Arrow decimals and legacy wide
integers, ``decimal_arb_array_min``/``max``/``sort``, ``decimal_arb_restamp`` and the JSON aggregates."""

from __future__ import annotations

import logging
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import DataFrame
from pyspark.sql import types as T

from streamling.core.markers import WIDE_DECIMAL_KEY
from streamling.errors import StreamlingError
from streamling.sql.functions import calls, catalogue, decimals
from streamling.sql.rewrite import SqlProgram
from tests.sql_functions import frame, query

WHERE = "SQL transform 'test'"

CATALOGUE = """
now current_time current_date current_timestamp today
_gs_json_objects_to_clickhouse_tuples _gs_split_string_to_array _gs_generate_series _gs_zip_arrays array_enumerate
array_filter array_filter_first array_filter_in array_struct_field to_large_list _gs_xxhash _gs_keccak256
_gs_conv_base coalesce_meta json_string _gs_from_base58 _gs_hex_to_byte _gs_byte_to_hex reverse_bytes32
_gs_map_to_array_struct uuid7
decimal_arb_to_string decimal_arb_rescale decimal_arb_restamp decimal_arb_to_sort_key to_decimal_arb_from_string
try_to_decimal_arb_from_string to_decimal_arb_from_int legacy_wide_int_to_decimal_arb
decimal_arb_add decimal_arb_sub decimal_arb_mul decimal_arb_div decimal_arb_mod decimal_arb_neg decimal_arb_abs
decimal_arb_eq decimal_arb_neq decimal_arb_lt decimal_arb_lte decimal_arb_gt decimal_arb_gte
decimal_arb_greatest decimal_arb_least decimal_arb_array_min decimal_arb_array_max decimal_arb_array_sort
to_decimal_arb_from_decimal128 to_decimal_arb_from_decimal256 decimal_arb_to_decimal128 decimal_arb_to_decimal256
sum min max avg array_agg
dynamic_table_check
regexp_extract regexp_extract_all regexp_substr regexp_count regexp_instr regexp_replace locate instr bin elt
parse_url split split_index translate unhex url_encode url_decode
json_quote json_exists json_array json_array_absent_on_null json_object json_object_absent_on_null json
json_unquote json_query json_value parse_json try_parse_json is_json
json_arrayagg_null_on_null json_arrayagg_absent_on_null json_objectagg_null_on_null json_objectagg_absent_on_null
""".split()
"""The names of the original's generated SQL function reference (scalar, session, Flink-compatible string and
JSON functions, decimal-aware and JSON aggregates, and the aliases it names)."""

CONTRACT = """
decimal_arb_round to_decimal_arb_from_str to_decimal_arb_from_float decimal_arb_to_int64 decimal_arb_to_float64
""".split()
"""Names of the original's decimal_arb UDF contract that its reference does not list."""

AGGREGATES = {
    "sum": "sum(x)",
    "min": "min(x)",
    "max": "max(x)",
    "avg": "avg(x)",
    "array_agg": "array_agg(x)",
    "json_arrayagg_null_on_null": "json_arrayagg_null_on_null(x)",
    "json_arrayagg_absent_on_null": "json_arrayagg_absent_on_null(x)",
    "json_objectagg_null_on_null": "json_objectagg_null_on_null('k', x)",
    "json_objectagg_absent_on_null": "json_objectagg_absent_on_null('k', x)",
}
STRUCTS = "array(named_struct('kind', 'transfer', 'n', 1))"
ARB = "to_decimal_arb('1.5', 10, 1)"
ARBS = f"array({ARB}, to_decimal_arb('-2.5', 10, 1))"
SCALARS = {
    "now": "now()",
    "current_time": "current_time()",
    "current_date": "current_date()",
    "current_timestamp": "current_timestamp()",
    "today": "today()",
    "_gs_json_objects_to_clickhouse_tuples": "_gs_json_objects_to_clickhouse_tuples('[{\"p\":\"a\"}]', array('p'))",
    "_gs_split_string_to_array": "_gs_split_string_to_array('a-b', '-')",
    "_gs_generate_series": "_gs_generate_series(1, 5, 2)",
    "_gs_zip_arrays": "_gs_zip_arrays(array(1, 2), array('a', 'b'))",
    "array_enumerate": "array_enumerate(array('a', 'b'))",
    "array_filter": f"array_filter({STRUCTS}, 'kind', 'transfer')",
    "array_filter_first": f"array_filter_first({STRUCTS}, 'kind', 'transfer')",
    "array_filter_in": f"array_filter_in({STRUCTS}, 'kind', array('transfer', 'mint'))",
    "array_struct_field": f"array_struct_field({STRUCTS}, 'kind')",
    "to_large_list": "to_large_list(array(1, 2))",
    "_gs_xxhash": "_gs_xxhash('hello')",
    "_gs_keccak256": "_gs_keccak256('hello')",
    "_gs_conv_base": "_gs_conv_base('FF', '16', '10')",
    "coalesce_meta": "coalesce_meta(NULL, x)",
    "json_string": "json_string(x)",
    "_gs_from_base58": "_gs_from_base58('3yZe7d')",
    "_gs_hex_to_byte": "_gs_hex_to_byte('deadbeef')",
    "_gs_byte_to_hex": "_gs_byte_to_hex(_gs_hex_to_byte('deadbeef'))",
    "reverse_bytes32": "reverse_bytes32(_gs_hex_to_byte(repeat('ab', 32)))",
    "_gs_map_to_array_struct": "_gs_map_to_array_struct(map('a', 'b'))",
    "uuid7": "uuid7()",
    "decimal_arb_to_string": f"decimal_arb_to_string({ARB})",
    "decimal_arb_rescale": f"decimal_arb_rescale({ARB}, 100, 4)",
    "decimal_arb_restamp": f"decimal_arb_restamp(decimal_arb_to_string({ARB}), {ARB})",
    "decimal_arb_to_sort_key": f"decimal_arb_to_sort_key({ARB})",
    "to_decimal_arb_from_string": "to_decimal_arb_from_string('123.45', 100, 2)",
    "try_to_decimal_arb_from_string": "try_to_decimal_arb_from_string('123.45', 100, 2)",
    "to_decimal_arb_from_int": "to_decimal_arb_from_int(123, 100, 2)",
    "legacy_wide_int_to_decimal_arb": "legacy_wide_int_to_decimal_arb(to_u256('5'))",
    **{f"decimal_arb_{op}": f"decimal_arb_{op}({ARB}, {ARB})" for op in ("add", "sub", "mul", "div", "mod")},
    **{f"decimal_arb_{op}": f"decimal_arb_{op}({ARB})" for op in ("neg", "abs")},
    **{f"decimal_arb_{op}": f"decimal_arb_{op}({ARB}, {ARB})" for op in ("eq", "neq", "lt", "lte", "gt", "gte")},
    "decimal_arb_greatest": f"decimal_arb_greatest({ARB}, {ARB})",
    "decimal_arb_least": f"decimal_arb_least({ARB}, {ARB})",
    "decimal_arb_array_min": f"decimal_arb_array_min({ARBS})",
    "decimal_arb_array_max": f"decimal_arb_array_max({ARBS})",
    "decimal_arb_array_sort": f"decimal_arb_array_sort({ARBS}, 'DESC', 'NULLS LAST')",
    "to_decimal_arb_from_decimal128": "to_decimal_arb_from_decimal128(CAST(1.25 AS DECIMAL(10, 2)))",
    "to_decimal_arb_from_decimal256": "to_decimal_arb_from_decimal256(CAST(1.25 AS DECIMAL(10, 2)))",
    "decimal_arb_to_decimal128": f"decimal_arb_to_decimal128({ARB}, 38, 2)",
    "decimal_arb_to_decimal256": f"decimal_arb_to_decimal256({ARB}, 76, 2)",
    "regexp_extract": "regexp_extract('foothebar', 'foo(.*?)(bar)', 2)",
    "regexp_extract_all": "regexp_extract_all('100-200, 300-400', '(\\\\d+)-(\\\\d+)', 1)",
    "regexp_substr": "regexp_substr('100-200', '[0-9]+')",
    "regexp_count": "regexp_count('a.b.c', '\\\\.')",
    "regexp_instr": "regexp_instr('hello Hello', 'Hello')",
    "regexp_replace": "regexp_replace('hello Hello', 'Hello', 'Hi')",
    "locate": "locate('bar', 'foobarbar', 5)",
    "instr": "instr('foobarbar', 'bar', 1, 2)",
    "bin": "bin(42)",
    "elt": "elt(2, 'foo', 'bar')",
    "parse_url": "parse_url('http://example.com/p?q=1', 'QUERY', 'q')",
    "split": "split(',1,', ',')",
    "split_index": "split_index('a,b', ',', 1)",
    "translate": "translate('cat', 'at', 'o')",
    "unhex": "unhex('466C696E6B')",
    "url_encode": "url_encode('a+b/c')",
    "url_decode": "url_decode('foo+bar')",
    "json_quote": "json_quote('value')",
    "json_exists": "json_exists('{\"a\":1}', '$.a')",
    "json_array": "json_array(1, 'a')",
    "json_array_absent_on_null": "json_array_absent_on_null(1, NULL)",
    "json_object": "json_object('a', 1)",
    "json_object_absent_on_null": "json_object_absent_on_null('a', 1, 'b', NULL)",
    "json": "json('{\"a\": 1}')",
    "json_unquote": "json_unquote('\"value\"')",
    "json_query": "json_query('{\"a\":{\"b\":[1,2]}}', '$.a')",
    "json_value": "json_value('{\"a\":2}', '$.a')",
    "parse_json": "parse_json('{\"a\": 1}')",
    "try_parse_json": "try_parse_json('{')",
    "is_json": "is_json('{}', 'OBJECT')",
    "decimal_arb_round": f"decimal_arb_round({ARB}, 0)",
    "to_decimal_arb_from_str": "to_decimal_arb_from_str('1.5', 10, 1)",
    "to_decimal_arb_from_float": "to_decimal_arb_from_float(1.5, 10, 1)",
    "decimal_arb_to_int64": f"decimal_arb_to_int64({ARB})",
    "decimal_arb_to_float64": f"decimal_arb_to_float64({ARB})",
}
NULLABLE = {"try_parse_json", "coalesce_meta"}
"""Calls above whose value is NULL by design (invalid JSON; a bigint is not 32 bytes)."""


def row(spark, expressions: dict[str, str], source: DataFrame | None = None) -> dict[str, Any]:
    sql = "SELECT " + ", ".join(f"{e} AS {name}" for name, e in expressions.items()) + " FROM t"
    (result,) = query(spark, sql, source).collect()
    return result.asDict()


def run_error(spark, expression: str, source: DataFrame | None = None) -> str:
    with pytest.raises(Exception) as caught:
        query(spark, f"SELECT {expression} AS v FROM t", source).collect()
    return str(caught.value)


def validate_error(sql: str, schema: T.StructType | None = None) -> str:
    with pytest.raises(StreamlingError) as caught:
        SqlProgram(sql, WHERE).render({"t": "v"}, schemas={"t": schema or T.StructType()})
    return str(caught.value)


# -- every name resolves -----------------------------------------------------------------------------------


def test_the_lists_cover_every_name_once() -> None:
    names = CATALOGUE + CONTRACT
    assert len(names) == len(set(names)) == 101
    assert set(names) == set(SCALARS) | set(AGGREGATES) | {"dynamic_table_check"}


def test_every_scalar_of_the_original_runs_through_the_sql_path(spark) -> None:
    aliases = {name: f"c{i}" for i, name in enumerate(SCALARS)}
    got = row(spark, {aliases[name]: expression for name, expression in SCALARS.items()})
    nulls = sorted(name for name, alias in aliases.items() if got[alias] is None)
    assert nulls == sorted(n for n in NULLABLE if got[aliases[n]] is None)
    assert all(name in NULLABLE or got[alias] is not None for name, alias in aliases.items())


def test_every_aggregate_of_the_original_runs_through_the_sql_path(spark) -> None:
    sql = "SELECT " + ", ".join(f"{e} AS {name}" for name, e in AGGREGATES.items()) + " FROM t"
    (got,) = query(spark, sql).collect()
    assert got.asDict() == {
        "sum": 1,
        "min": 1,
        "max": 1,
        "avg": 1.0,
        "array_agg": [1],
        "json_arrayagg_null_on_null": "[1]",
        "json_arrayagg_absent_on_null": "[1]",
        "json_objectagg_null_on_null": '{"k":1}',
        "json_objectagg_absent_on_null": '{"k":1}',
    }


def test_dynamic_table_check_is_rewritten_to_the_tables_lookup() -> None:
    program = SqlProgram("SELECT dynamic_table_check('watch', x) AS hit FROM t", WHERE)
    assert program.dynamic_tables == ["watch"]
    assert "dynamic_table_check" in calls.SKIP
    rendered = program.render({"t": "v"}, checks={"watch": "lookup_watch"}, schemas={"t": T.StructType()})
    assert "lookup_watch(x)" in rendered.lower()


@pytest.mark.parametrize(
    "name", [n for n in CATALOGUE + CONTRACT if n not in AGGREGATES and n != "dynamic_table_check"]
)
def test_every_other_name_is_in_the_catalogue(name: str) -> None:
    assert catalogue.lookup(name) is not None


# -- decimal_arb_round -------------------------------------------------------------------------------------


def test_round_is_half_to_even_at_the_target_scale(spark) -> None:
    df = query(
        spark,
        "SELECT decimal_arb_round(to_decimal_arb('2.675', 10, 3), 2) AS a, "
        "decimal_arb_round(to_decimal_arb('0.125', 10, 3), 2) AS down, "
        "decimal_arb_round(to_decimal_arb('0.135', 10, 3), 2) AS up, "
        "decimal_arb_round(to_decimal_arb('-2.5', 10, 1), 0) AS neg_even, "
        "decimal_arb_round(to_decimal_arb('-3.5', 10, 1), 0) AS neg_odd, "
        "decimal_arb_round(to_decimal_arb('9.99', 3, 2), 1) AS carry, "
        "decimal_arb_round(to_decimal_arb('1.5', 10, 1), 3) AS wider, "
        "decimal_arb_round(to_decimal_arb('" + "9" * 80 + ".5', 100, 1), 0) AS big "
        "FROM t",
    )
    markers = {f.name: (f.metadata or {}).get(WIDE_DECIMAL_KEY) for f in df.schema.fields}
    assert markers == {
        "a": "decimal(10,2)",
        "down": "decimal(10,2)",
        "up": "decimal(10,2)",
        "neg_even": "decimal(10,0)",
        "neg_odd": "decimal(10,0)",
        "carry": "decimal(3,1)",
        "wider": "decimal(12,3)",
        "big": "decimal(100,0)",
    }
    (got,) = df.collect()
    assert got.asDict() == {
        "a": "2.68",
        "down": "0.12",
        "up": "0.14",
        "neg_even": "-2",
        "neg_odd": "-4",
        "carry": "10.0",
        "wider": "1.500",
        "big": "1" + "0" * 80,
    }


def test_round_of_a_column_and_nulls(spark) -> None:
    source = frame(spark, [("1.25",), (None,), ("-0.005",)], "a string")
    df = query(spark, "SELECT decimal_arb_round(a, 2) AS r, decimal_arb_round(a, 1) AS s FROM t", source)
    assert [(r.r, r.s) for r in df.collect()] == [("1.25", "1.2"), (None, None), ("0.00", "0.0")]


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        ("SELECT decimal_arb_round(a, -1) FROM t", "target_scale must be an integer literal from 0 to 65535, got -1"),
        ("SELECT decimal_arb_round(a, b) FROM t", "target_scale must be an integer literal"),
        ("SELECT decimal_arb_round(a) FROM t", "function decimal_arb_round takes 2 arguments"),
    ],
)
def test_round_checks_its_target_scale_at_validate(sql: str, message: str) -> None:
    assert message in validate_error(sql)


# -- conversions -------------------------------------------------------------------------------------------


def test_to_decimal_arb_from_str_is_from_string(spark) -> None:
    assert catalogue.lookup("to_decimal_arb_from_str") is catalogue.lookup("to_decimal_arb_from_string")
    df = query(spark, "SELECT to_decimal_arb_from_str('123.45', 100, 3) AS v FROM t")
    assert df.schema["v"].metadata[WIDE_DECIMAL_KEY] == "decimal(100,3)"
    assert df.collect()[0].v == "123.450"
    assert "'1.2.3' is not a decimal number" in run_error(spark, "to_decimal_arb_from_str('1.2.3', 10, 2)")


def test_from_decimal128_and_256_keep_the_decimals_type(spark) -> None:
    source = spark.createDataFrame(
        [(Decimal("-1.25"), "12345.678"), (None, None)],
        T.StructType(
            [
                T.StructField("d", T.DecimalType(10, 2)),
                T.StructField("w", T.StringType(), metadata={WIDE_DECIMAL_KEY: "decimal(70,3)"}),
            ]
        ),
    )
    df = query(
        spark,
        "SELECT to_decimal_arb_from_decimal128(d) AS a, to_decimal_arb_from_decimal256(d) AS b, "
        "to_decimal_arb_from_decimal256(w) AS c, to_decimal_arb_from_decimal128(d) + 1 AS plus, "
        "to_decimal_arb_from_decimal128(d, 20, 1) AS rounded, to_decimal_arb_from_decimal256(w, 76, 2) AS w2 FROM t",
        source,
    )
    markers = {f.name: (f.metadata or {}).get(WIDE_DECIMAL_KEY) for f in df.schema.fields}
    assert markers == {
        "a": "decimal(10,2)",
        "b": "decimal(10,2)",
        "c": "decimal(70,3)",
        "plus": "decimal(11,2)",
        "rounded": "decimal(20,1)",
        "w2": "decimal(76,2)",
    }
    assert [r.asDict() for r in df.collect()] == [
        {"a": "-1.25", "b": "-1.25", "c": "12345.678", "plus": "-0.25", "rounded": "-1.2", "w2": "12345.68"},
        {"a": None, "b": None, "c": None, "plus": None, "rounded": None, "w2": None},
    ]


def test_from_decimal_refuses_a_value_that_is_not_a_decimal_at_validate() -> None:
    schema = T.StructType(
        [
            T.StructField("s", T.StringType()),
            T.StructField("w", T.StringType(), metadata={WIDE_DECIMAL_KEY: "decimal(100,3)"}),
        ]
    )
    assert "function to_decimal_arb_from_decimal128 takes a decimal(p,s) with p ≤ 38, got s" in validate_error(
        "SELECT to_decimal_arb_from_decimal128(s) FROM t", schema
    )
    assert "to_decimal_arb_from_decimal256 takes a decimal(p,s) with p ≤ 76, got w" in validate_error(
        "SELECT to_decimal_arb_from_decimal256(w) FROM t", schema
    )


def test_from_decimal_with_a_declaration_fails_naming_a_value_that_does_not_fit(spark) -> None:
    source = spark.createDataFrame([(Decimal("999.99"),)], "d decimal(5,2)")
    message = run_error(spark, "to_decimal_arb_from_decimal128(d, 4, 1)", source)
    assert "to_decimal_arb_from_decimal128: 999.99 does not fit decimal(4,1)" in message


def test_from_float_rounds_its_shortest_text_half_to_even_and_warns_once_per_call_site(spark, caplog) -> None:
    source = frame(spark, [(0.125, 2.675), (0.1 + 0.2, -1e-7), (None, 1e20)], "f double, g double")
    decimals._WARNED.clear()
    with caplog.at_level(logging.WARNING, logger="streamling.sql"):
        df = query(
            spark,
            "SELECT to_decimal_arb_from_float(f, 10, 2) AS a, to_decimal_arb_from_float(g, 30, 3) AS b FROM t",
            source,
        )
        query(spark, "SELECT to_decimal_arb_from_float(f, 10, 2) AS a FROM t", source)
    warnings = [r.getMessage() for r in caplog.records if "to_decimal_arb_from_float" in r.getMessage()]
    assert len(warnings) == 2 and all("IEEE 754" in w for w in warnings)
    assert df.schema["a"].metadata[WIDE_DECIMAL_KEY] == "decimal(10,2)"
    # 2.675 is 2.67499999… in binary; its shortest text 2.675 rounds to 2.68 (as the original reads floats)
    assert [(r.a, r.b) for r in df.collect()] == [
        ("0.12", "2.675"),
        ("0.30", "0.000"),
        (None, "100000000000000000000.000"),
    ]


def test_from_float_fails_naming_a_value_that_does_not_fit_or_is_not_finite(spark) -> None:
    source = frame(spark, [(123.456, float("nan"))], "f double, n double")
    assert "to_decimal_arb_from_float: 123.456 does not fit decimal(4,2)" in run_error(
        spark, "to_decimal_arb_from_float(f, 4, 2)", source
    )
    assert "to_decimal_arb_from_float: nan is not a finite number" in run_error(
        spark, "to_decimal_arb_from_float(n, 4, 2)", source
    )


def test_to_int64_rounds_half_to_even_and_fails_naming_a_value_out_of_range(spark) -> None:
    source = frame(spark, [("2.5",), ("3.5",), ("-2.5",), ("9223372036854775807.4",), (None,)], "a string")
    df = query(spark, "SELECT decimal_arb_to_int64(a) AS v FROM t", source)
    assert df.schema["v"].dataType == T.LongType()
    assert [r.v for r in df.collect()] == [2, 4, -2, 2**63 - 1, None]
    big = frame(spark, [("9223372036854775807.5",)], "a string")
    assert (
        "decimal_arb_to_int64: 9223372036854775807.5 is out of range for bigint "
        "(-9223372036854775808 to 9223372036854775807)"
    ) in run_error(spark, "decimal_arb_to_int64(a)", big)
    assert row(spark, {"v": "decimal_arb_to_int64(to_decimal_arb('-7.50', 10, 2))"}) == {"v": -8}


def test_to_float64_is_the_nearest_double_and_warns_once(spark, caplog) -> None:
    source = frame(spark, [("0.1",), ("-123.456",), ("1" + "0" * 30,), (None,)], "a string")
    decimals._WARNED.clear()
    with caplog.at_level(logging.WARNING, logger="streamling.sql"):
        df = query(spark, "SELECT decimal_arb_to_float64(a) AS v FROM t", source)
        query(spark, "SELECT decimal_arb_to_float64(a) AS v FROM t", source)
    assert sum("decimal_arb_to_float64" in r.getMessage() for r in caplog.records) == 1
    assert df.schema["v"].dataType == T.DoubleType()
    assert [r.v for r in df.collect()] == [0.1, -123.456, 1e30, None]
    huge = frame(spark, [("1" + "0" * 400,)], "a string")
    assert "decimal_arb_to_float64: 1000000000000000000000000000000000000000 is out of range" in run_error(
        spark, "decimal_arb_to_float64(a)", huge
    )


def test_legacy_wide_int_to_decimal_arb(spark) -> None:
    df = query(
        spark,
        "SELECT legacy_wide_int_to_decimal_arb(to_u256('" + str(2**256 - 1) + "')) AS u, "
        "legacy_wide_int_to_decimal_arb(to_i256('-5')) AS i, legacy_wide_int_to_decimal_arb(NULL) AS n, "
        "legacy_wide_int_to_decimal_arb(to_i256('-5')) + 1 AS plus FROM t",
    )
    markers = {f.name: (f.metadata or {}).get(WIDE_DECIMAL_KEY) for f in df.schema.fields}
    assert markers == {"u": "decimal(78,0)", "i": "decimal(78,0)", "n": "decimal(78,0)", "plus": "decimal(79,0)"}
    assert df.collect()[0].asDict() == {"u": str(2**256 - 1), "i": "-5", "n": None, "plus": "-4"}
    bytes_source = frame(spark, [(b"\x01" * 32,)], "b binary")
    assert "untagged bytes are rejected" in run_error(spark, "legacy_wide_int_to_decimal_arb(b)", bytes_source)


# -- lists of decimal_arb ----------------------------------------------------------------------------------


def test_array_min_max_and_sort_compare_numbers_not_text(spark) -> None:
    element = T.StructField("xs", T.ArrayType(T.StringType()), metadata={WIDE_DECIMAL_KEY: "decimal(10,1)"})
    source = spark.createDataFrame(
        [(["9.5", "10.0", None, "-2.0", "-10.0"],), ([],), ([None],), (None,)], T.StructType([element])
    )
    df = query(
        spark,
        "SELECT decimal_arb_array_min(xs) AS lo, decimal_arb_array_max(xs) AS hi, decimal_arb_array_sort(xs) AS up, "
        "decimal_arb_array_sort(xs, 'DESC', 'NULLS LAST') AS down, decimal_arb_array_sort(xs, 'asc', 'nulls last') "
        "AS up_last FROM t",
        source,
    )
    assert (df.schema["lo"].metadata or {}).get(WIDE_DECIMAL_KEY) == "decimal(10,1)"
    assert [r.asDict() for r in df.collect()] == [
        {
            "lo": "-10.0",
            "hi": "10.0",
            "up": [None, "-10.0", "-2.0", "9.5", "10.0"],
            "down": ["10.0", "9.5", "-2.0", "-10.0", None],
            "up_last": ["-10.0", "-2.0", "9.5", "10.0", None],
        },
        {"lo": None, "hi": None, "up": [], "down": [], "up_last": []},
        {"lo": None, "hi": None, "up": [None], "down": [None], "up_last": [None]},
        {"lo": None, "hi": None, "up": None, "down": None, "up_last": None},
    ]


def test_array_functions_of_computed_decimal_arb_values(spark) -> None:
    got = row(
        spark,
        {
            "lo": f"decimal_arb_array_min({ARBS})",
            "hi": f"decimal_arb_array_max({ARBS})",
            "sorted": f"decimal_arb_array_sort({ARBS})",
        },
    )
    assert got == {"lo": "-2.5", "hi": "1.5", "sorted": ["-2.5", "1.5"]}


def test_array_sort_checks_its_words_at_validate() -> None:
    assert "order must be the literal 'ASC' or 'DESC', got 'UP'" in validate_error(
        "SELECT decimal_arb_array_sort(xs, 'UP') FROM t"
    )
    assert "nulls must be the literal 'NULLS FIRST' or 'NULLS LAST', got 'LAST'" in validate_error(
        "SELECT decimal_arb_array_sort(xs, 'ASC', 'LAST') FROM t"
    )


def test_array_min_of_malformed_text_fails_naming_it(spark) -> None:
    source = frame(spark, [(["1", "x"],)], "xs array<string>")
    assert "decimal_arb_array_min: 'x' is not a decimal number" in run_error(spark, "decimal_arb_array_min(xs)", source)


def test_restamp_gives_the_value_the_templates_type(spark) -> None:
    df = query(
        spark,
        f"SELECT decimal_arb_restamp(decimal_arb_to_string({ARB}), {ARB}) AS v, "
        f"decimal_arb_restamp(decimal_arb_to_string({ARB}), {ARB}) + 1 AS plus, "
        "decimal_arb_restamp(NULL, to_u256('1')) AS n FROM t",
    )
    markers = {f.name: (f.metadata or {}).get(WIDE_DECIMAL_KEY) for f in df.schema.fields}
    assert markers == {"v": "decimal(10,1)", "plus": "decimal(11,1)", "n": "u256"}
    assert df.collect()[0].asDict() == {"v": "1.5", "plus": "2.5", "n": None}


def test_restamp_run_as_a_function_passes_the_value_through() -> None:
    values = pa.array(["1.50", None])
    assert decimals.DecimalArbRestamp()(values, pa.array(["x", "y"])).to_pylist() == ["1.50", None]


# -- JSON aggregates ---------------------------------------------------------------------------------------


def test_json_aggregates_by_group(spark) -> None:
    source = frame(spark, [(1, "a", 1), (1, "b", None), (1, "c", 3), (2, "d", None)], "g int, k string, v int")
    df = query(
        spark,
        "SELECT g, json_arrayagg_null_on_null(v) AS an, json_arrayagg_absent_on_null(v) AS aa, "
        "json_objectagg_null_on_null(k, v) AS obn, json_objectagg_absent_on_null(k, v) AS oba FROM t GROUP BY g",
        source,
    )
    assert sorted((r.asDict() for r in df.collect()), key=lambda r: r["g"]) == [
        {"g": 1, "an": "[1,null,3]", "aa": "[1,3]", "obn": '{"a":1,"b":null,"c":3}', "oba": '{"a":1,"c":3}'},
        {"g": 2, "an": "[null]", "aa": "[]", "obn": '{"d":null}', "oba": "{}"},
    ]


def test_json_aggregates_of_an_empty_group_are_null(spark) -> None:
    source = frame(spark, [(1, "a")], "v int, k string")
    got = row(
        spark,
        {
            "an": "json_arrayagg_null_on_null(v)",
            "aa": "json_arrayagg_absent_on_null(v)",
            "obn": "json_objectagg_null_on_null(k, v)",
            "oba": "json_objectagg_absent_on_null(k, v)",
        },
        source.where("v > 5"),
    )
    assert got == {"an": None, "aa": None, "obn": None, "oba": None}


def test_json_objectagg_fails_on_a_null_or_repeated_key(spark) -> None:
    nulls = frame(spark, [(None, 1)], "k string, v int")
    assert "NULL_MAP_KEY" in run_error(spark, "json_objectagg_null_on_null(k, v)", nulls)
    twice = frame(spark, [("a", 1), ("a", 2)], "k string, v int")
    assert "DUPLICATED_MAP_KEY" in run_error(spark, "json_objectagg_absent_on_null(k, v)", twice)
