"""`defs`: every pipeline file of a directory as assets, jobs, sensors and checks, with shared resources.

A file that fails validation does not break the code location: it becomes an asset whose check fails
with the validator's messages, and the other pipelines load as usual.
"""

from __future__ import annotations

from pathlib import Path

import dagster as dg

from streamling.config import load_settings
from streamling_dagster.assets import pipeline_specs
from streamling_dagster.backfill import backfill_assets
from streamling_dagster.backfill_sensor import backfill_sensor
from streamling_dagster.guard import backfill_schedule
from streamling_dagster.jobs import backfill_then_stream_job, stream_job
from streamling_dagster.keeper import keeper_sensor
from streamling_dagster.observations import health_checks, positions_sensor, reports_lag
from streamling_dagster.pipelines import PipelineFile, discover, pipelines_directory
from streamling_dagster.resources import StreamlingResource, StreamlingSparkResource


def invalid_pipeline(pf: PipelineFile) -> tuple[dg.AssetSpec, dg.AssetChecksDefinition]:
    key = dg.AssetKey([pf.name, "pipeline"])
    message = "\n".join(f"- {e}" for e in pf.errors)
    spec = dg.AssetSpec(
        key,
        description=f"Pipeline file {pf.path.name} is invalid:\n\n{message}",
        metadata={"pipeline_file": str(pf.path), "errors": dg.MetadataValue.json(pf.errors)},
        group_name=pf.name,
    )

    @dg.asset_check(asset=key, name="pipeline_is_valid", description="The pipeline file passes validation")
    def pipeline_is_valid() -> dg.AssetCheckResult:
        return dg.AssetCheckResult(
            passed=False, severity=dg.AssetCheckSeverity.ERROR, description=message, metadata={"errors": pf.errors}
        )

    return spec, pipeline_is_valid


def build_definitions(directory: Path | None = None) -> dg.Definitions:
    assets: list[dg.AssetSpec | dg.AssetsDefinition] = []
    checks: list[dg.AssetChecksDefinition] = []
    jobs: list[dg.JobDefinition | dg.UnresolvedAssetJobDefinition] = []
    schedules: list[dg.ScheduleDefinition] = []
    seen: set[dg.AssetKey] = set()
    pipelines = discover(directory or pipelines_directory())
    sensors = [positions_sensor(pipelines)]
    for pf in pipelines:
        if pf.pipeline is None:
            spec, check = invalid_pipeline(pf)
            assets.append(spec)
            checks.append(check)
            continue
        upstream, sinks = pipeline_specs(pf)
        for spec in upstream:
            if spec.key not in seen:  # a topic or table read by several pipelines is one asset
                seen.add(spec.key)
                assets.append(spec)
        assets.append(backfill_assets(pf, sinks))
        stream = stream_job(pf)
        jobs.append(stream)
        sensors.append(keeper_sensor(pf, stream))
        if reports_lag(pf):
            checks.append(health_checks(pf))
        if pf.can_backfill:
            job = dg.define_asset_job(
                f"{pf.name}__backfill",
                selection=dg.AssetSelection.assets(*[s.key for s in sinks]),
                description=f"Run {pf.path.name}'s bounded sources to their end (job mode).",
                tags={"streamling/pipeline": pf.name},
                executor_def=dg.in_process_executor,
            )
            jobs += [job, backfill_then_stream_job(pf)]
            on_change = pf.orchestration.backfill_on_change
            status = dg.DefaultSensorStatus.RUNNING if on_change else dg.DefaultSensorStatus.STOPPED
            sensors.append(backfill_sensor(pf, job, default_status=status))
            plan = pf.orchestration
            if plan.backfill_schedule:
                schedules.append(backfill_schedule(pf, job))
    settings = load_settings()
    return dg.Definitions(
        sensors=sensors,
        assets=assets,
        asset_checks=checks,
        jobs=jobs,
        schedules=schedules,
        resources={
            "streamling": StreamlingResource(),
            "spark": StreamlingSparkResource.from_settings(settings),
        },
    )
