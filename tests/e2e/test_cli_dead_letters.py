"""Poison input through the CLI: one clear `Error:` line, exit 1, no traceback, the position before the bad
record; then the same topic with `on_error: dead_letter` runs to its end. (The other poison cases and the
dead-letter layouts are in tests/integration/test_dead_letters.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.cli import run_cli, sqlite_state, write
from tests.integration.test_dead_letters import LONG_NAME, produce

pytestmark = pytest.mark.integration


def test_poison_fails_with_one_line_then_dead_letters_let_it_through(
    tmp_path: Path, kafka, postgres_env, pg_connect
) -> None:
    topic, _ = produce(kafka, {7: "non_avro", 12: "too_long"})
    schema = f"cli_{topic}"
    with pg_connect() as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
        conn.execute(f'CREATE TABLE "{schema}".events (id bigint PRIMARY KEY, name varchar(10))')
    pipeline = """
        sources:
          src: {{type: kafka, topic: {topic}, ending_offsets: latest, record_batch_size: 5{extra}}}
        sinks:
          out: {{type: postgres, from: src, primary_key: id, schema: {schema}, table: events{extra}}}
        """
    env = {**kafka.env, **postgres_env, "STREAMLING__JOB_MODE": "true"}
    try:
        path = write(tmp_path, pipeline.format(topic=topic, schema=schema, extra=""))
        failed = run_cli(tmp_path, str(path), env=env)
        assert failed.returncode == 1
        assert "Traceback" not in failed.stderr
        assert failed.stderr.strip().splitlines()[-1] == (
            f"Error: kafka source 'src': message at topic '{topic}' partition 0 offset 7: not Confluent-framed Avro "
            "(first byte 0x68, expected 0x00)"
        )
        assert sqlite_state(tmp_path / "state.db")[f"src:{topic}:0"]["offset"] == 5

        extra = f", on_error: dead_letter, dead_letter: {{table: {schema}.dead}}"
        path = write(tmp_path, pipeline.format(topic=topic, schema=schema, extra=extra))
        done = run_cli(tmp_path, str(path), env=env)
        assert done.returncode == 0, done.stderr
        assert sqlite_state(tmp_path / "state.db")[f"src:{topic}:0"]["offset"] == 20
        with pg_connect() as conn:
            landed = [r[0] for r in conn.execute(f'SELECT id FROM "{schema}".events ORDER BY id')]
            dead = conn.execute(f'SELECT node, "offset", row_json FROM "{schema}".dead ORDER BY node DESC').fetchall()
        assert landed == [i for i in range(20) if i not in (7, 12)]
        assert dead == [("src", 7, None), ("out", None, {"id": 12, "name": LONG_NAME, "_gs_op": "i"})]
    finally:
        with pg_connect() as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
