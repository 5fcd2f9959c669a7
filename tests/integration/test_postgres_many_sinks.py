"""Five sources into five Postgres sinks of one pipeline, with a Postgres dynamic table, a dead-letter table and the
Postgres state backend all on the same server, through the CLI: killed with SIGKILL twice while running, then run
to the end. Tiny epochs (5 rows) make the committer threads of all sources write at the same time.

A source's position may reach the state backend only once its rows are durable in its sink, so whenever the state
backend says a source is at offset N, that sink's table (plus its dead letters) holds ids 1..N — never fewer, and
after a kill at most one epoch more (applied, not yet committed). After the last run each holds all rows exactly.
"""

from __future__ import annotations

import os
import signal
import time
import uuid

import psycopg
import pytest

from tests.e2e.cli import start_cli, write

pytestmark = pytest.mark.integration

ROWS = {"g1": 150, "g2": 120, "g3": 190, "g4": 100, "g5": 140}
BATCH = 5
REJECTED_EVERY = 37  # sink s3's table refuses ids divisible by this: they go to the dead-letter table
PIPELINE = """
    sources:
      g1: {{type: generator, rows: {g1}, record_batch_size: 5, primary_key: id}}
      g2: {{type: generator, rows: {g2}, record_batch_size: 5, primary_key: id}}
      g3: {{type: generator, rows: {g3}, record_batch_size: 5, primary_key: id}}
      g4: {{type: generator, rows: {g4}, record_batch_size: 5, primary_key: id}}
      g5: {{type: generator, rows: {g5}, record_batch_size: 5, primary_key: id}}
    transforms:
      names:
        type: dynamic_table
        backend_type: Postgres
        backend_entity_name: names
        schema: {schema}
        sql: SELECT name FROM g2
      marked:
        type: sql
        primary_key: id
        sql: SELECT id, name, dynamic_table_check('names', name) AS known FROM g2
    sinks:
      s1: {{type: postgres, from: g1, schema: {schema}, table: t1}}
      s2: {{type: postgres, from: marked, schema: {schema}, table: t2}}
      s3: {{type: postgres, from: g3, schema: {schema}, table: t3, on_error: dead_letter, dead_letter: {{table: {schema}.dead}}}}
      s4: {{type: postgres, from: g4, schema: {schema}, table: t4}}
      s5: {{type: postgres, from: g5, schema: {schema}, table: t5}}
    """
SINK_OF = {"g1": "t1", "g2": "t2", "g3": "t3", "g4": "t4", "g5": "t5"}


@pytest.fixture
def schema(pg_connect):
    name = f"m_{uuid.uuid4().hex[:10]}"
    with pg_connect() as conn:
        conn.execute(f'CREATE SCHEMA "{name}"')
        conn.execute(
            f'CREATE TABLE "{name}".t3 (id bigint PRIMARY KEY, amount double precision, name text, '
            f"created_at timestamptz, CHECK (id % {REJECTED_EVERY} <> 0))"
        )
    yield name
    with pg_connect() as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


def committed(pg_connect, app: str) -> dict[str, int]:
    """Each source's offset in the Postgres state backend (0 before its first commit)."""
    with pg_connect() as conn:
        exists = conn.execute("SELECT to_regclass('streamling.state') IS NOT NULL").fetchone()[0]
        rows = (
            conn.execute("SELECT key, data FROM streamling.state WHERE namespace = %s", (app,)).fetchall()
            if exists
            else []
        )
    offsets = {key.removesuffix(":generator"): int(data["offset"]) for key, data in rows if key.endswith(":generator")}
    return {source: offsets.get(source, 0) for source in ROWS}


def stored(pg_connect, schema: str) -> dict[str, tuple[int, int]]:
    """Per source: (rows in its sink table plus its dead letters, highest id among them), from one snapshot: a sink
    commits rows and dead letters together, and two READ COMMITTED reads could straddle that commit."""
    out = {}
    with pg_connect() as conn:
        conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        with conn.transaction():
            for source, table in SINK_OF.items():
                out[source] = _stored_one(conn, schema, source, table)
    return out


def _stored_one(conn: psycopg.Connection, schema: str, source: str, table: str) -> tuple[int, int]:
    if conn.execute("SELECT to_regclass(%s)", (f'"{schema}".{table}',)).fetchone()[0] is None:
        return (0, 0)
    count, high = conn.execute(f'SELECT count(*), coalesce(max(id), 0) FROM "{schema}".{table}').fetchone()
    if source == "g3" and conn.execute("SELECT to_regclass(%s)", (f'"{schema}".dead',)).fetchone()[0]:
        dead, dead_high = conn.execute(
            f"SELECT count(*), coalesce(max((primary_key->>'id')::bigint), 0) FROM \"{schema}\".dead WHERE node = 's3'"
        ).fetchone()
        count, high = count + dead, max(high, dead_high)
    return (count, high)


