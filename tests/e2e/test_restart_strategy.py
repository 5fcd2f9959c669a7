"""Runs survive a starved machine and killed Spark Python workers: real CLI and real engine, real Postgres.

Busy processes keep every core at 100 % beside the run (what a crowded node does to it), and Spark's Python workers
(the processes the workers' daemon forks to read the sources and run Arrow code) are killed with SIGKILL mid-epoch
until the run has restarted from its last committed epochs at least once. The pipeline has three sources starting
together, each into its own Postgres table whose every insert and update is audited: the tables end with every row
once and the audit shows no epoch applied twice (effectively-once through the restarts)."""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from tests.e2e.cli import start_cli, write
from tests.e2e.engine import Engine
from tests.e2e.test_cli_postgres import create_audited_events

ROWS = 24_000
DAEMON = "-m streamling.runtime.worker_daemon"
RESTARTED = "restarting from its last committed epochs"
ENV = {
    "STREAMLING__JOB_MODE": "true",
    "STREAMLING__RESTART_STRATEGY__TYPE": "exponential-delay",
    "STREAMLING__RESTART_STRATEGY__MAX_FAILURES": "25",
    "STREAMLING__RESTART_STRATEGY__INITIAL_BACKOFF_SEC": "0.5",
    "STREAMLING__RESTART_STRATEGY__MAX_BACKOFF_SEC": "2",
}


def _spin() -> None:
    while True:
        pass


@pytest.fixture
def starved() -> Iterator[None]:
    """One busy process per core for the test's duration."""
    spinners = [multiprocessing.Process(target=_spin, daemon=True) for _ in range(os.cpu_count() or 2)]
    for spinner in spinners:
        spinner.start()
    yield
    for spinner in spinners:
        spinner.kill()
        spinner.join()


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


def three_sources(cwd: Path, tables: list[str]) -> Path:
    sources = "\n".join(
        f"  s{i}: {{type: generator, rows: {ROWS}, record_batch_size: 4000, partitions: 2, seed: {i}}}"
        for i in range(3)
    )
    sinks = "\n".join(
        f"  k{i}: {{type: postgres, from: s{i}, primary_key: id, schema: {name}, table: events}}"
        for i, name in enumerate(tables)
    )
    return write(cwd, f"sources:\n{sources}\nsinks:\n{sinks}\n", "three.yaml")


def python_workers(under: int) -> list[psutil.Process]:
    """The Python workers Spark's workers' daemon forked, below process `under` (not the daemon itself)."""
    out = []
    for p in psutil.Process(under).children(recursive=True):
        try:
            parent = p.parent()
            # the daemon itself, not Spark's launcher scripts, whose arguments name the daemon module too
            if parent is not None and DAEMON in " ".join(parent.cmdline()):
                out.append(p)
        except psutil.Error:
            continue
    return out


class Killer:
    """Kills the run's Python workers every `every` seconds until `output` shows a restart (or `limit` kills).

    Often: a kill only fails a task when it meets a worker running one (an idle worker is forked again by the
    daemon), and a warm engine can end the run within a few seconds; at 1.5 s a loaded machine once saw the engine's
    run end with no restart."""

    def __init__(self, root: int, output: list[str], every: float = 0.4, limit: int = 120) -> None:
        self.kills = 0
        self.stop = threading.Event()

        def run() -> None:
            while not self.stop.wait(every) and self.kills < limit:
                if any(RESTARTED in line for line in output):
                    return
                for worker in python_workers(root):
                    try:
                        worker.send_signal(signal.SIGKILL)
                        self.kills += 1
                    except psutil.Error:
                        continue

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()


def follow(proc: subprocess.Popen) -> list[str]:
    lines: list[str] = []

    def read() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.append(line)

    threading.Thread(target=read, daemon=True).start()
    return lines


def assert_exact(pg_connect, tables: list[str]) -> None:
    with pg_connect() as conn:
        for name in tables:
            rows = conn.execute(f'SELECT count(*), count(DISTINCT id), max(id) FROM "{name}".events').fetchone()
            audit = conn.execute(
                f'SELECT count(*), count(DISTINCT id), min(op), max(op) FROM "{name}".audit'
            ).fetchone()
            assert rows == (ROWS, ROWS, ROWS), name
            assert audit == (ROWS, ROWS, "INSERT", "INSERT"), name  # no row written twice: no epoch applied twice


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
            str(three_sources(tmp_path, tables)),
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
    assert_exact(pg_connect, tables)
