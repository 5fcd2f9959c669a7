"""SQL compilation: node references, `_gs_op` propagation and `now()` pinning (rendered Spark SQL)."""

from __future__ import annotations

import pytest
from pyspark.sql import types as T

from streamling.errors import StreamlingError
from streamling.sql.rewrite import SqlProgram
from tests.sql_functions import frame, query

VIEWS = {"raw.transactions": "v0", "a": "va", "b": "vb"}


def render(sql: str, epoch_ms: int | None = None) -> str:
    return SqlProgram(sql, "SQL transform 't'").render(VIEWS, epoch_ms)


def test_references_include_dotted_names_and_exclude_ctes() -> None:
    program = SqlProgram("WITH x AS (SELECT * FROM raw.transactions) SELECT * FROM x UNION ALL SELECT * FROM a", "t")
    assert program.references == ["a", "raw.transactions"]


def test_dotted_name_maps_to_view_with_its_short_alias() -> None:
    assert render("SELECT transactions.id FROM raw.transactions WHERE amount > 1000") == (
        "SELECT transactions.id, _gs_op FROM `v0` AS `transactions` WHERE amount > 1000"
    )


def test_projection_without_gs_op_gets_it_appended() -> None:
    assert render("SELECT id, amount FROM a") == "SELECT id, amount, _gs_op FROM `va` AS `a`"


def test_star_keeps_gs_op_and_explicit_duplicate_is_dropped() -> None:
    assert render("SELECT * FROM a") == "SELECT * FROM `va` AS `a`"
    assert render("SELECT *, _gs_op FROM a") == "SELECT * FROM `va` AS `a`"


@pytest.mark.parametrize(
    ("sql", "rendered"),
    [
        ("SELECT *, 'd' AS _gs_op FROM a", "SELECT * EXCEPT (_gs_op), 'd' AS _gs_op FROM `va` AS `a`"),
        ("SELECT 'd' AS _gs_op, * FROM a", "SELECT * EXCEPT (_gs_op), 'd' AS _gs_op FROM `va` AS `a`"),
        ("SELECT t.*, 'd' AS _gs_op FROM a t", "SELECT t.* EXCEPT (_gs_op), 'd' AS _gs_op FROM `va` AS `t`"),
        (
            "SELECT * EXCEPT (amount), 'd' AS _gs_op FROM a",
            "SELECT * EXCEPT (amount, _gs_op), 'd' AS _gs_op FROM `va` AS `a`",
        ),
        ("SELECT * EXCEPT (_gs_op), 'd' AS _gs_op FROM a", "SELECT * EXCEPT (_gs_op), 'd' AS _gs_op FROM `va` AS `a`"),
        ("SELECT *, _gs_op, 'u' AS _gs_op FROM a", "SELECT * EXCEPT (_gs_op), 'u' AS _gs_op FROM `va` AS `a`"),
        (
            "SELECT *, CASE WHEN amount < 0 THEN 'd' ELSE _gs_op END AS _gs_op FROM a",
            "SELECT * EXCEPT (_gs_op), CASE WHEN amount < 0 THEN 'd' ELSE _gs_op END AS _gs_op FROM `va` AS `a`",
        ),
        (
            "WITH x AS (SELECT *, 'd' AS _gs_op FROM a) SELECT * FROM x",
            "WITH x AS (SELECT * EXCEPT (_gs_op), 'd' AS _gs_op FROM `va` AS `a`) SELECT * FROM x",
        ),
        (
            "SELECT * FROM (SELECT *, 'd' AS _gs_op FROM a) s",
            "SELECT * FROM (SELECT * EXCEPT (_gs_op), 'd' AS _gs_op FROM `va` AS `a`) AS s",
        ),
    ],
)
def test_explicit_gs_op_next_to_a_star_is_kept_and_the_star_leaves_its_input_one_out(sql: str, rendered: str) -> None:
    assert render(sql) == rendered


