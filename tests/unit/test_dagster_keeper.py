"""The stream keeper's decision over real Dagster run records (no instance needed: records are plain data)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import dagster as dg

from streamling_dagster.keeper import backoff_sec, decide
from streamling_dagster.pipelines import discover


def write(directory, name: str, text: str) -> None:
    (directory / name).write_text(text)


def record(status: dg.DagsterRunStatus, ended: float, tags: dict[str, str] | None = None) -> dg.RunRecord:
    run = dg.DagsterRun(job_name="p__stream", run_id=uuid.uuid4().hex, status=status, tags=tags or {})
    stamp = datetime.fromtimestamp(ended, UTC)
    return dg.RunRecord(storage_id=1, dagster_run=run, create_timestamp=stamp, update_timestamp=stamp, end_time=ended)


def test_keeper_restarts_crashes_with_backoff_and_respects_a_pause(tmp_path) -> None:
    write(tmp_path, "p.yaml", "sources:\n  s: {type: generator}\nsinks:\n  o: {type: blackhole, from: s}\n")
    (pf,) = discover(tmp_path)
    now = 10_000.0
    first = decide(pf, [], now)
    assert isinstance(first, dg.RunRequest) and first.run_key == "p:first"
    running = decide(pf, [record(dg.DagsterRunStatus.STARTED, 0.0)], now)
    assert isinstance(running, dg.SkipReason) and "is STARTED" in (running.skip_message or "")
    paused = decide(pf, [record(dg.DagsterRunStatus.CANCELED, now - 5000)], now)
    assert isinstance(paused, dg.SkipReason) and "paused" in (paused.skip_message or "")
    # three failures in a row: the next restart waits 30 * 2**2 = 120 s after the last one ended
    failures = [record(dg.DagsterRunStatus.FAILURE, now - 100) for _ in range(3)]
    assert backoff_sec(pf, 3) == 120
    waiting = decide(pf, failures, now)
    assert isinstance(waiting, dg.SkipReason) and "waits 120 s (backoff), 20 s left" in (waiting.skip_message or "")
    later = decide(pf, failures, now + 21)
    assert isinstance(later, dg.RunRequest)
    assert later.run_key == f"p:after:{failures[0].dagster_run.run_id}"
    assert later.tags["streamling/attempt"] == "3"
    # a SIGTERM'd run (no one asked) counts as a crash, not a pause
    signalled = record(dg.DagsterRunStatus.CANCELED, now - 31, {"streamling/stopped_by": "signal"})
    assert isinstance(decide(pf, [signalled], now), dg.RunRequest)


def test_backoff_comes_from_the_orchestration_block(tmp_path) -> None:
    write(
        tmp_path,
        "q.yaml",
        "sources:\n  s: {type: generator}\nsinks:\n  o: {type: blackhole, from: s}\n"
        "orchestration: {restart_backoff_sec: 2, restart_backoff_max_sec: 5}\n",
    )
    (pf,) = discover(tmp_path)
    assert [backoff_sec(pf, n) for n in (1, 2, 3, 4)] == [2, 4, 5, 5]
