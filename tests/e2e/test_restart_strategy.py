"""Runs survive a starved machine and killed Spark Python workers: real CLI and real engine, real Postgres.

Busy processes keep every core at 100 % beside the run (what a crowded node does to it), and Spark's Python workers
(the processes the workers' daemon forks to read the sources and run Arrow code) are killed with SIGKILL mid-epoch
until the run has restarted from its last committed epochs at least once. The pipeline has three sources starting
together, each into its own Postgres table whose every insert and update is audited: the tables end with every row
once and the audit shows no epoch applied twice (effectively-once through the restarts)."""

from __future__ import annotations

import os
import signal
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.cli import start_cli, write
from tests.e2e.engine import Engine
from tests.e2e.starvation import RESTARTED, RESTARTING, Killer, follow
from tests.e2e.test_cli_postgres import create_audited_events

ROWS = 24_000
ENGINE_ROWS = 4 * ROWS
"""A warm engine's run of 24k rows once ended twice in a row after 12 kills, none of which met a running task (no
restart to see): its run reads four times as many, about 5 s more."""
ENV = {"STREAMLING__JOB_MODE": "true", **RESTARTING}


@pytest.fixture
def tables(pg_connect) -> Iterator[list[str]]:
    names = [f"rs_{uuid.uuid4().hex[:8]}" for _ in range(3)]
    with pg_connect() as conn:
        for name in names:
            create_audited_events(conn, name)
    yield names
    with pg_connect() as conn:
        for name in names:
            conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


def three_sources(cwd: Path, tables: list[str], rows: int = ROWS) -> Path:
    sources = "\n".join(
        f"  s{i}: {{type: generator, rows: {rows}, record_batch_size: 4000, partitions: 2, seed: {i}}}"
        for i in range(3)
    )
    sinks = "\n".join(
        f"  k{i}: {{type: postgres, from: s{i}, primary_key: id, schema: {name}, table: events}}"
        for i, name in enumerate(tables)
    )
    return write(cwd, f"sources:\n{sources}\nsinks:\n{sinks}\n", "three.yaml")


def assert_exact(pg_connect, tables: list[str], expected: int = ROWS) -> None:
    with pg_connect() as conn:
        for name in tables:
            rows = conn.execute(f'SELECT count(*), count(DISTINCT id), max(id) FROM "{name}".events').fetchone()
            audit = conn.execute(
                f'SELECT count(*), count(DISTINCT id), min(op), max(op) FROM "{name}".audit'
            ).fetchone()
            assert rows == (expected, expected, expected), name
            assert audit == (expected, expected, "INSERT", "INSERT"), (
                name
            )  # no row written twice: no epoch applied twice


def test_the_cli_restarts_after_killed_python_workers_on_a_starved_machine(
    tmp_path: Path, postgres_env: dict[str, str], pg_connect, tables: list[str], starved: None
) -> None:
    proc = start_cli(tmp_path, str(three_sources(tmp_path, tables)), env={**postgres_env, **ENV})
    output = follow(proc)
    killer = Killer(proc.pid, output)
    try:
        assert proc.wait(600) == 0, "".join(output)[-4000:]
    finally:
        killer.stop.set()
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    text = "".join(output)
    restarts = [line for line in output if RESTARTED in line]
    assert restarts, f"{killer.kills} workers killed, no restart:\n{text[-3000:]}"
    assert all(" WARNING " in line and "(restart " in line for line in restarts)
    assert "Error:" not in text and "Traceback" not in text
    assert_exact(pg_connect, tables)


def test_the_engine_restarts_a_run_after_killed_python_workers_on_a_starved_machine(
    tmp_path: Path, postgres_env: dict[str, str], pg_connect, tables: list[str], starved: None
) -> None:
    engine = Engine(tmp_path, postgres_env)
    try:
        run = start_cli(
            tmp_path,
            "submit",
            "--engine",
            engine.url or "",
            str(three_sources(tmp_path, tables, ENGINE_ROWS)),
            env={**postgres_env, **ENV},
        )
        output = follow(run)
        killer = Killer(engine.proc.pid, output)
        try:
            assert run.wait(600) == 0, "".join(output)[-4000:]
        finally:
            killer.stop.set()
        (view,) = engine.get("/runs")["runs"]
        assert view["state"] == "succeeded" and view["restarts"] >= 1, (killer.kills, view)
        assert view["last_error"]  # what the last restart was for
        assert any(RESTARTED in line for line in output)
        assert engine.get("/health")["status"] == "ok"
    finally:
        assert engine.stop() == 0
    assert_exact(pg_connect, tables, ENGINE_ROWS)
