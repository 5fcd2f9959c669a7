"""SQL transforms analysed by Spark against real schemas: the stateless guard and `_gs_op` rules."""

from __future__ import annotations

import textwrap

import pytest

from streamling.api import analyze
from streamling.topology.pipeline import load_pipeline

STATELESS = "SQL transforms accept only stateless operations (projection, filter, union, unnest)"


def analyse(spark, make_settings, sql: str):
    text = textwrap.dedent(f"""
        sources:
          raw.tx: {{type: generator, rows: 10}}
          other: {{type: generator, rows: 10, schema: {{id: bigint, tags: string}}}}
        transforms:
          t: {{type: sql, primary_key: id, sql: "{sql}"}}
        sinks:
          p: {{type: print, from: t}}
          o: {{type: blackhole, from: other}}
          r: {{type: blackhole, from: raw.tx}}
        """)
    pipeline, report = load_pipeline(text)
    assert report.errors == []
    plan, report = analyze(pipeline, make_settings(), spark, report)
    return plan, report.errors


@pytest.mark.parametrize(
    ("sql", "operation"),
    [
        (
            "SELECT name AS id, count(*) AS n FROM raw.tx GROUP BY name",
            "aggregation (GROUP BY or an aggregate function)",
        ),
        ("SELECT sum(amount) AS id FROM raw.tx", "aggregation (GROUP BY or an aggregate function)"),
        ("SELECT a.id FROM raw.tx a JOIN other b ON a.id = b.id", "join"),
        ("SELECT id FROM raw.tx ORDER BY id", "ORDER BY"),
        ("SELECT id FROM raw.tx LIMIT 5", "LIMIT"),
        ("SELECT DISTINCT id FROM raw.tx", "DISTINCT (a UNION without ALL is a DISTINCT too; use UNION ALL)"),
        (
            "SELECT id FROM raw.tx UNION SELECT id FROM other",
            "DISTINCT (a UNION without ALL is a DISTINCT too; use UNION ALL)",
        ),
        ("SELECT id, row_number() OVER (ORDER BY id) AS rn FROM raw.tx", "window function"),
        ("SELECT id FROM raw.tx WHERE id IN (SELECT id FROM other)", "subquery expression"),
        ("SELECT id FROM raw.tx INTERSECT SELECT id FROM other", "INTERSECT"),
    ],
)
def test_stateful_sql_is_rejected_naming_the_operation(spark, make_settings, sql: str, operation: str) -> None:
    _, errors = analyse(spark, make_settings, sql)
    assert errors == [f"SQL transform 't': {operation} is not allowed; {STATELESS}"]


@pytest.mark.parametrize(
    ("sql", "schema"),
    [
        ("SELECT id, amount FROM raw.tx WHERE amount > 1000", "struct<id:bigint,amount:double,_gs_op:string>"),
        ("SELECT * FROM raw.tx", "struct<id:bigint,amount:double,name:string,created_at:timestamp,_gs_op:string>"),
        ("SELECT id FROM raw.tx UNION ALL SELECT id FROM other", "struct<id:bigint,_gs_op:string>"),
        ("SELECT id, unnest(make_array(1, 2)) AS x FROM raw.tx", "struct<id:bigint,x:int,_gs_op:string>"),
        ("SELECT id, explode(split(tags, ',')) AS tag FROM other", "struct<id:bigint,tag:string,_gs_op:string>"),
        ("SELECT id, upper(name) AS name FROM raw.tx WHERE created_at > now() - interval '1 hour'",
         "struct<id:bigint,name:string,_gs_op:string>"),
        ("SELECT *, _gs_op FROM raw.tx WHERE id > 1", "struct<id:bigint,amount:double,name:string,created_at:timestamp,_gs_op:string>"),
        ("SELECT id, 'd' AS _gs_op FROM raw.tx", "struct<id:bigint,_gs_op:string>"),
        ("WITH x AS (SELECT id, amount FROM raw.tx) SELECT id FROM x WHERE amount > 1", "struct<id:bigint,_gs_op:string>"),
        ("SELECT tx.id FROM raw.tx UNION ALL SELECT 7 AS id", "struct<id:bigint,_gs_op:string>"),
    ],
)  # fmt: skip
def test_stateless_sql_is_accepted_with_one_gs_op(spark, make_settings, sql: str, schema: str) -> None:
    plan, errors = analyse(spark, make_settings, sql)
    assert errors == []
    assert plan.schemas["t"].simpleString() == schema


def test_unknown_column_is_a_user_error(spark, make_settings) -> None:
    _, errors = analyse(spark, make_settings, "SELECT nope AS id FROM raw.tx")
    assert len(errors) == 1
    assert errors[0].startswith("SQL transform 't': [UNRESOLVED_COLUMN.WITH_SUGGESTION] A column, variable, or ")
    assert "`nope`" in errors[0]


def test_primary_key_must_exist_in_transform_output(spark, make_settings) -> None:
    text = textwrap.dedent("""
        sources:
          src: {type: generator, rows: 10}
        transforms:
          t: {type: sql, primary_key: "id, account", sql: "SELECT id, amount FROM src"}
        sinks:
          p: {type: print, from: t, primary_key: amount}
        """)
    pipeline, report = load_pipeline(text)
    _, report = analyze(pipeline, make_settings(), spark, report)
    assert report.errors == [
        "Primary key validation failed for node 't': columns [\"account\"] not found in schema. "
        'Available columns: ["id", "amount", "_gs_op"]'
    ]


def test_primary_key_on_source_and_sink(spark, make_settings) -> None:
    text = textwrap.dedent("""
        sources:
          src: {type: generator, rows: 10, primary_key: uid}
        sinks:
          p: {type: print, from: src, primary_key: [id, nope]}
        """)
    pipeline, report = load_pipeline(text)
    _, report = analyze(pipeline, make_settings(), spark, report)
    cols = '["id", "amount", "name", "created_at", "_gs_op"]'
    assert report.errors == [
        f"Primary key validation failed for node 'src': columns [\"uid\"] not found in schema. Available columns: {cols}",
        f"Primary key validation failed for node 'p': columns [\"nope\"] not found in schema. Available columns: {cols}",
    ]


def test_catalogue_calls_with_wrong_arguments_fail_validation_naming_the_function(spark, make_settings) -> None:
    """Arity is checked when the SQL is rewritten; a type Spark refuses inside the built-ins a call was rewritten
    into is reported as the call the user wrote, with what it takes."""
    _, errors = analyse(spark, make_settings, "SELECT id, to_timestamp_micros(id, 1) AS t FROM raw.tx")
    assert errors == [
        "SQL transform 't': function to_timestamp_micros takes 1 argument — to_timestamp_micros(micros since "
        "1970-01-01 UTC (integer)) — got 2: to_timestamp_micros(id, 1)"
    ]
    _, errors = analyse(spark, make_settings, "SELECT id, to_timestamp_micros(array(id)) AS t FROM raw.tx")
    assert len(errors) == 1
    assert errors[0].startswith(
        "SQL transform 't': function to_timestamp_micros cannot take (array<bigint>) in to_timestamp_micros(ARRAY(id)):"
        " it takes to_timestamp_micros(micros since 1970-01-01 UTC (integer)) ([DATATYPE_MISMATCH"
    ), errors[0]
