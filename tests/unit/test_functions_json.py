"""JSON functions: the original's documented examples, its text formats (serde_json for re-serialised JSON,
the document's own order for json_query, json_value's plain numbers), NULL handling, each on_error/on_empty
mode, the checks at --validate, and case-insensitive names in both SQL dialects."""

from __future__ import annotations

import re
from datetime import date, datetime
from decimal import Decimal

import pytest

from streamling.errors import StreamlingError, embedded_error
from streamling.sql.functions import json_functions
from streamling.sql.rewrite import SqlProgram
from tests.sql_functions import frame, query, values

WHERE = "SQL transform 'test'"


def row(spark, *expressions: str, source=None) -> tuple:
    """All `expressions` evaluated in one query over a one-row input."""
    select = ", ".join(f"{e} AS c{i}" for i, e in enumerate(expressions))
    (result,) = query(spark, f"SELECT {select} FROM t", source).collect()
    return tuple(result)


def texts(spark, expression: str, *inputs: str | None) -> list:
    """`expression` over a column ``j`` holding each of `inputs` (no SQL escaping to get wrong)."""
    return values(spark, expression, frame(spark, [(i, s) for i, s in enumerate(inputs)], "i int, j string"))


def columns(spark, expressions: list[str], *inputs: str | None) -> list[list]:
    """Each of `expressions` over a column ``j`` holding each of `inputs`, in one query."""
    select = ", ".join(f"{e} AS c{n}" for n, e in enumerate(expressions))
    source = frame(spark, [(i, s) for i, s in enumerate(inputs)], "i int, j string")
    rows = query(spark, f"SELECT i, {select} FROM t", source).orderBy("i").collect()
    return [[r[n + 1] for r in rows] for n in range(len(expressions))]


def epoch_error(spark, expression: str, *inputs: str | None) -> str:
    with pytest.raises(Exception) as caught:
        texts(spark, expression, *inputs)
    found = embedded_error(caught.value)
    assert found is not None and found.user_facing, str(caught.value)[:2000]
    return found.message


def validate_error(sql: str) -> str:
    with pytest.raises(StreamlingError) as caught:
        _ = SqlProgram(sql, WHERE).rewritten
    assert caught.value.user_facing
    return caught.value.message


def test_the_originals_documented_examples(spark) -> None:
    assert row(
        spark,
        "json_quote('value')",
        """json_exists('{"a":1}', '$.a')""",
        """json_query('{"a":{"b":[1,2]}}', '$.a')""",
        """json_value('{"a":null}', '$.a', 'STRING', 'DEFAULT', 'missing', 'NULL', NULL)""",
        """json('{"a": 1}')""",
        """json_unquote('"value"')""",
        """json_query('{"a":[1,2]}', '$.a')""",
        """json_query('{"a":1}', '$.a')""",
        """json_query('{"a":{"b":1}}', '$.a', 'STRING', 'WITH CONDITIONAL ARRAY', 'NULL', 'NULL')""",
        "json_query('1', '$', 'STRING', 'WITH CONDITIONAL ARRAY', 'NULL', 'NULL')",
        "json_query('[1,2]', '$', 'STRING', 'WITH UNCONDITIONAL ARRAY', 'NULL', 'NULL')",
        "json_query('{}', '$.missing', 'STRING', 'WITHOUT ARRAY', 'EMPTY OBJECT', 'NULL')",
        "json_query('not-json', '$.a', 'STRING', 'WITHOUT ARRAY', 'NULL', 'EMPTY ARRAY')",
        "json_value('not-json', '$.a', 'STRING', 'NULL', NULL, 'DEFAULT', 'oops')",
        "json_exists('not json', '$.a', 'UNKNOWN')",
    ) == (
        '"value"',
        True,
        '{"b":[1,2]}',
        "missing",
        '{"a":1}',
        "value",
        "[1,2]",
        None,
        '[{"b":1}]',
        "[1]",
        "[[1,2]]",
        "{}",
        "[]",
        "oops",
        None,
    )


def test_the_reference_tables_examples_hold(spark) -> None:
    """Each function's example in the reference table (docs/transforms.md) that shows its result (``-- result``) gives that result."""
    examples = [c.example.removeprefix("SELECT ").split(" -- ") for c in json_functions.ARROW_FUNCTIONS]
    shown = [pair for pair in examples if len(pair) == 2]
    assert len(shown) >= 12
    got = row(spark, *(e for pair in shown for e in pair))
    assert [(expression, got[2 * n]) for n, (expression, _) in enumerate(shown)] == [
        (expression, got[2 * n + 1]) for n, (expression, _) in enumerate(shown)
    ]


