"""Arrays and maps: the original's documented results, NULL and bad input, run by Spark as a sql transform
runs them."""

from __future__ import annotations

import pytest
from pyspark.sql import Row

from streamling.errors import StreamlingError
from streamling.plugins import functions as plugin_functions
from streamling.sql.functions.arrays import KEEPS_FIRST_METADATA
from streamling.sql.rewrite import SqlProgram
from tests.sql_functions import evaluated, failure, frame, query, value, values

CHANGES = (
    "ARRAY(named_struct('kind', 'transfer', 'n', 1), named_struct('kind', 'mint', 'n', 2), NULL, "
    "named_struct('kind', 'transfer', 'n', 3), named_struct('kind', CAST(NULL AS STRING), 'n', 4))"
)


def transfer(n: int, kind: str | None = "transfer") -> Row:
    return Row(kind=kind, n=n)


SPLIT = [
    ("_gs_split_string_to_array('a-b', '-')", ["a", "b"]),
    ("_gs_split_string_to_array('1 2 34 5')", ["1", "2", "34", "5"]),
    ("_GS_Split_String_To_Array('1-2-5', '-')", ["1", "2", "5"]),
    ("_gs_split_string_by('a b', ' ')", ["a", "b"]),
    ("_gs_split_string_to_array('a.b|c', '.')", ["a", "b|c"]),  # a literal separator, not a pattern
    ("_gs_split_string_to_array('x\\\\Ey\\\\Ez', '\\\\E')", ["x", "y", "z"]),
    ("_gs_split_string_to_array(',a,,b,', ',')", ["", "a", "", "b", ""]),
    ("_gs_split_string_to_array('a b', NULL)", ["a", "b"]),
    ("_gs_split_string_to_array(NULL, '-')", None),
]


def test_split_string_to_array(spark) -> None:
    assert evaluated(spark, SPLIT) == SPLIT


def test_split_string_to_array_per_row_separators(spark) -> None:
    source = frame(spark, [("a-b", "-"), ("a+b+c", "+"), (None, "-")], "s string, sep string")
    assert values(spark, "_gs_split_string_to_array(s, sep)", source) == [["a", "b"], ["a", "b", "c"], None]


SERIES = [
    ("_gs_generate_series(1, 5, 2)", [1, 3, 5]),
    ("_gs_generate_series(1, 10)", list(range(1, 11))),
    ("_GS_GENERATE_SERIES(5, 1, -2)", [5, 3, 1]),
    ("_gs_generate_series(10, 1, 1)", []),  # a step away from stop; Spark's sequence alone would fail
    ("_gs_generate_series(1, 10, -1)", []),
    ("_gs_generate_series(3, 3)", [3]),
    ("_gs_generate_series(1, 3, NULL)", [1, 2, 3]),
    ("_gs_generate_series(NULL, 3)", None),
    ("_gs_generate_series(1, NULL, 1)", None),
]


def test_generate_series(spark) -> None:
    assert evaluated(spark, SERIES) == SERIES


def test_generate_series_step_zero_fails_naming_the_function(spark) -> None:
    assert "SQL function _gs_generate_series: step must not be 0 (start 1, stop 2)" in failure(
        spark, "_gs_generate_series(1, 2, 0)"
    )


def test_generate_series_from_columns(spark) -> None:
    source = frame(spark, [(1, 3, 1), (0, 10, 5), (3, 1, 1)], "a bigint, b bigint, s int")
    assert values(spark, "_gs_generate_series(a, b, s)", source) == [[1, 2, 3], [0, 5, 10], []]


ZIP = [
    ("_gs_zip_arrays(ARRAY[1, 2], ARRAY['a', 'b'])", [Row(f0=1, f1="a"), Row(f0=2, f1="b")]),
    ("zip_arrays(ARRAY[1], ARRAY['a'], ARRAY[true])", [Row(f0=1, f1="a", f2=True)]),
    ("Zip_Arrays(ARRAY[1], ARRAY[2], ARRAY[3], ARRAY[4])", [Row(f0=1, f1=2, f2=3, f3=4)]),
    ("zip_arrays(ARRAY[1, NULL], ARRAY['a', NULL])", [Row(f0=1, f1="a"), Row(f0=None, f1=None)]),
    ("zip_arrays(ARRAY[1, 2], CAST(NULL AS ARRAY<STRING>))", []),  # as the original: a NULL list zips to []
]


def test_zip_arrays(spark) -> None:
    assert evaluated(spark, ZIP) == ZIP


