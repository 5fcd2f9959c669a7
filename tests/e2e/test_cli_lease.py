"""One run per pipeline through the CLI: a second run is refused while the first streams, and a frozen holder's
lease is taken over once it expires, the frozen run then stopping without committing.

Both runs share the state backend and the checkpoint root but start from different working directories, as two
operators (or a Dagster run and a shell) would."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.e2e.cli import (
    exit_code,
    printed_ids,
    run_cli,
    sqlite_leases,
    sqlite_state,
    start_cli,
    wait_for,
    wait_until_gone,
    write,
)

TTL = {"STREAMLING__STATE_BACKEND__LEASE_TTL_SEC": "6"}  # a heartbeat every second
PIPELINE = """
    sources:
      live: {type: generator, rows_per_second: 2000}
    sinks:
      out: {type: print, from: live}
    """


@pytest.fixture
def started() -> Iterator[list[subprocess.Popen]]:
    """Runs the test starts; killed at teardown if a failed assertion left them running (or frozen)."""
    procs: list[subprocess.Popen] = []
    yield procs
    for proc in procs:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)


class Backend:
    """Where the runs keep their state, and how the test reads positions and the lease from it."""

    def __init__(self, env: dict[str, str], offset: Callable[[], int], holder: Callable[[], dict | None]) -> None:
        self.env = env
        self.offset = offset
        self.holder = holder


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.integration)])
def backend(request, tmp_path: Path) -> Backend:
    if request.param == "sqlite":
        db = tmp_path / "state.db"

        def sqlite_holder() -> dict | None:
            return sqlite_leases(db).get("pipeline:pipeline")

        return Backend(
            {"STREAMLING__STATE_BACKEND__SQLITE__DATABASE_PATH": str(db)},
            lambda: sqlite_state(db).get("live:generator", {}).get("offset", 0),
            sqlite_holder,
        )
    postgres_env = request.getfixturevalue("postgres_env")
    pg_connect = request.getfixturevalue("pg_connect")
    app = f"lease_{time.time_ns()}"

    def pg_offset() -> int:
        with pg_connect() as conn:
            if conn.execute("SELECT to_regclass('streamling.state')").fetchone()[0] is None:
                return 0
            row = conn.execute(
                "SELECT data FROM streamling.state WHERE namespace = %s AND key = 'live:generator'", (app,)
            ).fetchone()
        return row[0]["offset"] if row else 0

    def pg_holder() -> dict | None:
        with pg_connect() as conn:
            row = conn.execute(
                "SELECT holder FROM streamling.leases WHERE namespace = %s AND name = 'pipeline:pipeline' "
                "AND expires_at > clock_timestamp()",
                (app,),
            ).fetchone()
        return row[0] if row else None

    env = {**postgres_env, "STREAMLING__STATE_BACKEND__BACKEND_TYPE": "Postgres", "STREAMLING__APPLICATION_ID": app}
    return Backend(env, pg_offset, pg_holder)


def _shared(tmp_path: Path, backend: Backend) -> dict[str, str]:
    return {**backend.env, **TTL, "STREAMLING__SPARK__CHECKPOINT_ROOT": str(tmp_path / "checkpoints")}


def test_a_second_run_is_refused_while_the_first_streams_and_touches_nothing(tmp_path: Path, backend, started) -> None:
    path = write(tmp_path, PIPELINE)
    env = _shared(tmp_path, backend)
    out = (tmp_path / "out.txt").open("w")
    first = start_cli(tmp_path, str(path), env=env, stdout=out)
    started.append(first)
    wait_for(lambda: backend.offset() > 2000, first)

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    second = run_cli(elsewhere, str(path), env=env, timeout=120)
    holder = backend.holder()
    assert holder is not None
    assert second.returncode == 1, second.stderr
    errors = [line for line in second.stderr.splitlines() if line.startswith("Error:")]
    assert errors == [
        f"Error: pipeline 'pipeline' is already running (pid {first.pid}, host {socket.gethostname()}, "
        f"since {holder['since']})"
    ]
    assert "Traceback" not in second.stderr

    # The first run was not disturbed: still committing, then a clean stop.
    assert first.poll() is None
    at_refusal = backend.offset()
    wait_for(lambda: backend.offset() > at_refusal + 2000, first)
    first.send_signal(signal.SIGTERM)
    assert first.wait(timeout=60) == 0, first.stderr.read()
    out.close()
    committed = backend.offset()
    assert printed_ids((tmp_path / "out.txt").read_text()) == list(range(1, committed + 1))
    assert backend.holder() is None  # released by the drain
    assert not (elsewhere / "state.db").exists()
    assert not (tmp_path / "checkpoints").exists()  # epochs are planned by the engine: no Spark checkpoint files


@pytest.mark.integration
def test_a_frozen_holder_loses_its_lease_after_the_ttl_and_stops_without_committing(
    tmp_path: Path, postgres_env, pg_connect, started
) -> None:
    """A holder that stops renewing but whose process still exists (frozen with SIGSTOP here; a holder on another
    machine that died or lost its network looks the same) keeps its lease until the TTL runs out. The new run
    resumes from the last committed position; the old one, thawed, finds its lease gone and exits 1."""
    app = f"frozen_{time.time_ns()}"
    env = {
        **postgres_env,
        # Longer than the second run needs to start Spark, so it finds the lease still held and waits.
        "STREAMLING__STATE_BACKEND__LEASE_TTL_SEC": "30",
        "STREAMLING__STATE_BACKEND__BACKEND_TYPE": "Postgres",
        "STREAMLING__APPLICATION_ID": app,
        "STREAMLING__SPARK__CHECKPOINT_ROOT": str(tmp_path / "checkpoints"),
    }

    def offset() -> int:
        with pg_connect() as conn:
            row = conn.execute(
                "SELECT data FROM streamling.state WHERE namespace = %s AND key = 'live:generator'", (app,)
            ).fetchone()
        return row[0]["offset"] if row else 0

    path = write(tmp_path, PIPELINE)
    first_out = (tmp_path / "first.txt").open("w")
    first = start_cli(tmp_path, str(path), env=env, stdout=first_out)
    started.append(first)
    wait_for(lambda: offset() > 2000, first)
    os.kill(first.pid, signal.SIGSTOP)
    frozen_at = time.monotonic()
    committed = offset()

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    second_out = (elsewhere / "second.txt").open("w")
    second = start_cli(elsewhere, str(path), env=env, stdout=second_out)
    started.append(second)
    wait_for(lambda: offset() > committed, second, timeout=150)
    # Its lease was last renewed at most a heartbeat (5 s) before the freeze, so it expired 25 s after it at least.
    assert time.monotonic() - frozen_at >= 25

    os.kill(first.pid, signal.SIGCONT)
    assert exit_code(first) == 1
    first_out.close()
    stderr = first.stderr.read()
    errors = [line for line in stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and errors[0].startswith("Error: pipeline 'pipeline': its run lease")
    assert errors[0].endswith("; stopping without committing, as another run may be writing its positions")
    assert "Traceback" not in stderr

    at_thaw = offset()
    wait_for(lambda: offset() > at_thaw + 1000, second)  # the new run goes on, alone
    second.send_signal(signal.SIGTERM)
    assert second.wait(timeout=60) == 0, second.stderr.read()
    second_out.close()
    second_stderr = second.stderr.read()
    assert "is held by the run of pid" in second_stderr
    assert f"Started generator source 'live' from position {{'offset': {committed}}}" in second_stderr
    final = offset()
    resumed = printed_ids((elsewhere / "second.txt").read_text())
    assert resumed == list(range(committed + 1, final + 1))  # from the committed position, every row once
    assert set(printed_ids((tmp_path / "first.txt").read_text())) >= set(range(1, committed + 1))
    wait_until_gone(tmp_path)
    wait_until_gone(elsewhere)
