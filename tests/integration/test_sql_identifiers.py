"""SQL identifiers from the pipeline YAML are quoted, never executed: schemas, tables and columns whose names hold
quotes, semicolons, spaces and comment markers are created with exactly those names in the real Postgres and the
embedded ClickHouse, and a sentinel table the names try to drop is still there afterwards."""

from __future__ import annotations

import json
import textwrap
import uuid
from pathlib import Path

import pytest

from streamling import load_settings, run_pipeline


def settings(tmp_path: Path, environ: dict[str, str], **overrides: object):
    return load_settings(
        config=str(tmp_path / "none"),
        environ=environ,
        overrides={
            "job_mode": True,
            "state_backend.backend_type": "InMemory",
            "spark.checkpoint_root": str(tmp_path / "checkpoints"),
            "checkpoint_interval_sec": "200ms",
            **overrides,
        },
    )


def yaml_str(text: str) -> str:
    """`text` as a YAML scalar (JSON strings are YAML)."""
    return json.dumps(text)


def test_postgres_identifiers_are_quoted_never_executed(tmp_path: Path, spark, postgres_env, pg_connect) -> None:
    victims = f"victims_{uuid.uuid4().hex[:8]}"
    drop = f"DROP TABLE {victims}; --"
    schema = f's_{uuid.uuid4().hex[:6]}"; {drop}'
    names = {
        "table": f"a b;c '{victims}'",
        "landing": f"land'); {drop}",
        "agg": f'agg"; {drop}',
        "dynamic": f"w'q\"; {drop}",
        "column": f'we"i`rd.x; {drop}',  # a dot and a backtick: Spark must not read it as a path
        "group": f"g'r\"p; {drop}",
        "key": 'k"e.y`',
    }
    with pg_connect() as conn:
        conn.execute(f"CREATE TABLE {victims} (id int)")
    pipeline = tmp_path / "p.yaml"
    pipeline.write_text(
        textwrap.dedent(
            f"""
            sources:
              src: {{type: generator, rows: 20, key_space: 5, primary_key: id}}
            transforms:
              odd:
                type: sql
                primary_key: id
                sql: SELECT id, amount AS `{names["column"].replace("`", "``")}`, name FROM src
              keyed:
                type: sql
                primary_key: {yaml_str(names["key"])}
                sql: SELECT id AS `{names["key"].replace("`", "``")}`, name FROM src
              watch:
                type: dynamic_table
                backend_type: Postgres
                schema: {yaml_str(schema)}
                backend_entity_name: {yaml_str(names["dynamic"])}
                column: name
                from: src
            sinks:
              out: {{type: postgres, from: odd, schema: {yaml_str(schema)}, table: {yaml_str(names["table"])}}}
              by_key: {{type: postgres, from: keyed, schema: {yaml_str(schema)}, table: k, parallelism: 2}}
              totals:
                type: postgres_aggregate
                from: odd
                schema: {yaml_str(schema)}
                landing_table: {yaml_str(names["landing"])}
                agg_table: {yaml_str(names["agg"])}
                group_by: {{{yaml_str(names["group"])}: {{from: name}}}}
                aggregate: {{{yaml_str("n'; " + drop)}: {{fn: count}}, total: {{from: {yaml_str(names["column"])}, fn: sum}}}}
            """
        )
    )
    try:
        summary = run_pipeline(pipeline, settings(tmp_path, postgres_env), spark)
        assert summary.sink_rows == {"out": 20, "by_key": 20, "totals": 20}
        with pg_connect() as conn:
            assert conn.execute("SELECT to_regclass(%s)", (victims,)).fetchone()[0] == victims
            tables = {
                name
                for (name,) in conn.execute(
                    "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                    "WHERE n.nspname = %s AND c.relkind = 'r'",
                    (schema,),
                )
            }
            assert tables == {
                names["table"],
                names["landing"],
                names["agg"],
                names["dynamic"],
                "k",
                "_streamling_progress",
            }
            columns = [
                name
                for (name,) in conn.execute(
                    "SELECT a.attname FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid "
                    "JOIN pg_namespace n ON n.oid = c.relnamespace "
                    "WHERE n.nspname = %s AND c.relname = %s AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum",
                    (schema, names["table"]),
                )
            ]
            assert columns[:3] == ["id", names["column"], "name"]
            quoted = '"{}"."{}"'.format(schema.replace('"', '""'), names["table"].replace('"', '""'))
            assert conn.execute(f"SELECT count(*) FROM {quoted}").fetchone()[0] == 5
            agg = '"{}"."{}"'.format(schema.replace('"', '""'), names["agg"].replace('"', '""'))
            assert conn.execute(f'SELECT sum("n\'; {drop}") FROM {agg}').fetchone()[0] == 5
            key = names["key"].replace('"', '""')
            k = '"{}".k'.format(schema.replace('"', '""'))
            assert conn.execute(f'SELECT count(DISTINCT "{key}") FROM {k}').fetchone()[0] == 5
    finally:
        with pg_connect() as conn:
            conn.execute('DROP SCHEMA IF EXISTS "{}" CASCADE'.format(schema.replace('"', '""')))
            conn.execute(f"DROP TABLE IF EXISTS {victims}")


@pytest.mark.parametrize("append_only", [True, False], ids=["append-only", "mutations"])
def test_clickhouse_identifiers_are_quoted_never_executed(
    tmp_path: Path, spark, clickhouse_env, clickhouse, append_only: bool
) -> None:
    client, database = clickhouse
    client.command(f"CREATE TABLE {database}.victims (id UInt8) ENGINE = Memory")
    table = "t`1.'\"; DROP TABLE victims; --"  # the driver would leave a dotted name unquoted
    column = 'we`ird"; DROP TABLE victims; --'
    pipeline = tmp_path / "p.yaml"
    pipeline.write_text(
        textwrap.dedent(
            f"""
            sources:
              src: {{type: generator, rows: 20, key_space: 5, primary_key: id}}
            transforms:
              odd:
                type: sql
                primary_key: id
                sql: SELECT id, amount AS `{column.replace("`", "``")}` FROM src
            sinks:
              ch: {{type: clickhouse, from: odd, table: {yaml_str(table)}, append_only_mode: {str(append_only).lower()}}}
            """
        )
    )
    environ = {**clickhouse_env, "STREAMLING__CLICKHOUSE_SINK__DATABASE": database}
    summary = run_pipeline(pipeline, settings(tmp_path, environ), spark)
    assert summary.sink_rows == {"ch": 20}
    tables = client.query("SELECT name FROM system.tables WHERE database = {d:String}", parameters={"d": database})
    names = {row[0] for row in tables.result_rows}
    # The mutations mode's per-run key staging table (`_streamling_keys_<table>_<run>`, quoted the same way) is
    # dropped when the run ends, so either mode leaves exactly the victims table and the sink's table.
    assert names == {"victims", table}
    columns = client.query(
        "SELECT name FROM system.columns WHERE database = {d:String} AND table = {t:String} ORDER BY position",
        parameters={"d": database, "t": table},
    )
    assert [row[0] for row in columns.result_rows][:2] == ["id", column]
    quoted = "`" + table.replace("\\", "\\\\").replace("`", "\\`") + "`"
    final = " FINAL WHERE is_deleted = 0" if append_only else ""
    assert client.command(f"SELECT count() FROM {database}.{quoted}{final}") == 5
