"""`defs`: every pipeline file of a directory as assets and a backfill job, with shared resources.

A file that fails validation does not break the code location: it becomes an asset whose check fails
with the validator's messages, and the other pipelines load as usual.
"""

from __future__ import annotations

from pathlib import Path

import dagster as dg

from streamling.config import load_settings
from streamling_dagster.assets import backfill_assets, pipeline_specs
from streamling_dagster.observations import positions_sensor
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
    jobs = []
    schedules: list[dg.ScheduleDefinition] = []
    seen: set[dg.AssetKey] = set()
    pipelines = discover(directory or pipelines_directory())
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
        if pf.can_backfill:
            job = dg.define_asset_job(
                f"{pf.name}__backfill",
                selection=dg.AssetSelection.assets(*[s.key for s in sinks]),
                description=f"Run {pf.path.name}'s bounded sources to their end (job mode).",
                tags={"streamling/pipeline": pf.name},
            )
            jobs.append(job)
            plan = pf.orchestration
            if plan is not None and plan.backfill_schedule:
                schedules.append(
                    dg.ScheduleDefinition(
                        name=f"{pf.name}__backfill_schedule",
                        job=job,
                        cron_schedule=plan.backfill_schedule,
                        execution_timezone=plan.timezone,
                        default_status=dg.DefaultScheduleStatus.RUNNING,
                    )
                )
    settings = load_settings()
    return dg.Definitions(
        sensors=[positions_sensor(pipelines)],
        assets=assets,
        asset_checks=checks,
        jobs=jobs,
        schedules=schedules,
        resources={
            "streamling": StreamlingResource(),
            "spark": StreamlingSparkResource.from_settings(settings),
        },
    )