def test_json_quote_escapes_as_the_original(spark) -> None:
    assert texts(spark, "json_quote(j)", 'foo"bar', "foo/bar", "line\nbreak", "é", "a\\b\t\x01😀", None) == [
        '"foo\\"bar"',
        '"foo\\/bar"',
        '"line\\nbreak"',
        '"\\u00e9"',
        '"a\\\\b\\t\x01\\u1f600"',
        None,
    ]


def test_json_unquote_leaves_anything_but_a_string_literal_alone(spark) -> None:
    assert texts(spark, "json_unquote(j)", '"a\\/b\\u00e9"', '"x', '"a" "b"', "plain", '"bad\\q"', None) == [
        "a/bé",
        '"x',
        '"a" "b"',
        "plain",
        '"bad\\q"',
        None,
    ]


def test_json_and_parse_json_reserialise_as_serde_json(spark) -> None:
    document = '{"b": [1.0, 1e3, 1.50, 1e16, 1e-7, 0.00001, 12345678901234567890123, "1e5"], "a": {"z": 1, "y": -0.0}}'
    expected = '{"a":{"y":-0.0,"z":1},"b":[1.0,1000.0,1.5,1e+16,1e-7,0.00001,1.2345678901234568e+22,"1e5"]}'
    names = ["json", "parse_json", "try_parse_json", "JSON", "Parse_Json"]
    got = columns(spark, [f"{name}(j)" for name in names], document, '  {"k": "é/\\u0001"}  ', "  ", "", None)
    assert got == [[expected, '{"k":"é/\\u0001"}', None, None, None]] * len(names)
    assert texts(spark, "parse_json(j, true)", '{"a":1,"a":2}') == ['{"a":2}']


@pytest.mark.parametrize("name", ["json", "parse_json"])
def test_invalid_json_fails_the_epoch_naming_the_value(spark, name: str) -> None:
    message = epoch_error(spark, f"{name}(j)", '{"a": }')
    assert message.startswith(f"SQL function {name}: invalid JSON '{{\"a\": }}': ")


def test_try_parse_json_gives_null_for_invalid_json(spark) -> None:
    assert texts(spark, "try_parse_json(j)", "{bad", "1e400", '"\\ud800"', "[1]") == [None, None, None, "[1]"]


def test_is_json_by_type(spark) -> None:
    inputs = ('{"a":1}', "[1]", "1", '"s"', "null", "not json", "", None)
    kinds = ("", ", 'VALUE'", ", 'object'", ", 'ARRAY'", ", 'Scalar'")
    assert columns(spark, [f"is_json(j{kind})" for kind in kinds], *inputs) == [
        [True, True, True, True, True, False, False, False],
        [True, True, True, True, True, False, False, False],
        [True, False, False, False, False, False, False, False],
        [False, True, False, False, False, False, False, False],
        [False, False, True, True, True, False, False, False],
    ]


def test_json_exists_follows_the_path(spark) -> None:
    document = '{"a": {"b c": [10, null]}, "d": null}'
    paths = ["$", "$.a", "$.a['b c']", '$.a["b c"][0]', "$.a['b c'][1]", "$.a['b c'][2]", "$.d", "$.x", "$.a.x"]
    calls = (f"json_exists(j, '{p}')".replace("['", "[''").replace("']", "'']") for p in paths)
    assert list(row(spark, *calls, source=frame(spark, [(document,)], "j string"))) == [
        True,
        True,
        True,
        True,
        False,
        False,
        False,
        False,
        False,
    ]


def test_json_exists_on_error_modes(spark) -> None:
    modes = ("", ", 'FALSE'", ", 'true'", ", 'UNKNOWN'")
    assert columns(spark, [f"json_exists(j, '$.a'{mode})" for mode in modes], "not json", '{"a":1}', None) == [
        [False, True, None],
        [False, True, None],
        [True, True, None],
        [None, True, None],
    ]
    assert (
        epoch_error(spark, "json_exists(j, '$.a', 'ERROR')", "not json")
        == "SQL function json_exists: invalid JSON $['a'] in 'not json' (on_error ERROR)"
    )


