"""Dynamic tables end to end: real pipelines in job mode on the shared SparkSession, a real Postgres for
the Postgres backend, rows collected in-process by the `test.collect` sink."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

import pytest

from streamling import run_pipeline, validate_pipeline
from streamling.errors import StreamlingError
from tests.integration.collect_sink import COLLECTED

pytestmark = pytest.mark.integration

SCHEMA = "{id: bigint, tag: string}"  # tag is one of tag_0 … tag_999


def unique(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:10]}"


def rows_by_epoch(key: str) -> dict[int, list[dict]]:
    epochs: dict[int, list[dict]] = {}
    for epoch, row in COLLECTED[key]:
        epochs.setdefault(epoch, []).append(row)
    return epochs


def expected_hits(all_rows: dict[int, list[dict]], watched: Callable[[dict], bool]) -> set[int]:
    """Ids a filter on the table keeps: each epoch sees the values of its own and earlier epochs."""
    table: set[str] = set()
    hits: set[int] = set()
    for epoch in sorted(all_rows):
        table |= {row["tag"] for row in all_rows[epoch] if watched(row)}
        hits |= {row["id"] for row in all_rows[epoch] if row["tag"] in table}
    return hits


def watch_pipeline(backend: str, table: str, schema: str, key: str) -> str:
    return f"""
        sources:
          src: {{type: generator, rows: 300, record_batch_size: 100, schema: {SCHEMA}}}
        transforms:
          watch:
            type: dynamic_table
            backend_type: {backend}
            backend_entity_name: {table}
            schema: {schema}
            sql: SELECT lower(tag) FROM src WHERE id % 7 = 0
          hits:
            type: sql
            primary_key: id
            sql: SELECT id, tag FROM src WHERE dynamic_table_check('watch', tag)
        sinks:
          out: {{type: test.collect, from: hits, options: {{key: {key}_hits}}}}
          all: {{type: test.collect, from: src, options: {{key: {key}_all}}}}
        """


def test_sql_filled_postgres_table_dedups_and_filters_in_the_same_epoch(
    spark, make_settings, write_pipeline, postgres_env, pg_connect
) -> None:
    schema, table, key = unique("dt_schema"), unique("watch"), unique("pg")
    path = write_pipeline(watch_pipeline("postgres", table, schema, key))
    summary = run_pipeline(path, make_settings(environ=postgres_env, job_mode=True), spark)

    all_rows = rows_by_epoch(f"{key}_all")
    assert sorted(all_rows) == [1, 2, 3]
    watched = {row["tag"] for rows in all_rows.values() for row in rows if row["id"] % 7 == 0}
    hits = {row["id"] for _, row in COLLECTED[f"{key}_hits"]}
    assert hits == expected_hits(all_rows, lambda row: row["id"] % 7 == 0)
    assert {i for i in range(1, 301) if i % 7 == 0} <= hits  # a row's own value is visible in its epoch
    assert len(hits) < 300
    # Every hit arrived in the epoch of its row, not later.
    epoch_of = {row["id"]: epoch for epoch, rows in all_rows.items() for row in rows}
    assert all(epoch == epoch_of[row["id"]] for epoch, row in COLLECTED[f"{key}_hits"])
    assert summary.sink_rows["out"] == len(hits)

    # A second run under another application id replays the same rows: the table still holds each value once.
    run_pipeline(path, make_settings(environ=postgres_env, job_mode=True, application_id=unique("again")), spark)
    with pg_connect() as conn:
        stored = [r[0] for r in conn.execute(f'SELECT value FROM "{schema}"."{table}"').fetchall()]
        primary = conn.execute(
            "SELECT count(*) FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid "
            "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relname = %s "
            "AND i.indisprimary",
            (schema, table),
        ).fetchone()[0]
        conn.execute(f'DROP SCHEMA "{schema}" CASCADE')
    assert sorted(stored) == sorted(watched)
    assert primary == 1


def test_dynamic_table_backend_postgres_settings_are_the_tables_connection(
    spark, make_settings, write_pipeline, postgres_env, pg_connect
) -> None:
    """``dynamic_table_backend.postgres`` names the server; `postgres_sink` (here a closed port) is not used."""
    schema, table, key = unique("dt_own"), unique("watch"), unique("own")
    prefix = "STREAMLING__POSTGRES_SINK__"
    own = {
        "STREAMLING__DYNAMIC_TABLE_BACKEND__POSTGRES__" + name.removeprefix(prefix): value
        for name, value in postgres_env.items()
        if name.startswith(prefix)
    }
    settings = make_settings(environ=own, job_mode=True, postgres_sink__port=1, postgres_sink__retry_timeout_sec=1)
    run_pipeline(write_pipeline(watch_pipeline("postgres", table, schema, key)), settings, spark)
    with pg_connect() as conn:
        stored = conn.execute(f'SELECT count(*) FROM "{schema}"."{table}"').fetchone()[0]
        conn.execute(f'DROP SCHEMA "{schema}" CASCADE')
    assert stored > 0
    assert COLLECTED[f"{key}_hits"]


def test_external_inserts_are_visible_to_a_later_run(
    spark, make_settings, write_pipeline, postgres_env, pg_connect
) -> None:
    table, key = unique("ext"), unique("ext")
    text = f"""
        sources:
          src: {{type: generator, rows: 200, schema: {SCHEMA}}}
        transforms:
          ext: {{type: dynamic_table, backend_type: Postgres, backend_entity_name: {table}}}
          hits:
            type: sql
            primary_key: id
            sql: SELECT id, tag FROM src WHERE dynamic_table_check('ext', tag)
        sinks:
          out: {{type: test.collect, from: hits, options: {{key: KEY}}}}
          all: {{type: test.collect, from: src, options: {{key: KEY_all}}}}
        """
    run_pipeline(
        write_pipeline(text.replace("KEY", f"{key}_1")), make_settings(environ=postgres_env, job_mode=True), spark
    )
    assert COLLECTED.get(f"{key}_1", []) == []  # created empty on start, filled only from outside
    first, second = sorted({row["tag"] for _, row in COLLECTED[f"{key}_1_all"]})[:2]

    with pg_connect() as conn:
        assert conn.execute(f'SELECT count(*) FROM public."{table}"').fetchone()[0] == 0
        conn.execute(f'INSERT INTO public."{table}" (value) VALUES (%s), (%s)', (first, second))
    settings = make_settings(environ=postgres_env, job_mode=True, application_id=unique("later"))
    run_pipeline(write_pipeline(text.replace("KEY", f"{key}_2")), settings, spark)
    with pg_connect() as conn:
        conn.execute(f'DROP TABLE public."{table}"')
    tags = {row["tag"] for _, row in COLLECTED[f"{key}_2"]}
    assert tags == {first, second}


def test_list_argument_is_true_when_any_element_is_present_and_null_stays_null(
    spark, make_settings, write_pipeline, postgres_env, pg_connect
) -> None:
    table, key = unique("lists"), unique("lists")
    with pg_connect() as conn:
        conn.execute(f'CREATE TABLE public."{table}" (value TEXT PRIMARY KEY)')
        conn.execute(f'INSERT INTO public."{table}" (value) VALUES (%s), (%s)', ("needle", "tag_3"))
    path = write_pipeline(f"""
        sources:
          src: {{type: generator, rows: 2000, schema: {SCHEMA}}}
        transforms:
          t: {{type: dynamic_table, backend_type: Postgres, backend_entity_name: {table}}}
          checked:
            type: sql
            primary_key: id
            sql: |
              SELECT id, tag,
                     dynamic_table_check('t', make_array(tag, 'needle')) AS with_needle,
                     dynamic_table_check('t', array(tag, 'nothing')) AS with_tag,
                     dynamic_table_check('t', CASE WHEN id % 3 = 0 THEN NULL ELSE array(tag) END) AS null_list,
                     dynamic_table_check('t', CASE WHEN id % 3 = 0 THEN NULL ELSE tag END) AS null_value
              FROM src
        sinks:
          out: {{type: test.collect, from: checked, options: {{key: {key}}}}}
        """)
    run_pipeline(path, make_settings(environ=postgres_env, job_mode=True), spark)
    with pg_connect() as conn:
        conn.execute(f'DROP TABLE public."{table}"')
    rows = [row for _, row in COLLECTED[key]]
    assert len(rows) == 2000
    assert any(row["tag"] == "tag_3" for row in rows)
    for row in rows:
        assert row["with_needle"] is True
        assert row["with_tag"] is (row["tag"] == "tag_3")
        expected = None if row["id"] % 3 == 0 else row["tag"] == "tag_3"
        assert row["null_list"] is expected
        assert row["null_value"] is expected


def test_in_memory_table_filled_by_sql_filters_in_the_same_epoch(spark, make_settings, write_pipeline) -> None:
    key = unique("mem")
    path = write_pipeline(watch_pipeline("InMemory", "watch", "public", key))
    run_pipeline(path, make_settings(job_mode=True), spark)
    all_rows = rows_by_epoch(f"{key}_all")
    hits = {row["id"] for _, row in COLLECTED[f"{key}_hits"]}
    assert hits == expected_hits(all_rows, lambda row: row["id"] % 7 == 0)
    assert {i for i in range(1, 301) if i % 7 == 0} <= hits
    epoch_of = {row["id"]: epoch for epoch, rows in all_rows.items() for row in rows}
    assert all(epoch == epoch_of[row["id"]] for epoch, row in COLLECTED[f"{key}_hits"])


def test_in_memory_table_filled_by_column_from_another_source(spark, make_settings, write_pipeline) -> None:
    """The watchlist comes from one source and is checked by a transform over another: rows of `events`
    see every tag the (earlier, smaller) `watchlist` source has delivered when their epoch starts."""
    key = unique("memcol")
    path = write_pipeline(f"""
        sources:
          watchlist: {{type: generator, rows: 5, seed: 3, schema: {SCHEMA}}}
          events: {{type: generator, rows: 3000, rows_per_second: 1000, schema: {SCHEMA}}}
        transforms:
          watch: {{type: dynamic_table, backend_type: inmemory, backend_entity_name: w, from: watchlist, column: tag}}
          hits:
            type: sql
            primary_key: id
            sql: SELECT id, tag FROM events WHERE dynamic_table_check('watch', tag)
        sinks:
          out: {{type: test.collect, from: hits, options: {{key: {key}_hits}}}}
          list: {{type: test.collect, from: watchlist, options: {{key: {key}_list}}}}
        """)
    run_pipeline(path, make_settings(job_mode=True), spark)
    watched = {row["tag"] for _, row in COLLECTED[f"{key}_list"]}
    hit_tags = {row["tag"] for _, row in COLLECTED.get(f"{key}_hits", [])}
    assert hit_tags <= watched
    assert hit_tags  # the watchlist's single epoch lands long before the last events epoch


def test_lookups_are_batched_one_query_per_max_batch_size_distinct_values(
    spark, make_settings, write_pipeline, postgres_env, pg_connect
) -> None:
    """Counted on the Postgres side: the test creates the backing table itself without an index (the
    runtime's CREATE TABLE IF NOT EXISTS leaves it alone), so every lookup SELECT is exactly one
    sequential scan in `pg_stat_user_tables.seq_scan`. A worker's statistics are flushed when its
    backend exits, so the test terminates the lookup connections (found by their last query text) and
    waits for them to go before reading the counter."""
    table, key = unique("batched"), unique("batched")
    with pg_connect() as conn:
        conn.execute(f'CREATE TABLE public."{table}" (value TEXT)')
        conn.execute(
            f'INSERT INTO public."{table}" (value) SELECT %s || g FROM generate_series(0, 999, 3) g', ("tag_",)
        )
    path = write_pipeline(f"""
        sources:
          src: {{type: generator, rows: 1000, partitions: 1, schema: {SCHEMA}}}
        transforms:
          t: {{type: dynamic_table, backend_type: Postgres, backend_entity_name: {table}}}
          checked:
            type: sql
            primary_key: id
            sql: SELECT id, tag, dynamic_table_check('t', tag) AS hit FROM src
        sinks:
          out: {{type: test.collect, from: checked, options: {{key: {key}}}}}
        """)
    settings = make_settings(
        environ={**postgres_env, "STREAMLING__DYNAMIC_TABLE_BACKEND__MAX_BATCH_SIZE": "100"}, job_mode=True
    )
    run_pipeline(path, settings, spark)
    rows = [row for _, row in COLLECTED[key]]
    assert len(rows) == 1000
    assert all(row["hit"] is (int(row["tag"].removeprefix("tag_")) % 3 == 0) for row in rows)
    distinct = len({row["tag"] for row in rows})

    with pg_connect() as conn:
        conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid <> pg_backend_pid() AND query LIKE %s",
            (f"%{table}%",),
        )
        deadline = time.monotonic() + 30
        while conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE pid <> pg_backend_pid() AND query LIKE %s", (f"%{table}%",)
        ).fetchone()[0]:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        time.sleep(0.5)
        conn.execute("SELECT pg_stat_clear_snapshot()")
        scans = conn.execute(
            "SELECT seq_scan FROM pg_stat_user_tables WHERE schemaname = 'public' AND relname = %s", (table,)
        ).fetchone()[0]
        conn.execute(f'DROP TABLE public."{table}"')
    # One partition, one Arrow batch per epoch (1000 rows < maxRecordsPerBatch): ceil(distinct / 100) queries.
    assert scans == -(-distinct // 100)
    assert scans < 10


def test_validation_never_touches_postgres_and_checks_the_sql_shape(spark, make_settings, write_pipeline) -> None:
    """The Postgres connection points at a closed port: validation still passes for a sound pipeline."""
    text = """
        sources:
          src: {type: generator, rows: 10, schema: {id: bigint, tag: string}}
        transforms:
          watch: {type: dynamic_table, backend_type: Postgres, backend_entity_name: w, sql: "SQL"}
          hits:
            type: sql
            primary_key: id
            sql: SELECT * FROM src WHERE dynamic_table_check('watch', tag)
        sinks:
          out: {type: print, from: hits}
        """
    settings = make_settings(postgres_sink__port=1, postgres_sink__connect_timeout_sec=1)
    good = validate_pipeline(
        write_pipeline(text.replace("SQL", "SELECT upper(tag) FROM src WHERE id > 3")), settings, spark
    )
    assert good.errors == []
    two = validate_pipeline(write_pipeline(text.replace("SQL", "SELECT tag, id FROM src")), settings, spark)
    assert two.errors == [
        "dynamic table 'watch': sql must yield exactly one string column, got tag string, id bigint; "
        "cast it with CAST(... AS STRING) or lower(...)"
    ]
    number = validate_pipeline(write_pipeline(text.replace("SQL", "SELECT id FROM src")), settings, spark)
    assert number.errors == [
        "dynamic table 'watch': sql must yield exactly one string column, got id bigint; "
        "cast it with CAST(... AS STRING) or lower(...)"
    ]
    grouped = validate_pipeline(write_pipeline(text.replace("SQL", "SELECT max(tag) FROM src")), settings, spark)
    assert grouped.errors[0].startswith("dynamic table 'watch': aggregation")


def test_unreachable_postgres_fails_on_start_naming_the_node(spark, make_settings, write_pipeline) -> None:
    path = write_pipeline("""
        sources:
          src: {type: generator, rows: 10}
        transforms:
          watch: {type: dynamic_table, backend_type: Postgres, backend_entity_name: w}
          hits: {type: sql, primary_key: id, sql: "SELECT * FROM src WHERE dynamic_table_check('watch', name)"}
        sinks:
          out: {type: blackhole, from: hits}
        """)
    settings = make_settings(
        job_mode=True,
        postgres_sink__port=1,
        postgres_sink__pass="s3cret-pw",
        postgres_sink__connect_timeout_sec=1,
        postgres_sink__retry_timeout_sec=1,
    )
    with pytest.raises(StreamlingError) as info:
        run_pipeline(path, settings, spark)
    assert "dynamic table 'watch'" in str(info.value)
    assert "s3cret-pw" not in str(info.value)


def test_cache_ttl_reuses_answers_for_that_long_and_zero_reads_every_time(
    make_settings, postgres_env, pg_connect
) -> None:
    """The executor-side lookup, called in-process against a real table."""
    from streamling.postgres.dynamic_tables import PostgresLookup, PostgresTable

    table = unique("ttl")
    settings = make_settings(environ=postgres_env)
    with pg_connect() as conn:
        conn.execute(f'CREATE TABLE public."{table}" (value TEXT PRIMARY KEY)')

    def lookup(ttl_ms: float) -> PostgresLookup:
        connection = settings.postgres_connection("t")
        return PostgresLookup(PostgresTable("t", connection, "public", table, cache_ttl_ms=ttl_ms))

    cached, uncached = lookup(1500), lookup(0)
    assert cached.contains(["a", "b"]) == set() == uncached.contains(["a", "b"])
    with pg_connect() as conn:
        conn.execute(f'INSERT INTO public."{table}" (value) VALUES (%s)', ("a",))
    assert uncached.contains(["a", "b"]) == {"a"}  # no cache: the insert is visible at once
    assert cached.contains(["a", "b"]) == set()  # the answer from before the insert is reused
    time.sleep(1.6)
    assert cached.contains(["a", "b"]) == {"a"}
    with pg_connect() as conn:
        conn.execute(f'DROP TABLE public."{table}"')


# ---- fields of the original Streamling: column, time_column, cache, cache_refresh_debounce_ms ----


def test_column_and_time_column_name_the_postgres_table_s_columns(
    spark, make_settings, write_pipeline, postgres_env, pg_connect
) -> None:
    schema, table, key = unique("dt_schema"), unique("watch"), unique("cols")
    path = write_pipeline(f"""
        sources:
          src: {{type: generator, rows: 300, record_batch_size: 100, schema: {SCHEMA}}}
        transforms:
          watch:
            type: dynamic_table
            backend_type: Postgres
            backend_entity_name: {table}
            schema: {schema}
            column: addr
            time_column: added_at
            cache: true
            cache_refresh_debounce_ms: 0
            sql: SELECT lower(tag) FROM src WHERE id % 7 = 0
          hits:
            type: sql
            primary_key: id
            sql: SELECT id, tag FROM src WHERE dynamic_table_check('watch', tag)
        sinks:
          out: {{type: test.collect, from: hits, options: {{key: {key}_hits}}}}
          all: {{type: test.collect, from: src, options: {{key: {key}_all}}}}
        """)
    run_pipeline(path, make_settings(environ=postgres_env, job_mode=True), spark)
    all_rows = rows_by_epoch(f"{key}_all")
    hits = {row["id"] for _, row in COLLECTED[f"{key}_hits"]}
    assert hits == expected_hits(all_rows, lambda row: row["id"] % 7 == 0)  # this run's appends seen at once
    with pg_connect() as conn:
        columns = conn.execute(
            "SELECT column_name, data_type, is_nullable FROM information_schema.columns "
            "WHERE table_schema = %s AND table_name = %s ORDER BY ordinal_position",
            (schema, table),
        ).fetchall()
        stored = conn.execute(f'SELECT count(*), count(DISTINCT added_at) FROM "{schema}"."{table}"').fetchone()
    assert columns == [("addr", "text", "NO"), ("added_at", "timestamp with time zone", "NO")]
    watched = {row["tag"] for rows in all_rows.values() for row in rows if row["id"] % 7 == 0}
    assert stored == (len(watched), len(watched))  # clock_timestamp() per row: every append is later


def test_cache_holds_the_table_and_tops_it_up_by_time_column(make_settings, postgres_env, pg_connect) -> None:
    """The executor-side lookup, called in-process against a real table: loaded once, topped up with rows newer
    than the largest time_column after the debounce, and at once after the pipeline's own appends."""
    from streamling.postgres.dynamic_tables import PostgresLookup, PostgresTable, PostgresWriter

    table = unique("cached")
    settings = make_settings(environ=postgres_env)
    target = PostgresTable(
        "t",
        settings.postgres_connection("t"),
        "public",
        table,
        column="addr",
        time_column="added_at",
        cache=True,
        refresh_ms=1000,
    )
    writer = PostgresWriter(target)
    writer.create()

    def outside(value: str) -> None:
        """Another writer, following the protocol: the advisory lock, then clock_timestamp()."""
        with pg_connect() as conn, conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (f"public.{table}",))
            conn.execute(f'INSERT INTO public."{table}" (addr, added_at) VALUES (%s, clock_timestamp())', (value,))

    try:
        writer.add(["a"])
        assert PostgresLookup(target, 1).contains(["a", "b"]) == {"a"}
        outside("b")
        with pg_connect() as conn:
            conn.execute(f'DELETE FROM public."{table}" WHERE addr = %s', ("a",))
        # Within the debounce the worker answers from its copy: no query (the deleted 'a' is still there).
        assert PostgresLookup(target, 1).contains(["a", "b"]) == {"a"}
        writer.add(["c"])  # the pipeline's own append: a new generation tops the copy up at once
        assert PostgresLookup(target, 2).contains(["a", "b", "c"]) == {"a", "b", "c"}
        outside("d")
        assert PostgresLookup(target, 2).contains(["d"]) == set()
        time.sleep(1.1)
        assert PostgresLookup(target, 2).contains(["d"]) == {"d"}
    finally:
        with pg_connect() as conn:
            conn.execute(f'DROP TABLE public."{table}"')