def test_union_star_branches_all_take_gs_op_last() -> None:
    """Spark unions by position: a star branch keeps `_gs_op` where its input has it, an explicit one
    next to a star comes last, so every star branch of a set operation puts it last."""
    assert render("SELECT * FROM a UNION ALL SELECT *, 'd' AS _gs_op FROM b") == (
        "SELECT * EXCEPT (_gs_op), _gs_op FROM `va` AS `a` UNION ALL "
        "SELECT * EXCEPT (_gs_op), 'd' AS _gs_op FROM `vb` AS `b`"
    )
    assert render("(SELECT *, 'u' AS _gs_op FROM a) UNION ALL (SELECT * FROM b) UNION ALL SELECT id, x FROM b") == (
        "(SELECT * EXCEPT (_gs_op), 'u' AS _gs_op FROM `va` AS `a`) UNION ALL "
        "(SELECT * EXCEPT (_gs_op), _gs_op FROM `vb` AS `b`) UNION ALL SELECT id, x, _gs_op FROM `vb` AS `b`"
    )


def test_ctes_of_a_union_get_gs_op() -> None:
    assert render("WITH x AS (SELECT id FROM a) SELECT * FROM x UNION ALL SELECT id FROM b") == (
        "WITH x AS (SELECT id, _gs_op FROM `va` AS `a`) SELECT * EXCEPT (_gs_op), _gs_op FROM x "
        "UNION ALL SELECT id, _gs_op FROM `vb` AS `b`"
    )


def test_star_over_values_gets_insert() -> None:
    assert render("SELECT * FROM VALUES (1, 2) AS t(id, x)") == (
        "SELECT *, 'i' AS _gs_op FROM VALUES (1, 2) AS t(id, x)"
    )
    assert render("SELECT *, 'd' AS _gs_op FROM VALUES (1, 2) AS t(id, x)") == (
        "SELECT *, 'd' AS _gs_op FROM VALUES (1, 2) AS t(id, x)"
    )


def test_explicit_gs_op_is_kept_once() -> None:
    assert render("SELECT id, _gs_op, _gs_op FROM a") == "SELECT id, _gs_op FROM `va` AS `a`"
    assert render("SELECT id, 'd' AS _gs_op FROM a") == "SELECT id, 'd' AS _gs_op FROM `va` AS `a`"


def test_union_inputs_lacking_gs_op_get_insert() -> None:
    assert render("SELECT id FROM a UNION ALL SELECT 7 AS id") == (
        "SELECT id, _gs_op FROM `va` AS `a` UNION ALL SELECT 7 AS id, 'i' AS _gs_op"
    )


def test_subquery_in_from_is_rewritten_too() -> None:
    assert render("SELECT id FROM (SELECT id, amount FROM a) s WHERE amount > 1") == (
        "SELECT id, _gs_op FROM (SELECT id, amount, _gs_op FROM `va` AS `a`) AS s WHERE amount > 1"
    )


def test_now_is_pinned_to_the_epoch_timestamp() -> None:
    sql = "SELECT id, now() AS seen FROM a WHERE created_at > now() - interval '1 hour'"
    assert render(sql, epoch_ms=1_767_225_600_123) == (
        "SELECT id, CAST('2026-01-01 00:00:00.123000' AS TIMESTAMP) AS seen, _gs_op FROM `va` AS `a` "
        "WHERE created_at > CAST('2026-01-01 00:00:00.123000' AS TIMESTAMP) - INTERVAL '1' HOUR"
    )


def test_postgres_dialect_functions_translate() -> None:
    assert render("SELECT id, unnest(make_array(1, 2)) AS x FROM a") == (
        "SELECT id, EXPLODE(ARRAY(1, 2)) AS x, _gs_op FROM `va` AS `a`"
    )


def test_aggregates_are_left_for_the_stateless_guard() -> None:
    assert render("SELECT count(*) AS n FROM a") == "SELECT COUNT(*) AS n FROM `va` AS `a`"


def test_not_a_select_is_rejected() -> None:
    with pytest.raises(StreamlingError, match=r"^t: SQL must be exactly one SELECT statement$"):
        SqlProgram("DELETE FROM a", "t")


def test_syntax_error_is_user_facing() -> None:
    with pytest.raises(StreamlingError) as info:
        SqlProgram("SELEC id FROM a", "t")
    assert info.value.user_facing
    assert str(info.value).startswith("t: invalid SQL: ")