def test_json_value_scalars_as_the_original_writes_them(spark) -> None:
    document = (
        '{"s": "a\\"b", "i": 10, "f": 1.0, "e": 1e3, "g": 1.5e-7, "h": 0.30000000000000004, "z": -0.0,'
        ' "t": true, "n": null, "o": {"x": 1}, "l": [1, 2], "u": 18446744073709551615}'
    )
    paths = ["s", "i", "f", "e", "g", "h", "z", "t", "n", "o", "l", "u", "missing"]
    got = row(spark, *(f"json_value(j, '$.{p}')" for p in paths), source=frame(spark, [(document,)], "j string"))
    assert got == (
        'a"b',
        "10",
        "1",
        "1000",
        "0.00000015",
        "0.30000000000000004",
        "-0",
        "true",
        None,
        None,
        None,
        "18446744073709551615",
        None,
    )


def test_json_value_on_empty_and_on_error_modes(spark) -> None:
    call = "json_value(j, '$.a', 'STRING', {}, {})"
    inputs = ('{"a": "x"}', '{"a": [1]}', "{}", "not json", None)
    assert texts(spark, call.format("'DEFAULT', 'empty'", "'DEFAULT', 'bad'"), *inputs) == [
        "x",
        "empty",
        "empty",
        "bad",
        None,
    ]
    assert texts(spark, call.format("'null', NULL", "'Null', NULL"), *inputs) == ["x", None, None, None, None]
    assert (
        epoch_error(spark, call.format("'ERROR', NULL", "'NULL', NULL"), '{"a": {"b": 1}}')
        == """SQL function json_value: no scalar at the path $['a'] in '{"a": {"b": 1}}' (on_empty ERROR)"""
    )
    assert (
        epoch_error(spark, call.format("'NULL', NULL", "'ERROR', NULL"), "not json")
        == "SQL function json_value: invalid JSON $['a'] in 'not json' (on_error ERROR)"
    )


def test_json_query_wrappers_and_modes(spark) -> None:
    document = '{"o": {"z": 1.0, "a": [1e16, "x/y"]}, "s": "x/é", "n": 2.0, "l": [1], "null": null}'
    source = frame(spark, [(document,)], "j string")
    wrappers = ["WITHOUT ARRAY", "WITH CONDITIONAL ARRAY", "with unconditional array wrapper"]
    got = row(
        spark,
        *(f"json_query(j, '$.{p}', 'STRING', '{w}', 'NULL', 'NULL')" for w in wrappers for p in ("o", "s", "n", "l")),
        source=source,
    )
    assert got == (
        '{"z":1.0,"a":[1e16,"x/y"]}',
        None,
        None,
        "[1]",
        '[{"z":1.0,"a":[1e16,"x/y"]}]',
        '["x\\/\\u00e9"]',
        "[2]",
        "[1]",
        '[{"z":1.0,"a":[1e16,"x/y"]}]',
        '["x\\/\\u00e9"]',
        "[2]",
        "[[1]]",
    )
    assert row(
        spark,
        "json_query(j, '$.null', 'ARRAY', 'WITHOUT ARRAY', 'EMPTY ARRAY', 'ERROR')",
        "json_query(j, '$.missing', 'VARCHAR', 'WITHOUT ARRAY', 'EMPTY OBJECT', 'NULL')",
        source=source,
    ) == ("[]", "{}")
    assert texts(spark, "json_query(j, '$')", "not json", None) == [None, None]
    assert (
        epoch_error(spark, "json_query(j, '$.a', 'STRING', 'WITHOUT ARRAY', 'ERROR', 'NULL')", '{"a": 1}')
        == """SQL function json_query: no object or array at the path $['a'] in '{"a": 1}' (on_empty ERROR)"""
    )
    assert (
        epoch_error(spark, "json_query(j, '$.a', 'STRING', 'WITHOUT ARRAY', 'NULL', 'ERROR')", "[")
        == "SQL function json_query: invalid JSON $['a'] in '[' (on_error ERROR)"
    )


def test_paths_from_a_column_and_null_paths(spark) -> None:
    source = frame(spark, [('{"a": 1, "b": 2}', "$.b"), ('{"a": 1}', None)], "j string, p string")
    assert values(spark, "json_value(j, p)", source) == ["2", None]
    assert values(spark, "json_exists(j, p)", source) == [True, None]
    bad = frame(spark, [('{"a": 1}', "$.a"), ('{"a": 1}', "$a")], "j string, p string")
    with pytest.raises(Exception) as caught:
        values(spark, "json_value(j, p)", bad)
    found = embedded_error(caught.value)
    assert found is not None
    assert found.message == "SQL function json_value: invalid JSON path '$a': unexpected 'a' at position 2"