@pytest.mark.parametrize("cache_enabled", [True, False])
def test_the_backend_s_cache_settings_are_the_defaults_of_a_table(
    make_settings, postgres_env, pg_connect, cache_enabled: bool
) -> None:
    """``dynamic_table_backend.postgres.cache_enabled`` / ``cache_refresh_debounce_ms`` (the original's global
    defaults) for a table that sets neither: cached, a row deleted outside is still answered from the worker's
    copy within the debounce; not cached, the table is asked every batch."""
    from streamling.postgres.dynamic_tables import PostgresLookup, PostgresWriter
    from streamling.sql.dynamic_tables.transform import DynamicTable, DynamicTableSpec

    table = unique("defaults")
    settings = make_settings(
        environ={
            **postgres_env,
            "STREAMLING__DYNAMIC_TABLE_BACKEND__POSTGRES__CACHE_ENABLED": str(cache_enabled).lower(),
            "STREAMLING__DYNAMIC_TABLE_BACKEND__POSTGRES__CACHE_REFRESH_DEBOUNCE_MS": "60s",
        }
    )
    spec = DynamicTableSpec.model_validate(
        {"type": "dynamic_table", "backend_type": "Postgres", "backend_entity_name": table, "time_column": "at"}
    )
    target = DynamicTable("t", spec, settings).postgres
    assert (target.cached, target.refresh_ms) == (cache_enabled, 60_000)
    writer = PostgresWriter(target)
    writer.create()
    try:
        writer.add(["a"])
        assert PostgresLookup(target, 1).contains(["a"]) == {"a"}
        with pg_connect() as conn:
            conn.execute(f'DELETE FROM public."{table}" WHERE value = %s', ("a",))
        assert PostgresLookup(target, 1).contains(["a"]) == ({"a"} if cache_enabled else set())
    finally:
        with pg_connect() as conn:
            conn.execute(f'DROP TABLE public."{table}"')


def test_an_existing_table_without_the_configured_columns_fails_naming_them(
    make_settings, postgres_env, pg_connect
) -> None:
    from streamling.postgres.dynamic_tables import PostgresTable, PostgresWriter

    table = unique("old")
    settings = make_settings(environ=postgres_env)
    with pg_connect() as conn:
        conn.execute(f'CREATE TABLE public."{table}" (value TEXT PRIMARY KEY)')
    writer = PostgresWriter(PostgresTable("t", settings.postgres_connection("t"), "public", table, time_column="at"))
    try:
        with pytest.raises(StreamlingError) as caught:
            writer.create()
        assert caught.value.user_facing
        assert caught.value.message == (
            f"dynamic table 't': table public.{table} has no column 'at'; it has value "
            "(set 'column' / 'time_column' to its columns)"
        )
    finally:
        with pg_connect() as conn:
            conn.execute(f'DROP TABLE public."{table}"')
