"""A script transform without `schema` that adds columns: they are inferred at validation from sample rows, flow
to SQL and to a Postgres sink that creates its table, and a column whose type cannot be told is rejected then."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from streamling import run_pipeline, validate_pipeline
from tests.integration.collect_sink import COLLECTED

ORIGINAL_EXAMPLE = """
sources:
  raw_accounts: {type: generator, rows: 200, record_batch_size: 50, primary_key: id}
transforms:
  updated_account:
    type: script
    from: raw_accounts
    language: LANGUAGE
    script: >
      function process(input) {
        input.tier = input.amount > 1000 ? 'premium' : 'standard';
        input.name = input.name + '_processed';
        input.doubled = input.id * 2;
        input.large = input.amount > 1000;
        input.seen_at = new Date(Date.parse(input.created_at) + 1000);
        input.meta = {len: input.name.length, tags: ['a', 'b']};
        return input;
      }
    primary_key: id
  premium:
    type: sql
    primary_key: id
    sql: SELECT id, tier, doubled FROM updated_account WHERE large
sinks:
  accounts: {type: postgres, from: updated_account, schema: SCHEMA, table: accounts}
  out: {type: print, from: premium}
"""


@pytest.fixture
def schema(pg_connect) -> Iterator[str]:
    name = f"t_{uuid.uuid4().hex[:10]}"
    yield name
    with pg_connect() as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


@pytest.mark.parametrize("language", ["javascript", "typescript"])
def test_added_columns_are_inferred_and_reach_sql_and_a_postgres_table(
    spark, make_settings, postgres_env, write_pipeline, schema, pg_connect, language
) -> None:
    """The original's README example (a key added with no schema) runs: the new columns are in the validated
    schema, a SQL transform filters on one, and the Postgres sink creates its table with their inferred types."""
    key = uuid.uuid4().hex
    text = (
        ORIGINAL_EXAMPLE.replace("SCHEMA", schema)
        .replace("LANGUAGE", language)
        .replace("out: {type: print,", f"out: {{type: test.collect, options: {{key: {key}}},")
    )
    path = write_pipeline(text)
    settings = make_settings(environ=postgres_env, job_mode=True)
    report = validate_pipeline(path, settings, spark)
    assert report.errors == [] and report.warnings == []
    summary = run_pipeline(path, settings, spark)
    assert summary.sink_rows["accounts"] == 200
    with pg_connect() as conn:
        types = dict(
            conn.execute(
                "SELECT column_name, data_type FROM information_schema.columns "
                "WHERE table_schema = %s AND table_name = 'accounts'",
                (schema,),
            ).fetchall()
        )
        rows = conn.execute(
            f'SELECT id, amount, name, tier, doubled, large, seen_at - created_at, meta FROM "{schema}".accounts '
            "ORDER BY id"
        ).fetchall()
    assert {k: v for k, v in types.items() if k in ("id", "amount", "name", "created_at")} == {
        "id": "bigint",
        "amount": "double precision",
        "name": "text",
        "created_at": "timestamp with time zone",
    }
    assert {k: v for k, v in types.items() if k in ("tier", "doubled", "large", "seen_at", "meta")} == {
        "tier": "text",
        "doubled": "double precision",  # a JavaScript number: double, never a guessed bigint
        "large": "boolean",
        "seen_at": "timestamp with time zone",
        "meta": "text",  # an object: its JSON text
    }
    assert [r[0] for r in rows] == list(range(1, 201))
    for id_, amount, name, tier, doubled, large, delta, meta in rows:
        assert tier == ("premium" if amount > 1000 else "standard") and large == (amount > 1000)
        assert doubled == 2.0 * id_ and name.endswith("_processed")
        assert delta.total_seconds() == 1.0
        assert meta == f'{{"len":{len(name)},"tags":["a","b"]}}'
    premium = [row for _, row in COLLECTED[key]]
    assert premium and all(set(r) == {"id", "tier", "doubled", "_gs_op"} for r in premium)
    assert all(r["tier"] == "premium" and r["doubled"] == 2.0 * r["id"] for r in premium)


BASE = """
sources:
  src: {type: generator, rows: 10, primary_key: id, schema: {id: bigint, amount: double, name: string}}