def test_json_array_and_object_over_spark_values(spark) -> None:
    source = frame(
        spark,
        [(1, 2.5, "x", '{"b": 1, "a": 2}', " [1, 2]", "{not json", None, Decimal("1.50"), b"\x00\xff", True)],
        "i bigint, d double, s string, o string, l string, bad string, n string, m decimal(10,2), b binary, t boolean",
    )
    assert row(
        spark,
        "json_array(i, d, s, o, l, bad, n, m, b, t)",
        "json_array_absent_on_null(i, n, s)",
        "json_object('i', i, 'n', n, 'o', o, 'b', b)",
        "json_object_absent_on_null('i', i, 'n', n)",
        "json_array(array(1, 2), named_struct('y', 1, 'x', array('a')), map('k', 1.0D), array(NULL, 'e'))",
        "json_object('z', 1, 'a', 2, 'z', 3)",
        "json_object(1, 'x', 2.5D, true)",
        "json_array()",
        "json_object()",
        "JSON_ARRAY(1)",
        "Json_Object('a', 1)",
        source=source,
    ) == (
        '[1,2.5,"x",{"a":2,"b":1},[1,2],"{not json",null,"1.50","AP8=",true]',
        '[1,"x"]',
        '{"b":"AP8=","i":1,"n":null,"o":{"a":2,"b":1}}',
        '{"i":1}',
        '[[1,2],{"x":["a"],"y":1},{"k":1.0},[null,"e"]]',
        '{"a":2,"z":3}',
        '{"1":"x","2.5":true}',
        "[]",
        "{}",
        "[1]",
        '{"a":1}',
    )


def test_json_object_null_key_fails_the_epoch(spark) -> None:
    assert epoch_error(spark, "json_object(j, 1)", "k", None) == "SQL function json_object: key (argument 1) is NULL"


def test_json_string_writes_any_value_as_json(spark) -> None:
    source = frame(
        spark,
        [
            (
                'a"/é',
                7,
                0.1,
                Decimal("1.50"),
                b"\x01\xab",
                datetime(2024, 1, 2, 3, 4, 5, 123000),
                date(2024, 1, 2),
                [1.0, None],
                {"b": 1, "a": 2},
            )
        ],
        "s string, i int, f float, m decimal(10,2), b binary, ts timestamp, d date, l array<double>,"
        " mp map<string,int>",
    )
    assert row(
        spark,
        *(f"json_string({c})" for c in ("s", "i", "f", "m", "b", "ts", "d", "l", "mp")),
        "json_string(named_struct('z', s, 'a', i))",
        "JSON_STRING(CAST(NULL AS STRING))",
        source=source,
    ) == (
        '"a\\"/é"',
        "7",
        "0.1",
        "1.5",
        '"01ab"',
        '"2024-01-02T03:04:05.123Z"',
        '"2024-01-02"',
        "[1.0,null]",
        '{"a":2,"b":1}',
        '{"a":7,"z":"a\\"/é"}',
        None,
    )


