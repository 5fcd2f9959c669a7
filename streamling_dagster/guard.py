"""One run per pipeline, whatever launches it: the checks shared by the run coordinator, the ops, the keeper,
the backfill sensor and the backfill schedule.

A pipeline's runs share its committed positions (and, through the engine, its run lease), so while one runs
another must not start. The run coordinator refuses a launch while a stream of the pipeline is active, before
the run is queued; each Streamling op checks again when it starts (a `dagster job execute` never meets the
coordinator), before Spark starts; sensors and schedules skip instead of requesting a run that would be refused.
A run names its pipelines in tags: `streamling/pipeline` (one pipeline) and `streamling/pipelines` (all of them,
comma-separated: an asset run launched from the lineage page can span several pipelines).
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Iterable

import dagster as dg
from dagster._core.events import DagsterEvent, DagsterEventType

from streamling.errors import StreamlingError
from streamling_dagster.pipelines import PipelineFile

PIPELINE_TAG = "streamling/pipeline"
PIPELINES_TAG = "streamling/pipelines"
STREAM_TAG = "streamling/stream"
REFUSED_TAG = "streamling/refused"
"""Set on a refused run (by the coordinator, or by the op's own check for a run that never met the coordinator):
the id of the run it would have collided with, or ``outside`` when the holder is not a run of this instance."""
NO_RETRIES = {"dagster/max_retries": "0"}
"""A refused run is not retried: Dagster's run retries would only be refused again."""
RUNNING = (dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.STARTED, dg.DagsterRunStatus.CANCELING)
QUEUED = (dg.DagsterRunStatus.QUEUED,)
ENGINE_REFUSAL = re.compile(r"pipeline '[^']*' is already running \(pid")


EMBEDDED_TAG = "streamling/embedded_clickhouse"
"""The embedded ClickHouse data path a run opens in its own process: `dagster.yaml` lets one run per path out of
the queue (chdb opens a data path in one process at a time)."""


def op_tags(pf: PipelineFile, streaming: bool = False) -> dict[str, str]:
    """Tags for every Streamling op: the coordinator reads them from a run's plan (asset runs carry no job tags)
    and puts them on the run. `streaming`: the op streams, so only a ClickHouse sink keeps the embedded data path
    open for the run's life (`PipelineFile.embedded_clickhouse`)."""
    path = pf.embedded_clickhouse[1 if streaming else 0]
    return {PIPELINE_TAG: pf.name, **({EMBEDDED_TAG: path} if path else {})}


def pipeline_pool(pf: PipelineFile) -> str:
    """The Dagster concurrency pool of every op that runs the pipeline. `dagster.yaml` limits each pool to one run
    at a time (`concurrency.pools`, run granularity), so the queue holds a run back while any pipeline it touches
    is running: a run spanning several pipelines (*Materialize all*) waits for each of them."""
    return f"streamling/{pf.name}"


def run_pipelines(run: dg.DagsterRun) -> set[str]:
    listed = run.tags.get(PIPELINES_TAG)
    if listed:
        return set(listed.split(","))
    one = run.tags.get(PIPELINE_TAG)
    return {one} if one else set()


def other_runs(
    instance: dg.DagsterInstance,
    pipeline: str,
    statuses: Iterable[dg.DagsterRunStatus],
    exclude: str | None = None,
    streams_only: bool = False,
) -> list[dg.RunRecord]:
    """Runs of `pipeline` in `statuses`, oldest first, without `exclude` and refused runs."""
    records = instance.get_run_records(
        filters=dg.RunsFilter(statuses=list(statuses)), order_by="create_timestamp", ascending=True
    )
    return [
        r
        for r in records
        if r.dagster_run.run_id != exclude
        and REFUSED_TAG not in r.dagster_run.tags
        and pipeline in run_pipelines(r.dagster_run)
        and (not streams_only or STREAM_TAG in r.dagster_run.tags)
    ]


def active_stream(instance: dg.DagsterInstance, pipeline: str, exclude: str | None = None) -> dg.DagsterRun | None:
    """The stream run of `pipeline` that is queued, starting, running or being canceled, if any."""
    found = other_runs(instance, pipeline, (*RUNNING, *QUEUED), exclude, streams_only=True)
    return found[0].dagster_run if found else None


def describe(run: dg.DagsterRun) -> str:
    return f"run {run.run_id} ({run.job_name}, {run.status.value})"


def stream_skip_reason(
    context: dg.SensorEvaluationContext | dg.ScheduleEvaluationContext, pipeline: str
) -> dg.SkipReason | None:
    """For sensors and schedules: skip while a stream of the pipeline is active (the run would be refused)."""
    try:
        instance = context.instance
    except dg.DagsterInvariantViolationError:  # a context built in a test without an instance: no runs to see
        return None
    stream = active_stream(instance, pipeline)
    if stream is None:
        return None
    return dg.SkipReason(
        f"{pipeline}: not requesting a run while stream {describe(stream)} is active; terminate it to let this run"
    )


def invalid_now(pf: PipelineFile) -> dg.SkipReason | None:
    """For sensors and schedules: skip while the file on disk no longer validates. Between an edit that breaks it
    and the code location's reload, the loaded definitions still offer its jobs; a run requested then fails to
    start (and Dagster's retries make it fail again)."""
    from streamling_dagster.pipelines import read_pipeline_file

    current = read_pipeline_file(pf.path)
    if current.pipeline is not None:
        return None
    problem = current.errors[0] if current.errors else "it does not validate"
    return dg.SkipReason(f"{pf.name}: {pf.path} is invalid now (fix it, then reload the code location): {problem}")


def refusal(pipeline: str, holder: dg.DagsterRun, job: str) -> str:
    return (
        f"pipeline '{pipeline}' is already running in Dagster {describe(holder)}; this {job} run was not started, "
        f"so that run keeps its positions and Spark checkpoint. To run {job}, terminate run {holder.run_id} first "
        "(its run page, Terminate) or wait for it to end, then launch again."
    )


def mark_refused(instance: dg.DagsterInstance, run_id: str, holder: str) -> None:
    """Tag a run as refused before it is marked failed: the keeper and sensors skip over it, retries leave it."""
    instance.add_run_tags(run_id, {REFUSED_TAG: holder, **NO_RETRIES})


def check_no_other_run(context: dg.OpExecutionContext, pf: PipelineFile, wait_sec: float = 0.0) -> bool:
    """At the start of a Streamling op, before Spark starts: whether this run may go on. When an older run of the
    same pipeline is active (runs started outside the run coordinator, e.g. by `dagster job execute`) — at once,
    or still after `wait_sec` (the ops' `wait_for_running_sec`: a script waits for the running run) — the run is
    refused: tagged `streamling/refused` and never retried, and ended CANCELED with the refusal as its message,
    not FAILURE: nothing went wrong, so no asset is marked failed and no stack trace is shown. The op then
    returns without doing anything (its job's `stopped_cleanly` hook ends the run)."""
    holder = wait_while_held(
        lambda: _older_active(context, pf),
        wait_sec,
        lambda run: context.log.info(
            f"pipeline '{pf.name}' is running in Dagster {describe(run)}; waiting up to {wait_sec:.0f} s "
            "for it to end (wait_for_running_sec)"
        ),
    )
    if holder is None:
        return True
    mark_refused(context.instance, context.run_id, holder.run_id)
    waited = f" (waited {wait_sec:.0f} s for it)" if wait_sec else ""
    end_canceled(context, refusal(pf.name, holder, context.job_name) + waited)
    return False


def end_canceled(context: dg.OpExecutionContext, message: str) -> None:
    """Mark the run CANCELING, then CANCELED with `message` at INFO (`report_run_canceled` logs at ERROR: a stop
    on request, or a refusal, is not an error). The op returns next, and the job's `stopped_cleanly` hook ends the
    run there without a step failure."""
    run = context.instance.get_run_by_id(context.run_id)
    if run is None or run.status == dg.DagsterRunStatus.CANCELED:
        return
    if run.status != dg.DagsterRunStatus.CANCELING:
        context.instance.report_run_canceling(run, message=message)
    canceled = DagsterEvent(
        event_type_value=DagsterEventType.RUN_CANCELED.value, job_name=run.job_name, message=message
    )
    context.instance.report_dagster_event(canceled, run_id=run.run_id, log_level=logging.INFO)


def wait_while_held(
    find: Callable[[], dg.DagsterRun | None], wait_sec: float, waiting: Callable[[dg.DagsterRun], None]
) -> dg.DagsterRun | None:
    """The run `find` returns while it holds the pipeline, polled every second for up to `wait_sec`: None once
    nothing holds it, else the holder after the wait. `waiting` is told once per holder waited for."""
    deadline = time.monotonic() + wait_sec
    said: str | None = None
    while (holder := find()) is not None and time.monotonic() < deadline:
        if said != holder.run_id:
            waiting(holder)
            said = holder.run_id
        time.sleep(1.0)
    return holder


def _older_active(context: dg.OpExecutionContext, pf: PipelineFile) -> dg.DagsterRun | None:
    me = context.instance.get_run_record_by_id(context.run_id)
    mine = me.create_timestamp if me is not None else None
    for record in other_runs(context.instance, pf.name, RUNNING, exclude=context.run_id):
        if mine is None or record.create_timestamp <= mine:  # the younger run gives way, never both
            return record.dagster_run
    return None


def engine_refusal(context: dg.OpExecutionContext, pf: PipelineFile, error: BaseException) -> dg.Failure | None:
    """The engine's run lease refused the run (another process holds the pipeline): the same clean message,
    naming the Dagster run when the holder is one."""
    message = error.message if isinstance(error, StreamlingError) else str(error)
    if not ENGINE_REFUSAL.search(message):
        return None
    holders = other_runs(context.instance, pf.name, RUNNING, exclude=context.run_id)
    mark_refused(context.instance, context.run_id, holders[0].dagster_run.run_id if holders else "outside")
    if holders:
        return dg.Failure(description=refusal(pf.name, holders[0].dagster_run, context.job_name), allow_retries=False)
    return dg.Failure(
        description=(
            f"{message}, outside this Dagster instance (a `streamling run`, or another DAGSTER_HOME); this "
            f"{context.job_name} run was not started. Stop that run first, then launch again."
        ),
        allow_retries=False,
    )


def backfill_schedule(
    pf: PipelineFile, job: dg.JobDefinition | dg.UnresolvedAssetJobDefinition
) -> dg.ScheduleDefinition:
    """`<pipeline>__backfill_schedule`: the `orchestration.backfill_schedule` cron, skipping a tick while the
    pipeline is being streamed."""
    plan = pf.orchestration
    assert plan.backfill_schedule is not None

    @dg.schedule(
        name=f"{pf.name}__backfill_schedule",
        job=job,
        cron_schedule=plan.backfill_schedule,
        execution_timezone=plan.timezone,
        default_status=dg.DefaultScheduleStatus.RUNNING,
        description=f"Runs {job.name} on `{plan.backfill_schedule}` ({plan.timezone}), except while a stream of "
        f"{pf.name} is active.",
    )
    def schedule(context: dg.ScheduleEvaluationContext) -> dg.RunRequest | dg.SkipReason:
        return stream_skip_reason(context, pf.name) or invalid_now(pf) or dg.RunRequest(tags={PIPELINE_TAG: pf.name})

    return schedule