def assert_nothing_lost(pg_connect, app: str, schema: str, *, stopped: bool) -> dict[str, int]:
    """Positions first, rows after: rows only grow, so every committed position must already be covered. Once the
    engine is dead nothing moves, and a sink may be at most one epoch ahead of its committed position."""
    positions = committed(pg_connect, app)
    rows = stored(pg_connect, schema)
    for source, position in positions.items():
        count, high = rows[source]
        assert count == high, f"{source}: ids are not 1..{high} ({count} rows)"
        assert count >= position, f"{source}: position {position} committed but only {count} rows stored"
        if stopped:
            assert count <= position + BATCH, f"{source}: {count} rows stored, position {position}"
    return positions


def run_until(tmp_path, path, env, pg_connect, app: str, schema: str, reached=None) -> None:
    """Run the CLI, checking the invariant while it runs; SIGKILL it (process group: engine and JVM) once
    `reached(positions)`, or, without `reached`, let it finish and require exit 0."""
    log = tmp_path / f"engine-{time.monotonic_ns()}.log"
    with log.open("w") as stderr:
        proc = start_cli(tmp_path, str(path), env=env, stderr=stderr)
    checks = 0
    try:
        deadline = time.monotonic() + 150
        while time.monotonic() < deadline:
            positions = assert_nothing_lost(pg_connect, app, schema, stopped=False)
            checks += 1
            if reached is not None and reached(positions):
                break
            if proc.poll() is not None:
                break
            time.sleep(0.2)
        else:
            raise AssertionError(f"not reached in time:\n{log.read_text()[-3000:]}")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
    expected = -signal.SIGKILL if reached is not None else 0
    assert proc.returncode == expected, log.read_text()[-3000:]
    assert checks > 1


def test_five_sources_into_five_postgres_sinks_survive_sigkills_with_nothing_lost(
    tmp_path, postgres_env, pg_connect, schema
) -> None:
    app = f"many_{uuid.uuid4().hex[:8]}"
    path = write(tmp_path, PIPELINE.format(schema=schema, **ROWS))
    env = {
        **postgres_env,
        "STREAMLING__APPLICATION_ID": app,
        "STREAMLING__JOB_MODE": "true",
        "STREAMLING__STATE_BACKEND__BACKEND_TYPE": "Postgres",
        "STREAMLING__CHECKPOINT_INTERVAL_SEC": "50ms",
        "STREAMLING__RECORD_BATCH_INTERVAL_MS": "20ms",
    }

    run_until(tmp_path, path, env, pg_connect, app, schema, lambda p: min(p.values()) >= 4 * BATCH)
    after_first = assert_nothing_lost(pg_connect, app, schema, stopped=True)
    # The second run resumes from the committed positions.
    run_until(tmp_path, path, env, pg_connect, app, schema, lambda p: sum(p.values()) >= sum(after_first.values()) + 60)
    assert_nothing_lost(pg_connect, app, schema, stopped=True)
    run_until(tmp_path, path, env, pg_connect, app, schema)

    assert committed(pg_connect, app) == ROWS
    rejected = {i for i in range(1, ROWS["g3"] + 1) if i % REJECTED_EVERY == 0}
    assert stored(pg_connect, schema) == {source: (rows, rows) for source, rows in ROWS.items()}
    with pg_connect() as conn:
        t3 = {row[0] for row in conn.execute(f'SELECT id FROM "{schema}".t3')}
        dead = {row[0] for row in conn.execute(f"SELECT (primary_key->>'id')::bigint FROM \"{schema}\".dead")}
        names = {row[0] for row in conn.execute(f'SELECT value FROM "{schema}".names')}
        t2 = conn.execute(f'SELECT count(*), count(*) FILTER (WHERE known), count(DISTINCT name) FROM "{schema}".t2')
        marked = t2.fetchone()
        written_names = {row[0] for row in conn.execute(f'SELECT DISTINCT name FROM "{schema}".t2')}
    assert dead == rejected
    assert t3 == set(range(1, ROWS["g3"] + 1)) - rejected
    # The dynamic table holds every name g2 produced, each filled before the lookups of its epoch.
    assert names == written_names
    assert marked == (ROWS["g2"], ROWS["g2"], len(written_names))