def test_zip_arrays_of_different_lengths_fails_naming_them(spark) -> None:
    assert "SQL function _gs_zip_arrays: the lists must have the same length, got 3, 2" in failure(
        spark, "zip_arrays(ARRAY[1, 2, 3], ARRAY['a', 'b'])"
    )


def test_zip_arrays_fields_unnest_by_name(spark) -> None:
    source = frame(spark, [([1, 2], ["a", "b"])], "ids array<bigint>, names array<string>")
    rows = query(
        spark, "SELECT z.f0 AS id, z.f1 AS name FROM t LATERAL VIEW explode(zip_arrays(ids, names)) AS z", source
    )
    assert [tuple(r) for r in rows.collect()] == [(1, "a"), (2, "b")]


LISTS = [
    ("array_enumerate(ARRAY['a', 'b'])", [Row(index=0, value="a"), Row(index=1, value="b")]),
    ("Array_Enumerate(ARRAY[7])", [Row(index=0, value=7)]),
    ("array_enumerate(CAST(ARRAY() AS ARRAY<INT>))", []),
    ("array_enumerate(CAST(NULL AS ARRAY<INT>))", None),
    ("to_large_list(ARRAY[1, 2])", [1, 2]),
    ("TO_LARGE_LIST(CAST(NULL AS ARRAY<INT>))", None),
    ("coalesce_meta(NULL, 'b', 'c')", "b"),
    ("Coalesce_Meta('a')", "a"),
    ("coalesce_meta(CAST(NULL AS STRING), NULL)", None),
]


def test_enumerate_large_list_and_coalesce(spark) -> None:
    assert evaluated(spark, LISTS) == LISTS


def test_coalesce_meta_is_tagged_for_the_first_arguments_metadata() -> None:
    program = SqlProgram("SELECT coalesce_meta(to_u256(a), to_u256(b)) AS amount FROM t", "sql")
    (projection,) = program.rewritten.expressions
    assert projection.this.meta[KEEPS_FIRST_METADATA] is True


def test_map_to_array_struct(spark) -> None:
    source = frame(spark, [({"amount": "100"},), (None,), ({},)], "params map<string,string>")
    assert values(spark, "_gs_map_to_array_struct(params)", source) == [[Row(key="amount", value="100")], None, []]
    assert value(spark, "_GS_MAP_TO_ARRAY_STRUCT(map_from_arrays(ARRAY['a', 'b'], ARRAY['1', '2']))") == [
        Row(key="a", value="1"),
        Row(key="b", value="2"),
    ]


STRUCT_LISTS = [
    (f"array_filter({CHANGES}, 'kind', 'transfer')", [transfer(1), transfer(3)]),
    (f"Array_Filter({CHANGES}, 'KIND', 'burn')", []),
    (f"array_filter({CHANGES}, 'kind', NULL)", [transfer(4, None)]),  # NULL matches NULL; NULL elements dropped
    (f"array_filter({CHANGES}, 'n', 2)", [transfer(2, "mint")]),
    (f"array_filter(CAST(NULL AS {'ARRAY<STRUCT<kind: STRING>>'}), 'kind', 'x')", None),
    (f"array_filter_first({CHANGES}, 'kind', 'transfer')", transfer(1)),
    (f"ARRAY_FILTER_FIRST({CHANGES}, 'kind', 'burn')", None),
    (f"array_filter_in({CHANGES}, 'kind', ARRAY['mint', 'transfer'])", [transfer(1), transfer(2, "mint"), transfer(3)]),
    (f"array_filter_in({CHANGES}, 'n', ARRAY[3, 4])", [transfer(3), transfer(4, None)]),
    (f"array_filter_in({CHANGES}, 'kind', ARRAY['mint', NULL])", [transfer(2, "mint"), transfer(4, None)]),
    (f"Array_Filter_In({CHANGES}, 'kind', CAST(NULL AS ARRAY<STRING>))", []),
    (f"array_struct_field({CHANGES}, 'kind')", ["transfer", "mint", None, "transfer", None]),
    (f"ARRAY_STRUCT_FIELD({CHANGES}, 'n')", [1, 2, None, 3, 4]),
]


def test_struct_list_filters(spark) -> None:
    assert evaluated(spark, STRUCT_LISTS) == STRUCT_LISTS


def test_struct_list_filters_on_a_column(spark) -> None:
    source = frame(
        spark,
        [([("transfer", 1), ("mint", 2)],), (None,)],
        "changes array<struct<kind: string, n: bigint>>",
    )
    assert values(spark, "array_filter_first(changes, 'kind', 'mint')", source) == [transfer(2, "mint"), None]
    assert values(spark, "array_struct_field(changes, 'kind')", source) == [["transfer", "mint"], None]


