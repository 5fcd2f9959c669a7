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


REFUSED = {"streamling/refused": "holder"}


def test_a_refused_run_is_skipped_over_and_the_keeper_restarts_from_the_newest_run_that_streamed(tmp_path) -> None:
    """The walkthrough's case: `dagster job execute` of a live stream is refused (tagged), then the live stream is
    killed. The keeper restarts after the killed stream, not after the refusal, and says so."""
    write(tmp_path, "p.yaml", "sources:\n  s: {type: generator}\nsinks:\n  o: {type: blackhole, from: s}\n")
    (pf,) = discover(tmp_path)
    now = 10_000.0
    live = record(dg.DagsterRunStatus.STARTED, 0.0)
    refused = record(dg.DagsterRunStatus.FAILURE, now - 500, REFUSED)
    while_live = decide(pf, [refused, live], now)
    assert isinstance(while_live, dg.SkipReason)
    assert while_live.skip_message == f"p: stream run {live.dagster_run.run_id} is STARTED"
    killed = record(dg.DagsterRunStatus.FAILURE, now - 40)
    restart = decide(pf, [refused, killed], now)
    assert isinstance(restart, dg.RunRequest)
    assert restart.run_key == f"p:after:{killed.dagster_run.run_id}"
    assert restart.tags["streamling/attempt"] == "1"


def test_a_refused_restart_backs_off_and_the_next_request_has_a_new_run_key(tmp_path) -> None:
    """A restart the keeper requested can itself be refused (a `streamling run` outside Dagster holds the lease).
    Dagster drops a request whose run key was used before, silently: the next request must carry a new key, and
    the refusals count towards the backoff."""
    write(tmp_path, "p.yaml", "sources:\n  s: {type: generator}\nsinks:\n  o: {type: blackhole, from: s}\n")
    (pf,) = discover(tmp_path)
    now = 10_000.0
    killed = record(dg.DagsterRunStatus.FAILURE, now - 300)
    first = decide(pf, [killed], now)
    assert isinstance(first, dg.RunRequest)
    refused = record(
        dg.DagsterRunStatus.FAILURE, now - 10, {**REFUSED, "streamling/restart": first.tags["streamling/restart"]}
    )
    waiting = decide(pf, [refused, killed], now)
    assert isinstance(waiting, dg.SkipReason)
    assert waiting.skip_message == (
        f"p: run {killed.dagster_run.run_id} ended FAILURE, 1 restart(s) refused since; restart 2 waits 60 s "
        "(backoff), 50 s left"
    )
    again = decide(pf, [refused, killed], now + 51)
    assert isinstance(again, dg.RunRequest)
    assert again.run_key == f"p:after:{killed.dagster_run.run_id}:1" != first.run_key
    assert again.tags["streamling/attempt"] == "2"
    # a first start refused the same way
    never = record(dg.DagsterRunStatus.FAILURE, now - 10, {**REFUSED, "streamling/restart": "never started"})
    held = decide(pf, [never], now)
    assert isinstance(held, dg.SkipReason) and "1 start(s) refused" in (held.skip_message or "")
    retried = decide(pf, [never], now + 21)
    assert isinstance(retried, dg.RunRequest) and retried.run_key == "p:first:1"


def test_a_stream_killed_twice_within_the_backoff_waits_for_the_doubled_backoff(tmp_path) -> None:
    write(tmp_path, "p.yaml", "sources:\n  s: {type: generator}\nsinks:\n  o: {type: blackhole, from: s}\n")
    (pf,) = discover(tmp_path)
    now = 10_000.0
    once = record(dg.DagsterRunStatus.FAILURE, now - 40)
    restarted = decide(pf, [once], now)
    assert isinstance(restarted, dg.RunRequest)  # 40 s > 30 s
    twice = record(dg.DagsterRunStatus.CANCELED, now - 5, {"streamling/stopped_by": "signal"})
    waiting = decide(pf, [twice, once], now)
    assert isinstance(waiting, dg.SkipReason)
    assert waiting.skip_message == (
        f"p: run {twice.dagster_run.run_id} ended CANCELED; restart 2 waits 60 s (backoff), 55 s left"
    )
    after = decide(pf, [twice, once], now + 56)
    assert isinstance(after, dg.RunRequest) and after.run_key == f"p:after:{twice.dagster_run.run_id}"
