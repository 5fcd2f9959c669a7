"""SQL compilation: node references, `_gs_op` propagation and `now()` pinning (rendered Spark SQL)."""

from __future__ import annotations

import pytest

from streamling.errors import StreamlingError
from streamling.sql.rewrite import SqlProgram

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
