"""Running pipelines through the CLI: job mode, graceful stop, kill -9 and resume, runtime failures."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from tests.e2e.cli import (
    cli_env,
    printed_ids,
    run_cli,
    sqlite_leases,
    sqlite_state,
    start_cli,
    wait_for,
    wait_until_gone,
    write,
)

PLUGIN_CLI = "import sys, tests.e2e.failing_source; from streamling.cli import main; sys.exit(main(sys.argv[1:]))"
"""The CLI with the test-only `failing_generator` source plugin registered."""


def test_job_mode_bounded_filter_print_exact_count(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        sources:
          raw.transactions: {type: generator, rows: 100000}
        transforms:
          every_tenth:
            type: sql
            primary_key: id
            sql: SELECT id, amount, name FROM raw.transactions WHERE id % 10 = 0
        sinks:
          out: {type: print, from: every_tenth, sample_every: 7}
        """,
    )
    env = {
        "STREAMLING__JOB_MODE": "true",
        "STREAMLING__RECORD_BATCH_SIZE": "30000",
        "STREAMLING__LOG_LEVEL": "debug",
    }
    result = run_cli(tmp_path, str(path), env=env)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == math.ceil(10_000 / 7) == 1429
    assert printed_ids(result.stdout) == list(range(10, 100_001, 70))
    assert all(" -> (sample_every=7) [Insert] {" in line for line in lines)
    assert sqlite_state(tmp_path / "state.db")["raw.transactions:generator"]["offset"] == 100_000
    assert "sink 'out': 10000 rows written" in result.stderr
    for epoch in (1, 2, 3, 4):  # 100k rows in epochs of at most 30k
        assert (
            f"DEBUG streamling.runtime: Epoch finalized: {epoch} (generator source 'raw.transactions'" in result.stderr
        )
    assert "Epoch finalized: 5 " not in result.stderr


def test_runtime_failure_exits_1_without_traceback_and_keeps_position(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        sources:
          src: {type: generator, rows: 5000, record_batch_size: 1000}
        transforms:
          checked:
            type: sql
            primary_key: id
            sql: SELECT id, IF(id = 2500, raise_error('bad row 2500'), name) AS name FROM src
        sinks:
          out: {type: blackhole, from: checked}
        """,
    )
    result = run_cli(tmp_path, str(path), env={"STREAMLING__JOB_MODE": "true", "STREAMLING__LOG_FORMAT": "json"})
    assert result.returncode == 1
    started = [json.loads(line) for line in result.stderr.splitlines() if '"logger": "streamling.runtime"' in line]
    assert started[0]["level"] == "INFO"
    assert started[0]["message"] == "Started generator source 'src' from position {'offset': 0}"
    assert "Error: blackhole sink 'out': " in result.stderr
    assert "bad row 2500" in result.stderr
    assert "Traceback" not in result.stderr
    assert sqlite_state(tmp_path / "state.db")["src:generator"]["offset"] == 2000
    assert sqlite_leases(tmp_path / "state.db") == {}  # released after the failure


def test_internal_failure_restarts_then_ends_in_one_error_line(tmp_path: Path) -> None:
    """A failure that is not the user's own (here the test plugin's reader raises a plain RuntimeError while the
    engine plans an epoch) restarts the run from its last committed epoch, one WARN line per restart; once the
    failures exceed `restart_strategy.max_failures` the run fails with exit 1 and exactly one `Error:` line naming
    the source and the cause, without a traceback, and nothing past the failure is committed."""
    path = write(
        tmp_path,
        """
        sources:
          src: {type: failing_generator, rows: 5000, record_batch_size: 1000, fail_at: 2000}
        sinks:
          out: {type: blackhole, from: src}
        """,
    )
    repo = str(Path(__file__).resolve().parents[2])
    env = {
        "STREAMLING__JOB_MODE": "true",
        "STREAMLING__RESTART_STRATEGY__TYPE": "exponential-delay",
        "STREAMLING__RESTART_STRATEGY__INITIAL_BACKOFF_SEC": "0.2",
        "STREAMLING__RESTART_STRATEGY__MAX_FAILURES": "2",
        "PYTHONPATH": os.pathsep.join(p for p in (repo, os.environ.get("PYTHONPATH")) if p),
    }
    result = subprocess.run(
        [sys.executable, "-c", PLUGIN_CLI, str(path)],
        cwd=tmp_path,
        env=cli_env(tmp_path, env),
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert result.returncode == 1, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("Error:")]
    assert errors == ["Error: failing_generator source 'src': the test reader gave up at offset 2000"]
    restarts = [line for line in result.stderr.splitlines() if "restarting from its last committed epochs" in line]
    assert len(restarts) == 2, result.stderr  # two restarts, then the third failure is one more than max_failures
    assert all(" WARNING " in line and line.endswith("the test reader gave up at offset 2000") for line in restarts)
    assert "(restart 1; failure 1 of at most 2 within 600s)" in restarts[0]
    assert "Traceback" not in result.stderr
    assert sqlite_state(tmp_path / "state.db")["src:generator"]["offset"] == 2000


def test_sigterm_finishes_and_commits_the_in_flight_epoch(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        sources:
          live: {type: generator, rows_per_second: 3000}
        sinks:
          out: {type: print, from: live}
        """,
    )
    out = (tmp_path / "out.txt").open("w")
    proc = start_cli(tmp_path, str(path), env={"STREAMLING__CHECKPOINT_INTERVAL_SEC": "300ms"}, stdout=out)
    db = tmp_path / "state.db"
    wait_for(lambda: sqlite_state(db).get("live:generator", {}).get("offset", 0) > 3000, proc)
    sent = time.time()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0
    assert time.time() - sent < 30
    out.close()
    committed = sqlite_state(db)["live:generator"]["offset"]
    # Every printed row belongs to a committed epoch, and every committed row was printed once.
    assert printed_ids((tmp_path / "out.txt").read_text()) == list(range(1, committed + 1))


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_signal_to_the_process_group_drains_like_ctrl_c(tmp_path: Path, sig: signal.Signals) -> None:
    """What `timeout`, a terminal and group-signalling supervisors do: the signal reaches every process of the
    group. The JVM is not among them, so the drain finishes the in-flight epoch and exits 0, cleanly."""
    path = write(
        tmp_path,
        """
        sources:
          live: {type: generator, rows_per_second: 3000}
        sinks:
          out: {type: print, from: live}
        """,
    )
    out = (tmp_path / "out.txt").open("w")
    proc = start_cli(tmp_path, str(path), env={"STREAMLING__CHECKPOINT_INTERVAL_SEC": "300ms"}, stdout=out)
    db = tmp_path / "state.db"
    wait_for(lambda: sqlite_state(db).get("live:generator", {}).get("offset", 0) > 3000, proc)
    os.killpg(proc.pid, sig)
    assert proc.wait(timeout=60) == 0, proc.stderr.read()
    out.close()
    stderr = proc.stderr.read()
    assert "Traceback" not in stderr and "Error" not in stderr, stderr
    assert f"Received {sig.name}" in stderr
    committed = sqlite_state(db)["live:generator"]["offset"]
    assert printed_ids((tmp_path / "out.txt").read_text()) == list(range(1, committed + 1))
    assert f"sink 'out': {committed} rows written" in stderr  # the last epoch ran to its commit
    assert sqlite_leases(db) == {}  # released after the drain
    wait_until_gone(tmp_path)


