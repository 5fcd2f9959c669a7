"""The run coordinator: Dagster's queue, plus a refusal for any run of a pipeline that is being streamed.

Configured in `dagster.yaml` in place of the plain `QueuedRunCoordinator` (same options, so the one-run-per-
pipeline tag limit still queues a backfill behind a backfill). Every submitted run goes through `submit_run`
— launched from a job page, an asset page, the lineage page's "Materialize all", a sensor, a schedule or the
GraphQL API. Asset runs (`__ASSET_JOB`) carry no job tags, so the run's pipelines are read from the tags of the
ops in its plan (`guard.op_tags`) and written onto the run, which the tag limit and the in-op guard then see.
A refused run ends FAILURE before it is queued, tagged `streamling/refused` and ``dagster/max_retries=0`` (Dagster's
run retries would only be refused again), and the launch returns the error: the UI shows its message, naming the
stream run to terminate first.
"""

from __future__ import annotations

import dagster as dg
from dagster._core.run_coordinator import QueuedRunCoordinator, SubmitRunContext

from streamling_dagster.guard import PIPELINE_TAG, PIPELINES_TAG, RunRefused, active_stream, mark_refused, refusal


def planned_pipelines(instance: dg.DagsterInstance, run: dg.DagsterRun) -> list[str]:
    """The pipelines whose ops the run will execute, from its execution plan snapshot (sorted)."""
    if run.execution_plan_snapshot_id is None:
        return []
    plan = instance.get_execution_plan_snapshot(run.execution_plan_snapshot_id)
    selected = set(plan.step_keys_to_execute or [step.key for step in plan.steps])
    tags = [step.tags or {} for step in plan.steps if step.key in selected]
    return sorted({t[PIPELINE_TAG] for t in tags if PIPELINE_TAG in t})


class StreamlingRunCoordinator(QueuedRunCoordinator):
    def submit_run(self, context: SubmitRunContext) -> dg.DagsterRun:
        run = context.dagster_run
        instance = self._instance
        pipelines = sorted(set(run.tags.get(PIPELINES_TAG, "").split(",")) - {""}) or planned_pipelines(instance, run)
        if not pipelines and PIPELINE_TAG in run.tags:
            pipelines = [run.tags[PIPELINE_TAG]]
        if pipelines:
            tags = {PIPELINES_TAG: ",".join(pipelines)}
            if PIPELINE_TAG not in run.tags:
                tags[PIPELINE_TAG] = ",".join(pipelines)
            instance.add_run_tags(run.run_id, tags)
            for pipeline in pipelines:
                stream = active_stream(instance, pipeline, exclude=run.run_id)
                if stream is not None:
                    mark_refused(instance, run.run_id, stream.run_id)
                    raise RunRefused(refusal(pipeline, stream, run.job_name))
            run = instance.get_run_by_id(run.run_id) or run
        return super().submit_run(SubmitRunContext(run, context.workspace))
