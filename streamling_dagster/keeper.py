"""The stream keeper: one sensor per pipeline that (re)starts `<pipeline>__stream` when it is not running.

Restarts a stream that never ran, that failed (the engine raised, or the run worker died and Dagster marked
the run failed) or that stopped on a bare SIGTERM/SIGINT — after an exponential backoff counted over the
consecutive failures. It stays quiet while a stream run is queued or running, after a run that ended by
itself (bounded sources), and after a run someone terminated: cancelling a stream run is how you pause it;
launching `<pipeline>__stream` again resumes it (and the keeper guards it again).
"""

from __future__ import annotations

import time

import dagster as dg

from streamling_dagster.guard import REFUSED_TAG
from streamling_dagster.jobs import STREAM_TAG
from streamling_dagster.pipelines import PipelineFile
from streamling_dagster.streaming import STOPPED_BY_TAG

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
    """`records`: this pipeline's stream runs, newest first."""
    job = f"{pf.name}__stream"
    if not records:
        return dg.RunRequest(run_key=f"{pf.name}:first", tags={"streamling/restart": "never started"})
    latest = records[0]
    run = latest.dagster_run
    if run.status in ACTIVE:
        return dg.SkipReason(f"{pf.name}: stream run {run.run_id} is {run.status.value}")
    if not crashed(latest):
        if run.status == dg.DagsterRunStatus.CANCELED:
            return dg.SkipReason(
                f"{pf.name}: paused — run {run.run_id} was terminated on request; launch {job} to resume"
            )
        return dg.SkipReason(f"{pf.name}: run {run.run_id} ended {run.status.value} (its sources ended)")
    failures = 0
    for record in records:
        if not crashed(record):
            break
        failures += 1
    wait = backoff_sec(pf, failures)
    ended = latest.end_time or latest.update_timestamp.timestamp()
    if now - ended < wait:
        return dg.SkipReason(
            f"{pf.name}: run {run.run_id} ended {run.status.value}; restart {failures} waits "
            f"{wait:.0f} s (backoff), {wait - (now - ended):.0f} s left"
        )
    return dg.RunRequest(
        run_key=f"{pf.name}:after:{run.run_id}",
        tags={"streamling/restart": f"after {run.status.value} run {run.run_id}", "streamling/attempt": str(failures)},
    )


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
        return decide(pf, [r for r in records if REFUSED_TAG not in r.dagster_run.tags], time.time())

    return stream_keeper