transforms:
  t:
    type: script
    from: src
    language: javascript
    primary_key: id
    SCHEMA
    script: |
      SCRIPT
sinks:
  out: {type: blackhole, from: t}
"""


def pipeline(script: str, schema: str = "") -> str:
    return BASE.replace("SCHEMA", schema).replace("SCRIPT", script)


def test_a_column_null_on_every_sample_row_is_rejected_with_the_fix(spark, make_settings, write_pipeline) -> None:
    report = validate_pipeline(
        write_pipeline(pipeline("row => ({...row, note: row.missing, tier: 'x'})")), make_settings(), spark
    )
    assert report.errors == [
        "script transform 't': cannot infer the type of column 'note', which the script adds: it is null on every "
        "sample row built from the input schema; declare every output column in 'schema' on the node, e.g. "
        "schema: {id: bigint, amount: double, name: string, note: <type>, tier: <type>}"
    ]


def test_a_script_that_throws_on_every_sample_row_is_rejected(spark, make_settings, write_pipeline) -> None:
    report = validate_pipeline(
        write_pipeline(pipeline("row => { throw new Error('no ' + row.id); }")), make_settings(), spark
    )
    assert report.errors == [
        "script transform 't': cannot infer its output columns: the script failed on every sample row built from "
        "the input schema (first: Error: no 1; stack: at <anonymous> (script:1)); declare every output column in "
        "'schema' on the node, e.g. schema: {id: bigint, amount: double, name: string, …}"
    ]


def test_a_declared_schema_is_authoritative(spark, make_settings, write_pipeline) -> None:
    """With `schema` the script is not run at validation: one that would be rejected without it validates, and the
    columns are exactly the declared ones."""
    key = uuid.uuid4().hex
    script = "row => { if (row.id < 1000) return {...row, note: null, extra: 1}; throw new Error('no'); }"
    text = pipeline(script, "schema: {id: bigint, note: string}").replace(
        "out: {type: blackhole,", f"out: {{type: test.collect, options: {{key: {key}}},"
    )
    path = write_pipeline(text)
    assert validate_pipeline(path, make_settings(), spark).errors == []
    run_pipeline(path, make_settings(job_mode=True), spark)
    rows = [row for _, row in COLLECTED[key]]
    assert len(rows) == 10 and all(r == {"id": r["id"], "note": None, "_gs_op": "i"} for r in rows)


def test_mixed_kinds_make_a_string_and_a_filter_without_sample_rows_warns(spark, make_settings, write_pipeline) -> None:
    key = uuid.uuid4().hex
    text = pipeline("row => ({...row, code: row.id % 2 ? row.id : 'even'})").replace(
        "out: {type: blackhole,", f"out: {{type: test.collect, options: {{key: {key}}},"
    )
    run_pipeline(write_pipeline(text), make_settings(job_mode=True), spark)
    rows = sorted((row for _, row in COLLECTED[key]), key=lambda r: r["id"])
    assert [r["code"] for r in rows[:3]] == ["1", "even", "3"]
    report = validate_pipeline(
        write_pipeline(pipeline("row => row.amount > 1e12 ? row : null")), make_settings(), spark
    )
    assert report.errors == []
    assert report.warnings == [
        "script transform 't': the script returned no row for the sample rows built from the input schema, so the "
        "columns it may add could not be inferred at validation; its output keeps the input's columns (declare "
        "'schema' if it adds any)"
    ]


def test_a_key_the_sample_did_not_show_still_fails_its_first_row(spark, make_settings, write_pipeline) -> None:
    from streamling.errors import StreamlingError

    """The sample rows (ids 1, 1000000, NULL) show `tier`; the real rows 2..10 return `late` (the check looks at
    the first row each batch returns)."""
    script = "row => row.id > 1 && row.id < 100 ? {...row, late: 1} : row.id === 1 ? null : {...row, tier: 'a'}"
    path = write_pipeline(pipeline(script))
    with pytest.raises(StreamlingError) as info:
        run_pipeline(path, make_settings(job_mode=True), spark)
    assert "the script returned 'late', which is not among the output columns (id, amount, name, tier)" in str(
        info.value
    )