def _kill_and_resume(tmp_path: Path, env: dict[str, str], read_offset) -> None:
    rows = 6000
    path = write(
        tmp_path,
        f"""
        sources:
          src: {{type: generator, rows: {rows}, rows_per_second: 1500, record_batch_size: 500}}
        transforms:
          odd: {{type: sql, primary_key: id, sql: "SELECT id, name FROM src WHERE id % 2 = 1"}}
        sinks:
          out: {{type: print, from: odd}}
        """,
    )
    env = {"STREAMLING__JOB_MODE": "true", "STREAMLING__CHECKPOINT_INTERVAL_SEC": "400ms", **env}
    first_out = (tmp_path / "first.txt").open("w")
    proc = start_cli(tmp_path, str(path), env=env, stdout=first_out)
    wait_for(lambda: read_offset() >= 1500, proc)
    committed_before_kill = read_offset()
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    wait_until_gone(tmp_path)  # the JVM, in a session of its own, exits with its driver
    first_out.close()
    first = printed_ids((tmp_path / "first.txt").read_text())
    assert first and max(first) < rows  # really killed mid-run

    second = run_cli(tmp_path, str(path), env=env)
    assert second.returncode == 0, second.stderr
    # The killed run's lease is taken over at once: its process is provably gone (same machine), no TTL wait.
    assert "the run holding its lease (pid " in second.stderr and "is gone; taking the lease over" in second.stderr
    resumed = printed_ids(second.stdout)
    assert resumed and min(resumed) > committed_before_kill  # resumed from the state backend
    everything = Counter(first + resumed)
    assert sorted(everything) == list(range(1, rows + 1, 2))  # no row lost
    duplicates = [i for i, n in everything.items() if n > 1]
    assert all(i > committed_before_kill for i in duplicates)  # only the unfinished epoch repeats
    assert read_offset() == rows


def test_kill_9_then_restart_resumes_from_sqlite(tmp_path: Path) -> None:
    db = tmp_path / "state.db"
    _kill_and_resume(tmp_path, {}, lambda: sqlite_state(db).get("src:generator", {}).get("offset", 0))


@pytest.mark.integration
def test_kill_9_then_restart_resumes_from_postgres(tmp_path: Path, postgres_env, pg_connect) -> None:
    app = f"kill9_{int(time.time() * 1000)}"

    def offset() -> int:
        with pg_connect() as conn:
            if conn.execute("SELECT to_regclass('streamling.state')").fetchone()[0] is None:
                return 0  # the engine has not created its table yet
            row = conn.execute(
                "SELECT data FROM streamling.state WHERE namespace = %s AND key = 'src:generator'", (app,)
            ).fetchone()
        return row[0]["offset"] if row else 0

    env = {
        **postgres_env,
        "STREAMLING__STATE_BACKEND__BACKEND_TYPE": "Postgres",
        "STREAMLING__APPLICATION_ID": app,
    }
    _kill_and_resume(tmp_path, env, offset)
    assert not (tmp_path / "state.db").exists()
