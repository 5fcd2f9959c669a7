"""The stream keeper: one sensor per pipeline that (re)starts `<pipeline>__stream` when it is not running.

Restarts a stream that never ran, that failed (the engine raised, or the run worker died and Dagster marked
the run failed) or that stopped on a bare SIGTERM/SIGINT — after an exponential backoff counted over the
consecutive failures. It stays quiet while a stream run is queued or running, after a run that ended by
itself (bounded sources), and after a run someone terminated: cancelling a stream run is how you pause it;
launching `<pipeline>__stream` again resumes it (and the keeper guards it again). Refused runs (another run held
the pipeline) are skipped over: the keeper follows the newest run that actually streamed (`decide`). Every tick
that requests nothing says why.
"""

from __future__ import annotations

import time

import dagster as dg

from streamling_dagster.guard import REFUSED_TAG, STREAM_TAG, invalid_now
from streamling_dagster.pipelines import PipelineFile
from streamling_dagster.streaming import STOPPED_BY_TAG

RESTART_TAG = "streamling/restart"
"""Set on the runs this keeper requests: why it (re)started the stream."""

ACTIVE = {
    dg.DagsterRunStatus.QUEUED,
    dg.DagsterRunStatus.NOT_STARTED,
    dg.DagsterRunStatus.STARTING,
    dg.DagsterRunStatus.STARTED,
    dg.DagsterRunStatus.CANCELING,
}


def crashed(record: dg.RunRecord) -> bool:
    run = record.dagster_run
    if run.status == dg.DagsterRunStatus.FAILURE:
        return True
    return run.status == dg.DagsterRunStatus.CANCELED and run.tags.get(STOPPED_BY_TAG) == "signal"


def backoff_sec(pf: PipelineFile, failures: int) -> float:
    plan = pf.orchestration
    return min(plan.restart_backoff_sec * 2 ** max(failures - 1, 0), plan.restart_backoff_max_sec)


def decide(pf: PipelineFile, records: list[dg.RunRecord], now: float) -> dg.RunRequest | dg.SkipReason:
    """`records`: this pipeline's stream runs, newest first, refused ones included.

    The decision follows the newest run that actually streamed; a refused run (``streamling/refused``: another
    run held the pipeline, it never started Spark) is neither a crash nor a pause. A restart this keeper requested
    that was refused counts towards the backoff, and the next request gets a new run key (Dagster silently drops
    a request whose key was used, which would leave the stream down with nothing said)."""
    job = f"{pf.name}__stream"
    refused_restarts = 0
    streamed: list[dg.RunRecord] = []
    last_refusal: float | None = None
    for record in records:
        if REFUSED_TAG not in record.dagster_run.tags:
            streamed.append(record)
        elif not streamed and RESTART_TAG in record.dagster_run.tags:  # this keeper's, after the newest stream
            refused_restarts += 1
            last_refusal = last_refusal or _ended(record)
    again = f":{refused_restarts}" if refused_restarts else ""
    if not streamed:
        if refused_restarts and now - (last_refusal or 0) < (wait := backoff_sec(pf, refused_restarts)):
            return dg.SkipReason(
                f"{pf.name}: {refused_restarts} start(s) refused (another run held the pipeline); the next waits "
                f"{wait:.0f} s (backoff), {wait - (now - (last_refusal or 0)):.0f} s left"
            )
        return dg.RunRequest(run_key=f"{pf.name}:first{again}", tags={RESTART_TAG: "never started"})
    latest = streamed[0]
    run = latest.dagster_run
    if run.status in ACTIVE:
        return dg.SkipReason(f"{pf.name}: stream run {run.run_id} is {run.status.value}")
    if not crashed(latest):
        if run.status == dg.DagsterRunStatus.CANCELED:
            return dg.SkipReason(
                f"{pf.name}: paused — run {run.run_id} was terminated on request; launch {job} to resume"
            )
        return dg.SkipReason(f"{pf.name}: run {run.run_id} ended {run.status.value} (its sources ended)")
    failures = refused_restarts
    for record in streamed:
        if not crashed(record):
            break
        failures += 1
    wait = backoff_sec(pf, failures)
    ended = max(_ended(latest), last_refusal or 0.0)
    if now - ended < wait:
        refusals = f", {refused_restarts} restart(s) refused since" if refused_restarts else ""
        return dg.SkipReason(
            f"{pf.name}: run {run.run_id} ended {run.status.value}{refusals}; restart {failures} waits "
            f"{wait:.0f} s (backoff), {wait - (now - ended):.0f} s left"
        )
    return dg.RunRequest(
        run_key=f"{pf.name}:after:{run.run_id}{again}",
        tags={RESTART_TAG: f"after {run.status.value} run {run.run_id}", "streamling/attempt": str(failures)},
    )


def _ended(record: dg.RunRecord) -> float:
    return record.end_time or record.update_timestamp.timestamp()


def keeper_sensor(pf: PipelineFile, job: dg.JobDefinition) -> dg.SensorDefinition:
    running = dg.DefaultSensorStatus.RUNNING if pf.orchestration.keep_streaming else dg.DefaultSensorStatus.STOPPED

    @dg.sensor(
        name=f"{pf.name}__stream_keeper",
        job=job,
        minimum_interval_seconds=30,
        default_status=running,
        description=(
            f"Keeps {job.name} running: restarts it when it never ran, failed or died, with exponential backoff "
            f"({pf.orchestration.restart_backoff_sec:.0f} s doubling to {pf.orchestration.restart_backoff_max_sec:.0f}"
            " s). Terminating the run pauses the stream (the keeper stays quiet); launching the job again resumes it."
        ),
    )
    def stream_keeper(context: dg.SensorEvaluationContext) -> dg.RunRequest | dg.SkipReason:
        records = context.instance.get_run_records(
            filters=dg.RunsFilter(tags={STREAM_TAG: pf.name}), limit=20, order_by="create_timestamp", ascending=False
        )
        decision = decide(pf, list(records), time.time())
        if isinstance(decision, dg.RunRequest):  # a run of a file broken since the last reload fails to start
            return invalid_now(pf) or decision
        return decision

    return stream_keeper
