"""The Postgres sinks against a real Postgres 15: DDL, types, upsert semantics, parallel streams, failures."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from pyspark.sql import types as T

from streamling import run_pipeline
from streamling.api import validate_pipeline
from streamling.builtins.generator import GeneratorSource, GeneratorSourceSpec
from streamling.builtins.generator_reader import generate
from streamling.errors import StreamlingError
from streamling.kafka.avro import WIDE_DECIMAL_KEY
from streamling.operators import Epoch, RunContext
from streamling.postgres.sink import PostgresSink, PostgresSinkSpec
from streamling.state.memory import InMemoryStateBackend


@pytest.fixture
def schema(pg_connect) -> Iterator[str]:
    name = f"t_{uuid.uuid4().hex[:10]}"
    yield name
    with pg_connect() as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


@pytest.fixture
def pg_settings(make_settings, postgres_env):
    def build(**overrides: Any):
        return make_settings(environ=postgres_env, **{"job_mode": True, **overrides})

    return build


def generated(spec: dict[str, Any], settings) -> list[dict[str, Any]]:
    """The rows a generator source with `spec` produces, computed without Spark."""
    source = GeneratorSource("src", GeneratorSourceSpec.model_validate({"type": "generator", **spec}), settings)
    config = source.reader_config()
    return [row for batch in generate(config, 0, spec["rows"], 10_000) for row in batch.to_pylist()]


def final_state(rows: list[dict[str, Any]], key) -> dict[Any, dict[str, Any]]:
    state: dict[Any, dict[str, Any]] = {}
    for row in rows:
        k = key(row)
        if row["_gs_op"] == "d":
            state.pop(k, None)
        else:
            state[k] = row
    return state


def fetch(pg_connect, query: str, params: tuple = ()) -> list[tuple]:
    with pg_connect() as conn:
        return conn.execute(query, params).fetchall()


def test_auto_create_maps_every_type_and_round_trips_values(spark, pg_settings, write_pipeline, pg_connect, schema):
    path = write_pipeline(f"""
        sources:
          src: {{type: generator, rows: 20}}
        transforms:
          typed:
            type: sql
            primary_key: id
            sql: >
              SELECT id, CAST(id AS TINYINT) AS i8, CAST(id AS SMALLINT) AS i16, CAST(id AS INT) AS i32,
                     CAST(amount AS REAL) AS f32, amount AS f64, id % 2 = 0 AS flag, name,
                     CAST(name AS BINARY) AS raw, CAST(created_at AS DATE) AS day, created_at,
                     CAST(created_at AS TIMESTAMP_NTZ) AS local_time,
                     CAST('12345678901234567890.123456789012345678' AS DECIMAL(38, 18)) AS precise,
                     named_struct('n', name, 'ids', array(id, id + 1)) AS doc, array(name, 'x') AS tags,
                     map_from_arrays(array('k'), array(id)) AS attrs
              FROM src
        sinks:
          out: {{type: postgres, from: typed, schema: {schema}, table: typed}}
        """)
    run_pipeline(path, pg_settings(), spark)
    types = dict(
        fetch(
            pg_connect,
            "SELECT column_name, format_type(atttypid, atttypmod) FROM information_schema.columns c "
            "JOIN pg_attribute a ON a.attrelid = (quote_ident(c.table_schema) || '.' || c.table_name)::regclass "
            "AND a.attname = c.column_name WHERE table_schema = %s AND table_name = 'typed'",
            (schema,),
        )
    )
    assert types == {
        "id": "bigint",
        "i8": "smallint",
        "i16": "smallint",
        "i32": "integer",
        "f32": "real",
        "f64": "double precision",
        "flag": "boolean",
        "name": "text",
        "raw": "bytea",
        "day": "date",
        "created_at": "timestamp with time zone",
        "local_time": "timestamp without time zone",
        "precise": "numeric(38,18)",
        "doc": "jsonb",
        "tags": "jsonb",
        "attrs": "jsonb",
    }
    assert "_gs_op" not in types
    (row,) = fetch(
        pg_connect,
        f'SELECT id, name, raw, precise::text, doc, tags, attrs, created_at::text, local_time::text FROM "{schema}".typed '
        "WHERE id = 3",
    )
    assert row[0] == 3 and row[2] == row[1].encode()
    assert row[3] == "12345678901234567890.123456789012345678"
    assert row[4] == {"n": row[1], "ids": [3, 4]} and row[5] == [row[1], "x"] and row[6] == {"k": 3}
    assert row[7] == "2025-01-01 00:00:00.002+00" and row[8] == "2025-01-01 00:00:00.002"
    primary = fetch(
        pg_connect,
        "SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey) "
        "WHERE i.indrelid = %s::regclass AND i.indisprimary",
        (f'"{schema}".typed',),
    )
    assert primary == [("id",)]


def test_256_bit_integers_are_written_exactly_as_numeric_78(spark, pg_settings, pg_connect, schema):
    """Drives the sink directly: a wide decimal arrives as a string column marked by the Avro decoder."""
    settings = pg_settings()
    values = [
        "115792089237316195423570985008687907853269984665640564039457584007913129639935",
        "-57896044618658097711785492504343953926634992332820282019728792003956564819968",
        "1000000000000000000000000000000",
    ]
    fields = [
        T.StructField("id", T.LongType(), False),
        T.StructField("wei", T.StringType(), metadata={WIDE_DECIMAL_KEY: "decimal(78,0)"}),
        T.StructField("_gs_op", T.StringType()),
    ]
    df = spark.createDataFrame([(i, v, "i") for i, v in enumerate(values)], T.StructType(fields))
    spec = PostgresSinkSpec.model_validate({"type": "postgres", "from": "x", "schema": schema, "table": "wide"})
    sink = PostgresSink("wide", spec, settings)
    assert sink.check(df.schema, ["id"]) == []
    sink.initialize(RunContext(settings, InMemoryStateBackend("app"), spark))
    try:
        assert sink.write(df, Epoch("src", 1, {"offset": 0}, {"offset": 3})) == 3
    finally:
        sink.terminate()
    rows = fetch(pg_connect, f'SELECT wei::text, format_type(pg_typeof(wei), NULL) FROM "{schema}".wide ORDER BY id')
    assert [r[0] for r in rows] == values
    (kind,) = fetch(
        pg_connect,
        "SELECT format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = %s::regclass AND attname = 'wei'",
        (f'"{schema}".wide',),
    )
    assert kind == ("numeric(78,0)",)


def test_insert_update_delete_sequences_land_as_the_final_state(
    spark, pg_settings, write_pipeline, pg_connect, schema
) -> None:
    """Keys recur within and across epochs (key_space 40, 700-row epochs) with every 7th row a delete;
    composite keys, deduplicated and not, single and parallel streams must all end in the same state."""
    source = {"rows": 5000, "key_space": 40, "delete_every": 7, "record_batch_size": 700}
    settings = pg_settings()
    path = write_pipeline(f"""
        sources:
          src: {{type: generator, rows: 5000, key_space: 40, delete_every: 7, record_batch_size: 700}}
        transforms:
          keyed:
            type: sql
            primary_key: region, id
            sql: SELECT CAST(id % 3 AS INT) AS region, id, amount, name FROM src
        sinks:
          dedup: {{type: postgres, from: keyed, schema: {schema}, table: dedup}}
          history: {{type: postgres, from: keyed, schema: {schema}, table: history, deduplicate: false, batch_size: 7}}
          parallel: {{type: postgres, from: keyed, schema: {schema}, table: parallel, parallelism: 3}}
        """)
    summary = run_pipeline(path, settings, spark)
    assert summary.sources["src"].epochs == 8
    expected = final_state(generated(source, settings), key=lambda r: (r["id"] % 3, r["id"]))
    want = sorted((k[0], k[1], r["amount"], r["name"]) for k, r in expected.items())
    assert 0 < len(want) < 40
    for table in ("dedup", "history", "parallel"):
        got = fetch(pg_connect, f'SELECT region, id, amount, name FROM "{schema}".{table} ORDER BY region, id')
        assert got == want, table
    streams = fetch(
        pg_connect,
        f'SELECT stream, streams, epoch FROM "{schema}"._streamling_progress WHERE sink = %s ORDER BY stream',
        ("parallel",),
    )
    assert streams == [(0, 3, 8), (1, 3, 8), (2, 3, 8)]


def test_postgres_sink_batch_size_setting_sizes_the_merges_of_sinks_without_their_own(
    spark, pg_settings, write_pipeline, pg_connect, schema
) -> None:
    """A statement-level trigger logs every merge statement: ten rows with ``postgres_sink.batch_size: 4`` are merged
    in three statements; a node's own ``batch_size: 5`` wins (two); a per-node connection entry's (2) wins too."""
    with pg_connect() as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
        conn.execute(f'CREATE TABLE "{schema}".merges (tbl text)')
        conn.execute(
            f'CREATE FUNCTION "{schema}".merged() RETURNS trigger LANGUAGE plpgsql AS $$ '
            f'BEGIN INSERT INTO "{schema}".merges VALUES (TG_TABLE_NAME); RETURN NULL; END $$'
        )
        for table in ("a", "b", "c"):
            conn.execute(f'CREATE TABLE "{schema}".{table} (id bigint PRIMARY KEY, name text)')
            conn.execute(
                f'CREATE TRIGGER merged AFTER INSERT ON "{schema}".{table} '
                f'FOR EACH STATEMENT EXECUTE FUNCTION "{schema}".merged()'
            )
    path = write_pipeline(f"""
        sources:
          src: {{type: generator, rows: 10, record_batch_size: 10, schema: {{id: bigint, name: string}}}}
        sinks:
          a: {{type: postgres, from: src, primary_key: id, schema: {schema}, table: a}}
          b: {{type: postgres, from: src, primary_key: id, schema: {schema}, table: b, batch_size: 5}}
          c: {{type: postgres, from: src, primary_key: id, schema: {schema}, table: c}}
        """)
    settings = pg_settings(**{"postgres_sink.batch_size": 4, "postgres_sink_connections.c.batch_size": 2})
    run_pipeline(path, settings, spark)
    merges = fetch(pg_connect, f'SELECT tbl, count(*) FROM "{schema}".merges GROUP BY tbl ORDER BY tbl')
    assert merges == [("a", 3), ("b", 2), ("c", 5)]
    for table in ("a", "b", "c"):
        assert fetch(pg_connect, f'SELECT count(*) FROM "{schema}".{table}') == [(10,)]


def test_on_conflict_nothing_keeps_the_first_row(spark, pg_settings, write_pipeline, pg_connect, schema) -> None:
    settings = pg_settings()
    path = write_pipeline(f"""
        sources:
          src: {{type: generator, rows: 300, key_space: 10, record_batch_size: 70}}
        sinks:
          out: {{type: postgres, from: src, primary_key: id, schema: {schema}, table: firsts, on_conflict: NOTHING}}
        """)
    run_pipeline(path, settings, spark)
    rows = generated({"rows": 300, "key_space": 10, "record_batch_size": 70}, settings)
    first = {}
    for row in rows:
        first.setdefault(row["id"], row["amount"])
    assert fetch(pg_connect, f'SELECT id, amount FROM "{schema}".firsts ORDER BY id') == sorted(first.items())


def test_update_where_with_a_strict_comparison(spark, pg_settings, write_pipeline, pg_connect, schema) -> None:
    """`version: '>'` only lets a strictly newer version replace a row: equal versions do not update."""
    settings = pg_settings()
    path = write_pipeline(f"""
        sources:
          src: {{type: generator, rows: 200, key_space: 10, record_batch_size: 30}}
        transforms:
          versioned:
            type: sql
            primary_key: id
            sql: SELECT id, name, created_at AS version, 1 AS constant FROM src
        sinks:
          newest:
            type: postgres
            from: versioned
            schema: {schema}
            table: newest
            deduplicate: false
            update_where: {{version: '>'}}
          same_version:
            type: postgres
            from: versioned
            schema: {schema}
            table: same_version
            deduplicate: false
            update_where: {{constant: '>'}}
        """)
    run_pipeline(path, settings, spark)
    rows = generated({"rows": 200, "key_space": 10, "record_batch_size": 30}, settings)
    last = {r["id"]: r["name"] for r in rows}
    first: dict[int, str] = {}
    for r in rows:
        first.setdefault(r["id"], r["name"])
    assert fetch(pg_connect, f'SELECT id, name FROM "{schema}".newest ORDER BY id') == sorted(last.items())
    assert fetch(pg_connect, f'SELECT id, name FROM "{schema}".same_version ORDER BY id') == sorted(first.items())
    assert sorted(first.items()) != sorted(last.items())


def test_existing_table_that_cannot_hold_the_data_fails_fast(
    spark, pg_settings, write_pipeline, pg_connect, schema
) -> None:
    with pg_connect() as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
        conn.execute(f'CREATE TABLE "{schema}".narrow (id bigint PRIMARY KEY, amount integer, name text)')
    path = write_pipeline(f"""
        sources:
          src: {{type: generator, rows: 10}}
        sinks:
          out: {{type: postgres, from: src, primary_key: id, schema: {schema}, table: narrow}}
        """)
    with pytest.raises(StreamlingError) as caught:
        run_pipeline(path, pg_settings(), spark)
    assert caught.value.user_facing
    assert str(caught.value) == (
        f"postgres sink 'out': table {schema}.narrow column 'amount' has type integer, which cannot hold the "
        "input's double precision"
    )
    assert fetch(pg_connect, f'SELECT count(*) FROM "{schema}".narrow') == [(0,)]


def test_value_too_long_for_an_existing_column_fails_without_retrying(
    spark, pg_settings, write_pipeline, pg_connect, schema
) -> None:
    with pg_connect() as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
        conn.execute(f'CREATE TABLE "{schema}".short (id bigint PRIMARY KEY, name varchar(3))')
    path = write_pipeline(f"""
        sources:
          src: {{type: generator, rows: 10, schema: {{id: bigint, name: string}}}}
        sinks:
          out: {{type: postgres, from: src, primary_key: id, schema: {schema}, table: short}}
        """)
    with pytest.raises(StreamlingError) as caught:
        run_pipeline(path, pg_settings(), spark)
    message = str(caught.value)
    assert message.startswith(
        f'postgres sink \'out\' (table "{schema}"."short"): column "name" (character varying(3)) cannot hold a '
    )
    assert message.endswith("value too long for type character varying(3)")
    assert fetch(pg_connect, f'SELECT count(*) FROM "{schema}".short') == [(0,)]


@pytest.mark.parametrize(
    ("sink", "message"),
    [
        (
            "{type: postgres, from: src, table: t, primary_key: id, update_where: {amount: '=>'}}",
            "sink 'out' (type 'postgres'): field 'update_where': operator '=>' for column 'amount' is not one of "
            "= > >= < <= != <> (got {'amount': '=>'})",
        ),
        (
            "{type: postgres, from: src, table: t, primary_key: id, update_where: {version: '>'}}",
            "postgres sink 'out': update_where column 'version' is not in the input; available columns: "
            "id, amount, name, created_at",
        ),
        (
            "{type: postgres, from: src, table: t, primary_key: id, on_conflict: nothing, update_where: {id: '>'}}",
            "postgres sink 'out': update_where applies only with on_conflict: update",
        ),
        ("{type: postgres, from: src, table: t}", "postgres sink 'out' requires a primary key"),
        (
            "{type: postgres_aggregate, from: src, primary_key: id, landing_table: l, agg_table: a, "
            "aggregate: {total: {fn: sum}}}",
            "sink 'out' (type 'postgres_aggregate'): field 'aggregate.total': 'sum' needs 'from': the input column "
            "it aggregates (got {'fn': 'sum'})",
        ),
        (
            "{type: postgres_aggregate, from: src, primary_key: id, landing_table: l, agg_table: a, aggregate: {}}",
            "sink 'out' (type 'postgres_aggregate'): field 'aggregate': Dictionary should have at least 1 item after "
            "validation, not 0 (got {})",
        ),
        (
            "{type: postgres_aggregate, from: src, primary_key: id, landing_table: l, agg_table: a, "
            "group_by: {who: {from: nobody}}, aggregate: {n: {fn: count}}}",
            "postgres_aggregate sink 'out': group_by 'who' reads column 'nobody', which is not in the input",
        ),
    ],
)
def test_validation_errors(spark, make_settings, write_pipeline, pg_connect, sink: str, message: str) -> None:
    """Validation names node, field and value — and never touches the database (no table appears)."""
    path = write_pipeline(f"""
        sources:
          src: {{type: generator, rows: 10}}
        sinks:
          out: {sink}
        """)
    report = validate_pipeline(path, make_settings(), spark)
    assert report.errors == [message]
    assert fetch(
        pg_connect, "SELECT count(*) FROM pg_tables WHERE schemaname = 'public' AND tablename IN ('t', 'l', 'a')"
    ) == [(0,)]


def test_aggregate_sink_totals_with_deletes_and_duplicates(
    spark, pg_settings, write_pipeline, pg_connect, schema
) -> None:
    """Keys are inserted, then updated or (every third) deleted; every fifth record arrives twice.
    Each distinct (key, op) counts once: count +1/0/-1, sum +/+/-, avg from both, min/max over i/u."""
    source = {"rows": 400, "key_space": 200, "record_batch_size": 90}
    settings = pg_settings()
    cdc = "CASE WHEN _gs_op = 'u' AND id % 3 = 0 THEN 'd' ELSE _gs_op END AS _gs_op"
    path = write_pipeline(f"""
        sources:
          src: {{type: generator, rows: 400, key_space: 200, record_batch_size: 90}}
        transforms:
          changes:
            type: sql
            primary_key: id
            sql: >
              SELECT id, name, amount, {cdc} FROM src
              UNION ALL SELECT id, name, amount, {cdc} FROM src WHERE id % 5 = 0
        sinks:
          by_name:
            type: postgres_aggregate
            from: changes
            schema: {schema}
            landing_table: landing
            agg_table: by_name
            group_by: {{who: {{from: name}}}}
            aggregate:
              n: {{fn: count}}
              total: {{from: amount, fn: sum}}
              mean: {{from: amount, fn: AVG}}
              low: {{from: amount, fn: min}}
              high: {{from: amount, fn: max}}
          overall:
            type: postgres_aggregate
            from: changes
            schema: {schema}
            landing_table: landing_all
            agg_table: overall
            aggregate:
              n: {{fn: count, type: integer}}
        """)
    run_pipeline(path, settings, spark)
    events = {}
    for row in generated(source, settings):
        op = "d" if row["_gs_op"] == "u" and row["id"] % 3 == 0 else row["_gs_op"]
        events[(row["id"], op)] = {**row, "_gs_op": op}
    expected: dict[str, dict[str, Any]] = {}
    for row in events.values():
        group = expected.setdefault(row["name"], {"n": 0, "total": 0.0, "kept": []})
        sign = {"i": 1, "u": 0, "d": -1}[row["_gs_op"]]
        group["n"] += sign
        group["total"] += -row["amount"] if row["_gs_op"] == "d" else row["amount"]
        if row["_gs_op"] != "d":
            group["kept"].append(row["amount"])
    got = fetch(
        pg_connect,
        f'SELECT who, n, total, mean_sum, mean_count, mean, low, high FROM "{schema}".by_name ORDER BY who',
    )
    assert [g[0] for g in got] == sorted(expected)
    for who, n, total, mean_sum, mean_count, mean, low, high in got:
        want = expected[who]
        assert n == mean_count == want["n"], who
        assert total == pytest.approx(want["total"]) and mean_sum == pytest.approx(want["total"])
        assert mean == (pytest.approx(want["total"] / want["n"]) if want["n"] else None)
        assert (low, high) == (min(want["kept"]), max(want["kept"]))
    assert fetch(pg_connect, f'SELECT _gs_group, n FROM "{schema}".overall') == [
        ("all", sum(g["n"] for g in expected.values()))
    ]
    assert sum(g["n"] for g in expected.values()) == 200 - 66  # inserts minus the deleted third
    # Once epoch 5 (the last) is finalized, landing rows of epochs <= 4 are pruned.
    assert fetch(pg_connect, f'SELECT DISTINCT _gs_checkpoint_epoch FROM "{schema}".landing') == [(5,)]


def test_u256_and_i256_sql_functions_land_as_exact_numeric_78(
    spark, pg_settings, write_pipeline, pg_connect, schema
) -> None:
    path = write_pipeline(f"""
        sources:
          src: {{type: generator, rows: 5}}
        transforms:
          amounts:
            type: sql
            primary_key: id
            sql: >
              SELECT id, U256(concat(CAST(id AS STRING), repeat('0', 70))) AS wei, I256(-id) AS debt,
                     U256(concat('0x', repeat('f', 64))) AS top
              FROM src
        sinks:
          out: {{type: postgres, from: amounts, schema: {schema}, table: amounts}}
        """)
    run_pipeline(path, pg_settings(), spark)
    kinds = fetch(
        pg_connect,
        "SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = %s::regclass "
        "AND attname IN ('wei', 'debt', 'top') ORDER BY attname",
        (f'"{schema}".amounts',),
    )
    assert kinds == [("debt", "numeric(78,0)"), ("top", "numeric(78,0)"), ("wei", "numeric(78,0)")]
    rows = fetch(pg_connect, f'SELECT id, wei::text, debt::text, top::text FROM "{schema}".amounts ORDER BY id')
    assert rows == [(i, f"{i}{'0' * 70}", str(-i), str(2**256 - 1)) for i in range(1, 6)]


def test_out_of_range_u256_stops_the_pipeline_naming_the_value(
    spark, pg_settings, write_pipeline, pg_connect, schema
) -> None:
    path = write_pipeline(f"""
        sources:
          src: {{type: generator, rows: 5}}
        transforms:
          amounts:
            type: sql
            primary_key: id
            sql: SELECT id, U256(CAST(-id AS STRING)) AS wei FROM src
        sinks:
          out: {{type: postgres, from: amounts, schema: {schema}, table: amounts}}
        """)
    with pytest.raises(StreamlingError) as caught:
        run_pipeline(path, pg_settings(), spark)
    assert "SQL function to_u256: '-1' is out of range for u256" in str(caught.value)
    assert fetch(pg_connect, f'SELECT count(*) FROM "{schema}".amounts') == [(0,)]


def test_aggregate_sink_parallelism_writes_key_hashed_streams(
    spark, pg_settings, write_pipeline, pg_connect, schema
) -> None:
    """The original's `parallelism` on postgres_aggregate: the landing table is written by that many streams,
    each recording its epochs, and the aggregates come out the same."""
    settings = pg_settings()
    path = write_pipeline(f"""
        sources:
          src: {{type: generator, rows: 600, record_batch_size: 200, primary_key: id}}
        sinks:
          par:
            type: postgres_aggregate
            from: src
            schema: {schema}
            landing_table: landing
            agg_table: by_name
            parallelism: 3
            group_by: {{who: {{from: name}}}}
            aggregate:
              n: {{fn: count}}
              total: {{from: amount, fn: sum}}
        """)
    run_pipeline(path, settings, spark)
    expected: dict[str, list[float]] = {}
    for row in generated({"rows": 600}, settings):
        expected.setdefault(row["name"], []).append(row["amount"])
    got = fetch(pg_connect, f'SELECT who, n, total FROM "{schema}".by_name ORDER BY who')
    assert [(w, n) for w, n, _ in got] == [(w, len(expected[w])) for w in sorted(expected)]
    assert all(total == pytest.approx(sum(expected[w])) for w, _, total in got)
    streams = fetch(
        pg_connect,
        f'SELECT DISTINCT stream, streams FROM "{schema}"._streamling_progress WHERE sink = %s ORDER BY stream',
        ("par",),
    )
    assert streams == [(0, 3), (1, 3), (2, 3)]