def test_json_array_writes_timestamps_and_dates_as_the_original(spark) -> None:
    source = frame(spark, [(datetime(1970, 1, 1, 0, 0, 1), date(1970, 1, 11))], "ts timestamp, d date")
    assert row(spark, "json_array(ts, d)", source=source) == ('["1000000 @UTC",10]',)


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        (
            "SELECT json_value(j, 'a') FROM t",
            "function json_value: invalid JSON path 'a': a path starts with '$' (paths: `$`, `.key`, `[n]`,"
            " `['key']`; an invalid path is an error) in json_value(j, 'a')",
        ),
        (
            "SELECT json_query(j, '$.a[x]') FROM t",
            "function json_query: invalid JSON path '$.a[x]': array index 'x' is not a number (paths: `$`, `.key`,"
            " `[n]`, `['key']`; an invalid path is an error) in json_query(j, '$.a[x]')",
        ),
        (
            "SELECT JSON_VALUE(j, '$.a', 'STRING') FROM t",
            "function json_value: takes 2 or 7 arguments (json, path[, returning, on_empty, empty_default,"
            " on_error, error_default]), got 3 in JSON_VALUE(j, '$.a', 'STRING')",
        ),
        (
            "SELECT json_value(j, '$.a', 'STRING', 'MAYBE', 'x', 'NULL', NULL) FROM t",
            "function json_value: on_empty must be one of 'NULL', 'ERROR', 'DEFAULT', not 'MAYBE'"
            " in json_value(j, '$.a', 'STRING', 'MAYBE', 'x', 'NULL', NULL)",
        ),
        (
            "SELECT json_value(j, '$.a', 'INT', 'NULL', NULL, 'NULL', NULL) FROM t",
            "function json_value: returning must be one of 'STRING', 'VARCHAR', 'CHAR', not 'INT'"
            " in json_value(j, '$.a', 'INT', 'NULL', NULL, 'NULL', NULL)",
        ),
        (
            "SELECT json_value(j, '$.a', 'STRING', 'DEFAULT', j, 'NULL', NULL) FROM t",
            "function json_value: empty_default must be a string literal or NULL"
            " in json_value(j, '$.a', 'STRING', 'DEFAULT', j, 'NULL', NULL)",
        ),
        (
            "SELECT json_query(j, '$.a', 'STRING', 'WITH ARRAY', 'NULL', 'NULL') FROM t",
            "function json_query: wrapper must be one of 'WITHOUT ARRAY', 'WITH CONDITIONAL ARRAY',"
            " 'WITH UNCONDITIONAL ARRAY', 'WITHOUT ARRAY WRAPPER', 'WITH CONDITIONAL ARRAY WRAPPER',"
            " 'WITH UNCONDITIONAL ARRAY WRAPPER', not 'WITH ARRAY'"
            " in json_query(j, '$.a', 'STRING', 'WITH ARRAY', 'NULL', 'NULL')",
        ),
        (
            "SELECT json_query(j, '$', 'ARRAY', 'WITHOUT ARRAY', 'EMPTY OBJECT', 'NULL') FROM t",
            "function json_query: RETURNING ARRAY does not allow 'EMPTY OBJECT' for on_empty or on_error"
            " in json_query(j, '$', 'ARRAY', 'WITHOUT ARRAY', 'EMPTY OBJECT', 'NULL')",
        ),
        (
            "SELECT json_exists(j, '$', on_error) FROM t",
            "function json_exists: on_error must be a string literal: one of 'FALSE', 'TRUE', 'UNKNOWN', 'ERROR'"
            " in json_exists(j, '$', on_error)",
        ),
        (
            "SELECT is_json(j, 'LIST') FROM t",
            "function is_json: type must be one of 'VALUE', 'OBJECT', 'ARRAY', 'SCALAR', not 'LIST'"
            " in is_json(j, 'LIST')",
        ),
        (
            "SELECT parse_json(j, 'yes') FROM t",
            "function parse_json: allow_duplicate_keys must be TRUE or FALSE (a literal; a repeated key keeps its"
            " last value) in parse_json(j, 'yes')",
        ),
        (
            "SELECT json_object('a', 1, 'b') FROM t",
            "function json_object: takes an even number of arguments (key, value, ...), got 3"
            " in json_object('a', 1, 'b')",
        ),
        (
            "SELECT json_quote(j, j) FROM t",
            "function json_quote takes 1 argument — json_quote(text) — got 2: json_quote(j, j)",
        ),
    ],
)
def test_bad_calls_fail_at_validate(sql: str, message: str) -> None:
    assert validate_error(sql) == f"{WHERE}: {message}"


def test_a_column_of_another_type_is_reported_at_validate(spark) -> None:
    from streamling.plugins import functions as plugin_functions

    sql = "SELECT json_value(i, '$.a') AS v FROM t"
    df = query(spark, sql, frame(spark, [(1,)], "i int"))
    registered = plugin_functions.register_all(spark, SqlProgram(sql, WHERE).called)
    assert plugin_functions.call_problems(df, registered) == [
        "function json_value: argument 1 must be string, got int (declared json_value(string, string[, string[,"
        " string[, string[, string[, string]]]]]) -> string)"
    ]


@pytest.mark.parametrize(
    "sql",
    [
        """SELECT json_object('a', 1) AS v FROM t""",
        """SELECT json_value(x::text, '$.a') AS v FROM t""",
        """SELECT JSON('{"a": 1}') AS v, Json_Value('{"a": 1}', '$.a') AS w FROM t""",
    ],
)
def test_the_originals_spellings_parse_as_catalogue_calls(sql: str) -> None:
    assert re.search(r"\b(JSON_OBJECT|JSON_VALUE|JSON)\(", SqlProgram(sql, WHERE).rewritten.sql(dialect="spark"))