ARRAYS_AND_TEXT = T.StructType(
    [
        T.StructField("ks", T.ArrayType(T.StringType())),
        T.StructField("vs", T.ArrayType(T.LongType())),
        T.StructField("s", T.StringType()),
        T.StructField("n", T.LongType()),
    ]
)


@pytest.mark.parametrize(
    ("sql", "rendered"),
    [
        # one key and its value: Spark's map (map_from_arrays wants arrays: "Cannot resolve map_from_arrays(k, v)")
        ("SELECT map('k', 'v') AS m FROM a", "MAP('k', 'v') AS m"),
        ("SELECT map(s, n) AS m FROM a", "MAP(s, n) AS m"),
        ("SELECT map(lower(s), NULL) AS m FROM a", "MAP(LOWER(s), NULL) AS m"),
        ("SELECT map(x.s, 1) AS m FROM raw.transactions x", "MAP(x.s, 1) AS m"),
        # arrays of keys and values: map_from_arrays, as before
        ("SELECT map(ks, vs) AS m FROM a", "MAP_FROM_ARRAYS(ks, vs) AS m"),
        ("SELECT map(ARRAY['a', 'b'], ARRAY[1, 2]) AS m FROM a", "MAP_FROM_ARRAYS(ARRAY('a', 'b'), ARRAY(1, 2)) AS m"),
        ("SELECT map(make_array('a'), make_array(1)) AS m FROM a", "MAP_FROM_ARRAYS(ARRAY('a'), ARRAY(1)) AS m"),
        ("SELECT map(ks, ARRAY[1]) AS m FROM a", "MAP_FROM_ARRAYS(ks, ARRAY(1)) AS m"),
        # types nothing here can tell (a plugin's function): as before
        ("SELECT map(f(s), g(n)) AS m FROM a", "MAP_FROM_ARRAYS(F(s), G(n)) AS m"),
        # pairs, as Spark's map and DataFusion's make_map take them (Postgres' parser took two arguments only)
        ("SELECT map('a', 1, 'b', 2) AS m FROM a", "MAP('a', 1, 'b', 2) AS m"),
        ("SELECT make_map('a', 1, 'b', n) AS m FROM a", "MAP('a', 1, 'b', n) AS m"),
    ],
)
def test_map_takes_arrays_or_a_key_and_its_value_by_the_arguments_types(sql: str, rendered: str) -> None:
    program = SqlProgram(sql, "SQL transform 't'")
    schemas = {"a": ARRAYS_AND_TEXT, "raw.transactions": ARRAYS_AND_TEXT}
    for _ in range(2):  # the second render takes the decision kept for these schemas
        assert rendered in program.render(VIEWS, schemas=schemas)


def test_map_resolves_columns_through_ctes() -> None:
    sql = "WITH c AS (SELECT ks AS kk, s AS ss FROM a) SELECT map(kk, kk) AS m1, map(ss, 1) AS m2 FROM c"
    rendered = SqlProgram(sql, "t").render(VIEWS, schemas={"a": ARRAYS_AND_TEXT})
    assert "MAP_FROM_ARRAYS(kk, kk) AS m1, MAP(ss, 1) AS m2" in rendered


def test_map_runs_in_spark_for_both_kinds(spark) -> None:
    source = frame(spark, [(["a", "b"], [1, 2], "k", 7)], "ks array<string>, vs array<bigint>, s string, n bigint")
    sql = (
        "SELECT map('k', 'v') AS literal, map(s, n) AS columns, map(ks, vs) AS arrays, "
        "map(ARRAY['x'], ARRAY[1]) AS array_literals, map('a', 1, 'b', 2) AS pairs, make_map('p', s) AS made FROM t"
    )
    (row,) = query(spark, sql, source).collect()
    assert row.asDict() == {
        "literal": {"k": "v"},
        "columns": {"k": 7},
        "arrays": {"a": 1, "b": 2},
        "array_literals": {"x": 1},
        "pairs": {"a": 1, "b": 2},
        "made": {"p": "k"},
    }
