"""The Postgres sink, and the Postgres state backend, ride out a server restart and a read-only period without
restarting the pipeline.

Unique ids (no key_space) make the table an append-style log: after a clean stop, its row count must
equal the committed source offset exactly — nothing lost, nothing written twice.
"""

from __future__ import annotations

import logging
import time
import uuid

import pytest

from streamling.state.sqlite import SqliteStateBackend
from tests.conftest import services
from tests.integration.streaming import Background


@pytest.fixture
def schema(pg_connect):
    name = f"r_{uuid.uuid4().hex[:10]}"
    yield name
    with pg_connect() as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


def _count(pg_connect, schema: str) -> int:
    try:
        with pg_connect() as conn:
            return conn.execute(f'SELECT count(*) FROM "{schema}".events').fetchone()[0]
    except Exception:  # the server is down or the table not created yet
        return -1


def _start(write_pipeline, make_settings, postgres_env, spark, schema: str, **settings: object) -> Background:
    path = write_pipeline(f"""
        sources:
          src: {{type: generator, rows_per_second: 2000}}
        sinks:
          out: {{type: postgres, from: src, primary_key: id, schema: {schema}, table: events}}
        """)
    return Background(
        path, make_settings(environ=postgres_env, **{"postgres_sink.retry_timeout_sec": 120, **settings}), spark
    )


def _committed_offset(tmp_path) -> int:
    with SqliteStateBackend("local_app_v1", str(tmp_path / "state.db")) as state:
        return int(state.get("src:generator")["offset"])


def _assert_exact(pg_connect, schema: str, tmp_path, offset: int | None = None) -> None:
    offset = _committed_offset(tmp_path) if offset is None else offset
    with pg_connect() as conn:
        count, low, high = conn.execute(f'SELECT count(*), min(id), max(id) FROM "{schema}".events').fetchone()
    assert (count, low, high) == (offset, 1, offset)


def test_server_restart_mid_run_recovers_by_itself(
    spark, make_settings, write_pipeline, postgres_env, pg_connect, schema, tmp_path
) -> None:
    run = _start(write_pipeline, make_settings, postgres_env, spark, schema)
    run.wait_until(lambda: _count(pg_connect, schema) > 0)
    services("down", "postgres")
    time.sleep(1.0)
    services("up", "postgres")
    after_restart = _count(pg_connect, schema)
    run.wait_until(lambda: _count(pg_connect, schema) > after_restart + 2000, timeout=120)
    summary = run.finish()
    assert summary.sources["src"].epochs >= 2
    _assert_exact(pg_connect, schema, tmp_path)


def test_read_only_database_then_writable_again_loses_nothing(
    spark, make_settings, write_pipeline, postgres_env, pg_connect, schema, tmp_path
) -> None:
    run = _start(write_pipeline, make_settings, postgres_env, spark, schema)
    run.wait_until(lambda: _count(pg_connect, schema) > 0)
    with pg_connect() as admin:
        admin.execute("ALTER SYSTEM SET default_transaction_read_only = on")
        admin.execute("SELECT pg_reload_conf()")
        admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'streamling'")
    try:
        time.sleep(1.0)
        frozen = _count(pg_connect, schema)
        time.sleep(2.0)
        assert _count(pg_connect, schema) == frozen, "writes went through a read-only database"
    finally:
        with pg_connect() as admin:
            admin.execute("SET default_transaction_read_only = off")
            admin.execute("ALTER SYSTEM RESET default_transaction_read_only")
            admin.execute("SELECT pg_reload_conf()")
    run.wait_until(lambda: _count(pg_connect, schema) > frozen + 2000, timeout=120)
    run.finish()
    _assert_exact(pg_connect, schema, tmp_path)


def test_a_failover_to_read_only_and_back_is_recovered_on_fresh_sessions(
    spark, make_settings, write_pipeline, postgres_env, pg_connect, schema, tmp_path, caplog
) -> None:
    """What a failover or a maintenance window does: the database is made read-only for new sessions only
    (`ALTER DATABASE … SET`), every session is cut, and later the setting is reset. Sessions opened meanwhile stay
    read-only for their whole life (SQLSTATE 25006), so both the sink and the Postgres state backend must open fresh
    ones rather than retry on them; each outage is one WARNING when it starts and one when it ends."""
    app = f"failover_{schema}"
    database = postgres_env["STREAMLING__STATE_BACKEND__POSTGRES__DATABASE"]
    caplog.set_level(logging.DEBUG, logger="streamling.postgres")
    run = _start(
        write_pipeline,
        make_settings,
        postgres_env,
        spark,
        schema,
        **{"application_id": app, "state_backend.backend_type": "Postgres"},
    )
    run.wait_until(lambda: _count(pg_connect, schema) > 0)
    refused = "in a read-only transaction"
    try:
        with pg_connect() as admin:
            admin.execute(f'ALTER DATABASE "{database}" SET default_transaction_read_only = on')
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'streamling'"
            )
        # Retries on read-only sessions, long enough for the sink's backoff to grow past its first steps.
        run.wait_until(lambda: sum(refused in r.getMessage() for r in caplog.records) >= 4, timeout=60)
        frozen = _count(pg_connect, schema)
    finally:
        with pg_connect() as admin:
            admin.execute("SET default_transaction_read_only = off")  # this new session started read-only
            admin.execute(f'ALTER DATABASE "{database}" RESET default_transaction_read_only')
    writable = time.monotonic()
    run.wait_until(lambda: _count(pg_connect, schema) > frozen + 2000, timeout=60)
    recovered_in = time.monotonic() - writable
    run.finish()
    with pg_connect() as conn:
        (offset,) = conn.execute(
            "SELECT (data->>'offset')::bigint FROM streamling.state WHERE namespace = %s AND key = 'src:generator'",
            (app,),
        ).fetchone()
    _assert_exact(pg_connect, schema, tmp_path, offset)
    assert recovered_in < 30, recovered_in  # the backoff's 10 s cap, not a session that stays read-only
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    started = [w for w in warnings if "; retrying for up to " in w]
    ended = [w for w in warnings if ": recovered after " in w]
    assert started and len(started) == len(ended), warnings
    assert {w.split(":")[0] for w in started} == {w.split(":")[0] for w in ended}
    assert any(w.startswith("postgres sink 'out': ") for w in started), started


def test_postgres_state_backend_rides_out_a_server_restart(
    spark, make_settings, write_pipeline, postgres_env, pg_connect, schema, tmp_path
) -> None:
    """Positions kept in Postgres too: commits during the restart wait it out instead of failing the run."""
    app = f"restart_{schema}"
    run = _start(
        write_pipeline,
        make_settings,
        postgres_env,
        spark,
        schema,
        **{
            "application_id": app,
            "state_backend.backend_type": "Postgres",
            "state_backend.postgres.retry_timeout_sec": 120,
        },
    )

    def committed() -> int:
        try:
            with pg_connect() as conn:
                row = conn.execute(
                    "SELECT data->>'offset' FROM streamling.state WHERE namespace = %s AND key = 'src:generator'",
                    (app,),
                ).fetchone()
        except Exception:  # the server is down
            return -1
        return int(row[0]) if row else 0

    run.wait_until(lambda: committed() > 0)
    services("down", "postgres")
    time.sleep(1.0)
    services("up", "postgres")
    after_restart = committed()
    run.wait_until(lambda: committed() > after_restart + 2000, timeout=120)
    run.finish()
    _assert_exact(pg_connect, schema, tmp_path, committed())
