"""The run coordinator: Dagster's queue, plus a refusal for any run of a pipeline that is being streamed.

Configured in `dagster.yaml` in place of the plain `QueuedRunCoordinator` (same options; the one-run-per-pipeline
limit is the pipelines' concurrency pools, `guard.pipeline_pool`). Every submitted run goes through `submit_run`
— launched from a job page, an asset page, the lineage page's "Materialize all", a sensor, a schedule or the
GraphQL API. Asset runs (`__ASSET_JOB`) carry no job tags, so the run's pipelines are read from the tags of the
ops in its plan (`guard.op_tags`) and written onto the run, which the in-op guard then sees; so is the embedded
ClickHouse data path the run opens in its process (`streamling/embedded_clickhouse`), which `dagster.yaml` limits
to one run per path.

A refused launch leaves nothing behind that looks like a failure. Dagster has already created the run, with its
planned materializations and asset checks, when the coordinator sees it; marked failed, that run would show the
asset "Failed", its checks "Execution failed", and be retried by Dagster's run retries. So the coordinator deletes
the run with its events and planned check executions, and answers the launch with an error whose message names
the stream run to terminate first and whose stack is empty: the UI shows that message, without a stack trace.
(A run that never meets the coordinator — `dagster job execute` — is refused by its op instead:
`guard.check_no_other_run`.)
"""

from __future__ import annotations

import dagster as dg
from dagster._core.run_coordinator import QueuedRunCoordinator, SubmitRunContext
from dagster._core.storage.event_log.schema import AssetCheckExecutionsTable
from dagster._core.storage.event_log.sql_event_log import SqlEventLogStorage
from dagster._utils.error import SerializableErrorInfo
from dagster_graphql.implementation.utils import UserFacingGraphQLError
from dagster_graphql.schema.errors import GraphenePythonError

from streamling_dagster.guard import EMBEDDED_TAG, PIPELINE_TAG, PIPELINES_TAG, active_stream, refusal


class LaunchRefused(UserFacingGraphQLError):
    """The launch answer for a refused run: the refusal as a GraphQL `PythonError` with an empty stack — the one
    error type whose message the UI shows (for the others, e.g. `RunConflict`, it says "cannot be executed with the
    provided config") — so the operator reads the reason, not a stack trace."""

    def __init__(self, message: str) -> None:
        super().__init__(GraphenePythonError(SerializableErrorInfo(message, [], "RunRefused")))
        self.message = message

    def __str__(self) -> str:
        return self.message


def planned(instance: dg.DagsterInstance, run: dg.DagsterRun, tag: str) -> list[str]:
    """The values of `tag` on the ops the run will execute, from its execution plan snapshot (sorted)."""
    if run.execution_plan_snapshot_id is None:
        return []
    plan = instance.get_execution_plan_snapshot(run.execution_plan_snapshot_id)
    selected = set(plan.step_keys_to_execute or [step.key for step in plan.steps])
    tags = [step.tags or {} for step in plan.steps if step.key in selected]
    return sorted({t[tag] for t in tags if tag in t})


def forget(instance: dg.DagsterInstance, run_id: str) -> None:
    """Delete a refused run and all it planned: its events (planned materializations among them) and its planned
    asset-check executions, which `delete_run` leaves (they would show as the checks' latest execution)."""
    instance.delete_run(run_id)
    storage = instance.event_log_storage
    if isinstance(storage, SqlEventLogStorage):
        with storage.index_connection() as conn:
            conn.execute(AssetCheckExecutionsTable.delete().where(AssetCheckExecutionsTable.c.run_id == run_id))


class StreamlingRunCoordinator(QueuedRunCoordinator):
    def submit_run(self, context: SubmitRunContext) -> dg.DagsterRun:
        run = context.dagster_run
        instance = self._instance
        listed = sorted(set(run.tags.get(PIPELINES_TAG, "").split(",")) - {""})
        pipelines = listed or planned(instance, run, PIPELINE_TAG)
        if not pipelines and PIPELINE_TAG in run.tags:
            pipelines = [run.tags[PIPELINE_TAG]]
        if pipelines:
            for pipeline in pipelines:
                stream = active_stream(instance, pipeline, exclude=run.run_id)
                if stream is not None:
                    forget(instance, run.run_id)
                    raise LaunchRefused(refusal(pipeline, stream, run.job_name))
            tags = {PIPELINES_TAG: ",".join(pipelines)}
            if PIPELINE_TAG not in run.tags:
                tags[PIPELINE_TAG] = ",".join(pipelines)
            if paths := planned(instance, run, EMBEDDED_TAG):  # queued one run per embedded data path
                tags[EMBEDDED_TAG] = ",".join(paths)
            instance.add_run_tags(run.run_id, tags)
            run = instance.get_run_by_id(run.run_id) or run
        known_pools(instance, run)
        return super().submit_run(SubmitRunContext(run, context.workspace))


def known_pools(instance: dg.DagsterInstance, run: dg.DagsterRun) -> None:
    """Give the run's pools their default limit now, as it is queued. Dagster's queue daemon reads the pools that
    have a limit before it gives a newly seen pool its default, so in the pass that first meets a pool the limit
    does not hold: a scheduled backfill and a stream of one pipeline queued in the same second both started (the
    younger then refused by its op). A pool set up here is limited from the first pass on."""
    pools = (run.run_op_concurrency.all_pools or set()) if run.run_op_concurrency else set()
    if not pools or instance.global_op_concurrency_default_limit is None:
        return
    storage = instance.event_log_storage
    for pool in sorted(set(pools) - storage.get_concurrency_keys()):
        storage.initialize_concurrency_limit_to_default(pool)
