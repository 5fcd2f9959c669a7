"""Fencing by the run lease, with real processes: a run frozen with SIGSTOP while its position commit is in flight
(it had already checked its lease), its lease expiring, another run taking the pipeline over and committing; then
the frozen run is woken. The state backend refuses its commit in the same transaction that would have written it,
so positions never go back, and the rows in the Postgres sink are exactly the committed positions' rows."""

from __future__ import annotations

import os
import signal
import time
import uuid

import psutil

from tests.e2e.cli import sqlite_state, start_cli, write


def _until(predicate, what: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


def test_a_frozen_run_that_lost_its_lease_cannot_commit_when_it_wakes(tmp_path, postgres_env, pg_connect) -> None:
    schema = f"f_{uuid.uuid4().hex[:8]}"
    pipeline = write(
        tmp_path,
        f"""
        sources:
          src: {{type: generator, rows_per_second: 300, primary_key: id}}
        sinks:
          out: {{type: postgres, from: src, schema: {schema}, table: events}}
        """,
    )
    env = {
        **postgres_env,
        "STREAMLING__STATE_BACKEND__LEASE_TTL_SEC": "4",
        "STREAMLING__CHECKPOINT_INTERVAL_SEC": "300ms",
    }
    state = tmp_path / "state.db"
    frozen = start_cli(tmp_path, str(pipeline), env={**env, "STREAMLING_FREEZE_AT": "during_commit:3"})
    taker = None
    try:
        _until(lambda: psutil.Process(frozen.pid).status() == psutil.STATUS_STOPPED, "the run never froze")
        assert sqlite_state(state)["src:__epoch__"]["epoch"] == 2
        with open(tmp_path / "taker.log", "w") as log:
            taker = start_cli(tmp_path, str(pipeline), env=env, stderr=log)
        _until(
            lambda: sqlite_state(state).get("src:__epoch__", {}).get("epoch", 0) >= 6,
            "the second run never took over",
        )
        before = sqlite_state(state)
        os.kill(frozen.pid, signal.SIGCONT)
        assert frozen.wait(120) == 1
        error = frozen.stderr.read()
        # Its own lease check may report first; the state backend refused the commit that was in flight either way.
        assert (
            "WARNING streamling.runtime: generator source 'src': the commit of epoch 3 was refused: its run lease "
            "'pipeline:pipeline' is held by another run or expired; the commit was refused\n"
        ) in error, error
        assert "\nError: pipeline 'pipeline': " in error and "stopping without committing" in error, error
        after = sqlite_state(state)
        assert after["src:__epoch__"]["epoch"] >= before["src:__epoch__"]["epoch"]  # never went back
        assert after["src:generator"]["offset"] >= before["src:generator"]["offset"]
        taker.send_signal(signal.SIGTERM)
        assert taker.wait(90) == 0, (tmp_path / "taker.log").read_text()
        taker = None
    finally:
        for proc in (frozen, taker):
            if proc is not None and proc.poll() is None:
                os.killpg(proc.pid, signal.SIGCONT)
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(30)
    offset = int(sqlite_state(state)["src:generator"]["offset"])
    with pg_connect() as conn:
        count, low, high = conn.execute(f'SELECT count(*), min(id), max(id) FROM "{schema}".events').fetchone()
    assert (count, low, high) == (offset, 1, offset)
