"""Hybrid source through the CLI, killed with SIGKILL in the backfill phase and again in the Kafka phase.

The ClickHouse table lives in an embedded engine data path that the test prepares in a child process:
chdb opens a data path in one process at a time, and the CLI is another process.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid

from tests.e2e.cli import run_cli, sqlite_state, start_cli, wait_for, write

SCHEMA = {
    "type": "record",
    "name": "Transfer",
    "fields": [{"name": "id", "type": "long"}, {"name": "who", "type": "string"}, {"name": "amount", "type": "double"}],
}
PREPARE = """
import clickhouse_connect, pyarrow as pa
c = clickhouse_connect.get_client(dsn="chdb://{path}")
c.command("CREATE TABLE default.recent (id Int64, who String, amount Float64) ENGINE = MergeTree ORDER BY id")
ids = list(range(1, 301))
c.insert_arrow("default.recent", pa.table({{"id": ids, "who": ["ch"] * 300, "amount": [float(i) for i in ids]}}))
"""


def test_kill_9_in_each_phase_then_resume_applies_every_row_once(tmp_path, kafka, postgres_env, pg_connect) -> None:
    path = tmp_path / "clickhouse"
    subprocess.run([sys.executable, "-c", PREPARE.format(path=path)], check=True, timeout=120)
    topic = kafka.topic("hybrid_e2e")
    kafka.produce_avro(topic, SCHEMA, [{"id": i, "who": "k", "amount": 0.5} for i in range(2001, 2051)])
    schema = f"e_{uuid.uuid4().hex[:8]}"
    pipeline = write(
        tmp_path,
        f"""
        sources:
          transfers:
            type: hybrid
            primary_key: id
            bounded_sources: [{{source_type: clickhouse, table_name: recent}}]
            unbounded_source: {{source_type: kafka, topic: {topic}}}
        sinks:
          rows: {{type: postgres, from: transfers, schema: {schema}, table: transfers}}
          counts:
            type: postgres_aggregate
            from: transfers
            schema: {schema}
            landing_table: landing
            agg_table: counts
            aggregate: {{n: {{fn: count}}}}
        """,
    )
    env = {
        **kafka.env,
        **postgres_env,
        "STREAMLING__CLICKHOUSE_SOURCE__PATH": str(path),
        "STREAMLING__CLICKHOUSE_SOURCE__PAGE_SIZE": "50",
        "STREAMLING__CLICKHOUSE_SOURCE__SORT_KEY_RANGE": "50",
        "STREAMLING__CHECKPOINT_INTERVAL_SEC": "300ms",
    }

    def count() -> int:
        with pg_connect() as conn:
            try:
                return conn.execute(f'SELECT count(*) FROM "{schema}".transfers').fetchone()[0]
            except Exception:
                return 0

    # 1. killed in the backfill phase, after epoch 2 was written but before it was committed
    crashed = run_cli(tmp_path, str(pipeline), env={**env, "STREAMLING_CRASH_AT": "after_write:2"})
    assert crashed.returncode == -9, crashed.stderr
    assert sqlite_state(tmp_path / "state.db").get("transfers:__phase__") is None  # still in phase 1
    # 2. resumes, finishes the backfill, streams from Kafka — killed once Kafka rows land
    proc = start_cli(tmp_path, str(pipeline), env=env)
    try:
        wait_for(lambda: count() > 300, proc)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
    assert sqlite_state(tmp_path / "state.db")["transfers:__phase__"]["phase"] == 1  # the Kafka phase
    # 3. resumes in the Kafka phase; more records arrive; stopped gracefully
    kafka.produce_avro(topic, SCHEMA, [{"id": i, "who": "late", "amount": 1.0} for i in range(3001, 3011)])
    proc = start_cli(tmp_path, str(pipeline), env=env)
    wait_for(lambda: count() >= 360, proc)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 0, proc.stderr.read()

    with pg_connect() as conn:
        ids = [r[0] for r in conn.execute(f'SELECT id FROM "{schema}".transfers ORDER BY id').fetchall()]
        (applied,) = conn.execute(f'SELECT n FROM "{schema}".counts').fetchone()
    assert ids == list(range(1, 301)) + list(range(2001, 2051)) + list(range(3001, 3011))
    assert applied == 360  # effectively-once across both kills: nothing counted twice


def test_a_clickhouse_source_resumes_whatever_start_at_says_until_its_positions_are_reset(
    tmp_path, postgres_env, pg_connect
) -> None:
    """The rule the original's Kafka consumer groups follow: the committed position wins over the starting point.
    A changed `start_at` is a reset only when the run says so (`--reset-positions`)."""
    path = tmp_path / "clickhouse"
    subprocess.run([sys.executable, "-c", PREPARE.format(path=path)], check=True, timeout=120)
    schema = f"p_{uuid.uuid4().hex[:8]}"
    pipeline = """
        sources:
          recent: {type: clickhouse, table_name: recent, primary_key: id START}
        sinks:
          counts:
            type: postgres_aggregate
            from: recent
            schema: SCHEMA
            landing_table: landing
            agg_table: counts
            aggregate: {n: {fn: count}}
        """.replace("SCHEMA", schema)
    env = {**postgres_env, "STREAMLING__CLICKHOUSE_SOURCE__PATH": str(path), "STREAMLING__JOB_MODE": "true"}

    def counted() -> int:
        with pg_connect() as conn:
            return conn.execute(f'SELECT n FROM "{schema}".counts').fetchone()[0]

    first = run_cli(tmp_path, str(write(tmp_path, pipeline.replace("START", ', start_at: "201"'))), env=env)
    assert first.returncode == 0, first.stderr
    assert counted() == 100
    dropped = run_cli(tmp_path, str(write(tmp_path, pipeline.replace("START", ""))), env=env)
    assert dropped.returncode == 0, dropped.stderr
    assert "source 'recent': 0 epochs, 0 rows read, position {'from': 301}" in dropped.stderr  # nothing read again
    assert "start_at None differs from the '201' its saved cursor started from; it resumes the cursor" in dropped.stderr
    changed = write(tmp_path, pipeline.replace("START", ', start_at: "251"'))
    reset = run_cli(tmp_path, str(changed), "--reset-positions", env=env)
    assert reset.returncode == 0, reset.stderr
    assert "Started clickhouse source 'recent' from position {'from': 251}" in reset.stderr
    assert "sink 'counts': 50 rows written (50 inserts" in reset.stderr
    assert counted() == 100  # upserts of the keys it had: the count stays
