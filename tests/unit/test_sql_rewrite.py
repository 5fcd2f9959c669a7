"""SQL compilation: node references, `_gs_op` propagation and `now()` pinning (rendered Spark SQL)."""

from __future__ import annotations

import pytest

from streamling.errors import StreamlingError
from streamling.transforms.sql_rewrite import SqlProgram

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