def test_a_field_name_that_is_not_a_literal_is_refused_naming_it() -> None:
    with pytest.raises(StreamlingError) as caught:
        _ = SqlProgram("SELECT array_filter(changes, kind_column, 'x') AS v FROM t", "SQL transform 'x'").rewritten
    assert str(caught.value) == (
        "SQL transform 'x': function array_filter: field_name must be a string literal (the struct field's name), "
        "got kind_column in array_filter(changes, kind_column, 'x')"
    )


def test_a_missing_field_is_reported_by_spark_naming_it(spark) -> None:
    assert "No such struct field `nope` in `kind`, `n`" in failure(spark, f"array_struct_field({CHANGES}, 'nope')")


TUPLES = "_gs_json_objects_to_clickhouse_tuples"
ACCOUNTS = (
    '[{"pubkey": "CtvdyHYt8cMuGVHFarV2RADfoCdnrbd8e9jAsB225uMW", "signer": true, "writable": true}, '
    '{"pubkey": null, "signer": false, "writable": true}, {"signer": false, "writable": false}]'
)


def test_json_objects_to_clickhouse_tuples(spark) -> None:
    source = frame(
        spark,
        [
            (ACCOUNTS, ["signer"]),
            (ACCOUNTS, ["pubkey"]),
            ('[{"slot": 1, "confirmation_count": 10}]', ["confirmation_count", "slot"]),
            ('[{"a": "it\'s", "b": 1.5, "c": {"d": [1, 2]}, "e": 100000000000000000000000}]', ["a", "b", "c", "e"]),
            ("[]", ["a"]),
            (None, ["a"]),
        ],
        "j string, keys array<string>",
    )
    assert values(spark, f"{TUPLES}(j, keys)", source) == [
        "[(true), (false), (false)]",
        "[('CtvdyHYt8cMuGVHFarV2RADfoCdnrbd8e9jAsB225uMW'), (null), (null)]",
        "[(10, 1)]",
        "[('it\\'s', 1.5, {\"d\":[1,2]}, 1e23)]",  # past 64 bits: a float, as the original's serde_json
        "[]",
        "[]",
    ]
    assert value(spark, """_GS_JSON_OBJECTS_TO_CLICKHOUSE_TUPLES('[{"pubkey":"abc"}]', ARRAY['pubkey'])""") == (
        "[('abc')]"
    )


def test_json_objects_to_clickhouse_tuples_of_bad_json_fails_naming_the_value(spark) -> None:
    assert f"SQL function {TUPLES}: not a JSON array of objects: '{{\"a\": 1}}'" in failure(
        spark, f"""{TUPLES}('{{"a": 1}}', ARRAY['a'])"""
    )


def test_json_objects_to_clickhouse_tuples_keys_must_be_a_list(spark) -> None:
    sql = f"SELECT {TUPLES}('[]', 'pubkey') AS v FROM t"
    df = query(spark, sql)
    registered = plugin_functions.register_all(spark, SqlProgram(sql, "sql").called)
    assert plugin_functions.call_problems(df, registered) == [
        f"function {TUPLES}: argument 2 must be array<string>, got string "
        f"(declared {TUPLES}(string, array<string>) -> string)"
    ]


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        (
            "SELECT array_filter(changes, 'kind') AS v FROM t",
            "SQL transform 'x': function array_filter takes 3 arguments — array_filter(list of structs, field_name "
            "(string literal), value) — got 2: array_filter(changes, 'kind')",
        ),
        (
            "SELECT zip_arrays(a) AS v FROM t",
            "SQL transform 'x': function zip_arrays takes 2 to 4 arguments — _gs_zip_arrays(list1, list2[, list3[, "
            "list4]]) — got 1: zip_arrays(a)",
        ),
        (
            "SELECT _gs_generate_series(1) AS v FROM t",
            "SQL transform 'x': function _gs_generate_series takes 2 to 3 arguments — _gs_generate_series(start, "
            "stop[, step] (integers)) — got 1: _gs_generate_series(1)",
        ),
    ],
)
def test_wrong_arity_is_refused_naming_the_function(sql: str, message: str) -> None:
    with pytest.raises(StreamlingError) as caught:
        _ = SqlProgram(sql, "SQL transform 'x'").rewritten
    assert str(caught.value) == message
