"""Effectively-once into Postgres, proven with the CLI killed by SIGKILL at chosen points of an epoch.

The target table carries a row-level audit trigger (an append-only log of every insert/update the sink
performs), and an aggregation sink counts rows: a replayed epoch that was applied again would show up
as extra audit rows and an inflated count. Crash points come from ``STREAMLING_CRASH_AT``.
"""

from __future__ import annotations

import uuid

import pytest

from tests.e2e.cli import run_cli, sqlite_state, write

PIPELINE = """
    sources:
      src: {{type: generator, rows: 6000, record_batch_size: 1000}}
    sinks:
      rows: {{type: postgres, from: src, primary_key: id, schema: {schema}, table: events}}
      counts:
        type: postgres_aggregate
        from: src
        primary_key: id
        schema: {schema}
        landing_table: landing
        agg_table: counts
        aggregate:
          n: {{fn: count}}
    """


@pytest.fixture
def schema(pg_connect):
    name = f"e_{uuid.uuid4().hex[:10]}"
    with pg_connect() as conn:
        create_audited_events(conn, name)
    yield name
    with pg_connect() as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


GENERATOR_COLUMNS = "amount double precision, name text, created_at timestamptz"


def create_audited_events(conn, name: str, check: str = "true", columns: str = GENERATOR_COLUMNS) -> None:
    """Schema `name` (created unless it exists) with an `events` table (`id` and `columns`, by default the
    generator's) whose every insert and update is logged in `audit`: an epoch applied twice shows up there."""
    conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{name}"')
    conn.execute(f'CREATE TABLE "{name}".events (id bigint PRIMARY KEY CHECK ({check}), {columns})')
    conn.execute(f'CREATE TABLE "{name}".audit (id bigint, op text)')
    conn.execute(
        f'CREATE FUNCTION "{name}".audit() RETURNS trigger LANGUAGE plpgsql AS $$ '
        f'BEGIN INSERT INTO "{name}".audit VALUES (NEW.id, TG_OP); RETURN NULL; END $$'
    )
    conn.execute(
        f'CREATE TRIGGER audit AFTER INSERT OR UPDATE ON "{name}".events FOR EACH ROW EXECUTE FUNCTION "{name}".audit()'
    )


def _one(pg_connect, query: str) -> tuple:
    with pg_connect() as conn:
        return conn.execute(query).fetchone()


@pytest.mark.parametrize(
    ("crash_at", "applied_rows", "committed_epoch"),
    [
        # Nothing of epoch 2 written; epoch 1 may still be finishing on the committer thread (pipelining).
        ("before_write:2", (0, 1000), (0, 1)),
        ("after_write:3", (3000,), (2,)),  # epoch 3 in Postgres, its position not committed: the dangerous window
        ("after_commit:4", (4000,), (4,)),  # committed, finalizer (landing pruning) not run
    ],
)
def test_sigkill_at_any_point_then_restart_applies_every_row_once(
    tmp_path, postgres_env, pg_connect, schema, crash_at: str, applied_rows: tuple, committed_epoch: tuple
) -> None:
    path = write(tmp_path, PIPELINE.format(schema=schema))
    env = {**postgres_env, "STREAMLING__JOB_MODE": "true"}
    crashed = run_cli(tmp_path, str(path), env={**env, "STREAMLING_CRASH_AT": crash_at})
    assert crashed.returncode == -9, crashed.stderr
    assert _one(pg_connect, f'SELECT count(*) FROM "{schema}".events')[0] in applied_rows
    state = sqlite_state(tmp_path / "state.db")
    assert state.get("src:__epoch__", {}).get("epoch", 0) in committed_epoch

    finished = run_cli(tmp_path, str(path), env=env)
    assert finished.returncode == 0, finished.stderr
    assert _one(pg_connect, f'SELECT count(*), count(DISTINCT id), min(id), max(id) FROM "{schema}".events') == (
        6000,
        6000,
        1,
        6000,
    )
    # One audit row per source row, all inserts: nothing was applied twice.
    assert _one(pg_connect, f'SELECT count(*), count(DISTINCT id), min(op), max(op) FROM "{schema}".audit') == (
        6000,
        6000,
        "INSERT",
        "INSERT",
    )
    assert _one(pg_connect, f'SELECT n FROM "{schema}".counts') == (6000,)
    assert sqlite_state(tmp_path / "state.db")["src:generator"]["offset"] == 6000
    if crash_at.startswith("after_write"):
        assert "epoch 3 is replayed up to {'offset': 3000}" in finished.stderr
        assert "epoch 3 of 'src' already applied (stream 0); skipped" in finished.stderr
