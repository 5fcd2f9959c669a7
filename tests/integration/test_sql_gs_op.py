"""An explicit `_gs_op` in a SQL transform, next to a star or not, decides each output row's operation:
run on Spark through the plan's per-epoch evaluation, and into a real Postgres sink."""

from __future__ import annotations

import textwrap
import uuid

import pytest

from streamling import run_pipeline
from streamling.api import analyze
from streamling.operators import Epoch
from streamling.topology.pipeline import load_pipeline

ROWS = [(1, "a", "i"), (2, "b", "u"), (3, "c", "i"), (4, "d", "d")]


def evaluate(spark, make_settings, sql: str, mid: str = "SELECT * FROM src") -> list[dict]:
    """The rows sink `out` receives for one epoch of `ROWS` (id, name, _gs_op) through `mid` and then `sql`."""
    text = textwrap.dedent(f"""
        sources:
          src: {{type: generator, rows: 10, schema: {{id: bigint, name: string}}}}
        transforms:
          mid: {{type: sql, primary_key: id, sql: "{mid}"}}
          t: {{type: sql, primary_key: id, sql: "{sql}"}}
        sinks:
          out: {{type: blackhole, from: t}}
        """)
    pipeline, report = load_pipeline(text)
    assert report.errors == []
    plan, report = analyze(pipeline, make_settings(), spark, report)
    assert report.errors == [] and plan is not None
    batch = spark.createDataFrame(ROWS, "id bigint, name string, _gs_op string")
    frame = plan.evaluate(spark, "src", batch, Epoch("src", 1, {}, {}))["out"]
    assert frame.columns.count("_gs_op") == 1
    return [row.asDict() for row in frame.collect()]


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT *, 'd' AS _gs_op FROM mid",
        "SELECT 'd' AS _gs_op, * FROM mid",
        "SELECT m.*, 'd' AS _gs_op FROM mid m",
        "SELECT * EXCEPT (name), name, 'd' AS _gs_op FROM mid",
        "WITH x AS (SELECT *, 'd' AS _gs_op FROM mid) SELECT * FROM x",
        "SELECT * FROM (SELECT *, 'd' AS _gs_op FROM mid) s",
    ],
)
def test_explicit_delete_next_to_a_star_marks_every_row_deleted(spark, make_settings, sql: str) -> None:
    rows = evaluate(spark, make_settings, sql)
    assert sorted((r["id"], r["name"], r["_gs_op"]) for r in rows) == [(i, n, "d") for i, n, _ in ROWS]


def test_computed_gs_op_next_to_a_star_uses_the_input_operation(spark, make_settings) -> None:
    rows = evaluate(spark, make_settings, "SELECT *, CASE WHEN id = 3 THEN 'd' ELSE _gs_op END AS _gs_op FROM mid")
    assert sorted((r["id"], r["_gs_op"]) for r in rows) == [(1, "i"), (2, "u"), (3, "d"), (4, "d")]


def test_star_alone_keeps_the_input_operation(spark, make_settings) -> None:
    rows = evaluate(spark, make_settings, "SELECT *, _gs_op FROM mid")
    assert sorted((r["id"], r["_gs_op"]) for r in rows) == [(i, op) for i, _, op in ROWS]


@pytest.mark.parametrize("mid", ["SELECT * FROM src", "SELECT id, _gs_op, name FROM src"])
def test_union_branches_line_up_whatever_the_input_column_order(spark, make_settings, mid: str) -> None:
    """Spark unions by position; with `_gs_op` in the middle of the input the star branches must still
    line up with the branch whose `_gs_op` is explicit."""
    sql = "SELECT * FROM mid UNION ALL SELECT *, 'd' AS _gs_op FROM mid WHERE id < 3"
    rows = evaluate(spark, make_settings, sql, mid=mid)
    assert sorted((r["id"], r["name"], r["_gs_op"]) for r in rows) == sorted(
        [(i, n, op) for i, n, op in ROWS] + [(1, "a", "d"), (2, "b", "d")]
    )


def test_explicit_delete_deletes_rows_in_postgres(spark, make_settings, write_pipeline, postgres_env, pg_connect):
    """Keys 1..10 are inserted and then updated three times; the SQL turns the updates of keys divisible
    by 3 into deletes, so those rows are gone from the table (without the explicit `_gs_op` all ten stay)."""
    schema = f"g_{uuid.uuid4().hex[:10]}"
    path = write_pipeline(f"""
        sources:
          src: {{type: generator, rows: 40, key_space: 10, schema: {{id: bigint, name: string}}}}
        transforms:
          marked:
            type: sql
            primary_key: id
            sql: SELECT *, CASE WHEN id % 3 = 0 AND _gs_op = 'u' THEN 'd' ELSE _gs_op END AS _gs_op FROM src
        sinks:
          out: {{type: postgres, from: marked, schema: {schema}, table: kept}}
        """)
    run_pipeline(path, make_settings(environ=postgres_env, job_mode=True), spark)
    with pg_connect() as conn:
        ids = [r[0] for r in conn.execute(f'SELECT id FROM "{schema}".kept ORDER BY id').fetchall()]
        conn.execute(f'DROP SCHEMA "{schema}" CASCADE')
    assert ids == [1, 2, 4, 5, 7, 8, 10]
