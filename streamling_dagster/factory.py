"""One pipeline file as Dagster definitions — for users who build their own `Definitions` (or a component).

Only what the pipeline can use is built: a backfill (`<p>__backfill`, materializable sink assets) when it has
bounded sources, a stream (`<p>__stream` and its keeper, observable sink assets) when a source never ends, and
`<p>__backfill_then_stream` when both. A file that fails validation becomes an asset whose check fails with
the validator's messages (file, line, message), so it is seen rather than silently missing.
"""

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import dagster as dg
from dagster import AssetExecutionContext

from streamling import source_status
from streamling.config import Settings, load_settings
from streamling_dagster.assets import PipelineSpecs, input_spec, pipeline_specs
from streamling_dagster.backfill import backfill_asset_args, backfill_assets
from streamling_dagster.backfill_sensor import backfill_sensor
from streamling_dagster.guard import backfill_schedule
from streamling_dagster.jobs import backfill_then_stream_job, stream_job
from streamling_dagster.keeper import keeper_sensor
from streamling_dagster.observations import health_checks, reports_lag, status_metadata
from streamling_dagster.pipelines import PipelineFile, located_errors, read_pipeline_file
from streamling_dagster.resources import StreamlingResource
from streamling_dagster.translator import StreamlingTranslator

VALIDITY_CHECK = "pipeline_is_valid"


@dataclass
class PipelineDefinitions:
    """What one pipeline file contributes; `inputs` (topics and tables it reads) are left to the caller, which
    defines each once however many pipelines read it."""

    pf: PipelineFile
    specs: PipelineSpecs | None = None
    assets: list[dg.AssetSpec | dg.AssetsDefinition] = field(default_factory=list)
    checks: list[dg.AssetChecksDefinition] = field(default_factory=list)
    jobs: list[Any] = field(default_factory=list)
    """Job definitions, and asset jobs still to be resolved against the assets."""
    sensors: list[dg.SensorDefinition] = field(default_factory=list)
    schedules: list[dg.ScheduleDefinition] = field(default_factory=list)


def job_names(pf: PipelineFile) -> list[str]:
    names = []
    if pf.can_backfill:
        names.append(f"{pf.name}__backfill")
    if pf.can_stream:
        names.append(f"{pf.name}__stream")
    if pf.can_backfill and pf.can_stream:
        names.append(f"{pf.name}__backfill_then_stream")
    return names


def invalid_pipeline(
    pf: PipelineFile, settings: Settings | None = None
) -> tuple[dg.AssetSpec, dg.AssetChecksDefinition]:
    key = dg.AssetKey([pf.name, "pipeline"])
    message = "\n".join(f"- {e}" for e in located_errors(pf))
    spec = dg.AssetSpec(
        key,
        description=f"Pipeline file {pf.path.name} is invalid, so none of its jobs exist:\n\n{message}",
        metadata={"pipeline_file": str(pf.path), "errors": dg.MetadataValue.json(located_errors(pf))},
        group_name=pf.name,
        kinds={"streamling"},
    )

    @dg.asset_check(asset=key, name=VALIDITY_CHECK, description="The pipeline file passes validation")
    def pipeline_is_valid() -> dg.AssetCheckResult:
        fresh = read_pipeline_file(pf.path, settings)
        errors = located_errors(fresh)
        return dg.AssetCheckResult(
            passed=not errors,
            severity=dg.AssetCheckSeverity.ERROR,
            description="\n".join(errors) or "valid now: reload the code location to load its jobs",
            metadata={"errors": errors},
        )

    return spec, pipeline_is_valid


def stream_observations(pf: PipelineFile, specs: list[dg.AssetSpec]) -> dg.AssetsDefinition:
    """A stream-only pipeline's sinks cannot be materialized (nothing bounded to run): they are observable, and
    *Observe* reads where the stream stands from the state backend — positions, backlog, last epoch — cheaply,
    without Spark, whether or not the stream runs."""
    feeding = _feeding(pf)

    @dg.multi_observable_source_asset(
        name=f"{pf.name}__observe",
        specs=specs,
        description=f"Where {pf.path.name}'s stream stands (the stream job `{pf.name}__stream` writes these sinks)",
    )
    def observe(context: AssetExecutionContext, streamling: StreamlingResource) -> Any:
        settings = streamling.pipeline_settings(pf)
        statuses = source_status(pf.path, settings)
        for spec in specs:
            metadata = status_metadata(pf, statuses, feeding[spec.key], settings)
            yield dg.ObserveResult(asset_key=spec.key, metadata=metadata)

    return observe


def _feeding(pf: PipelineFile) -> dict[dg.AssetKey, list[str]]:
    assert pf.pipeline is not None
    pipeline = pf.pipeline
    return {
        pf.asset_key(sink.name): [s.name for s in pipeline.sources if sink.name in pipeline.downstream(s.name)]
        for sink in pipeline.sinks
    }


def build_pipeline(
    pf: PipelineFile,
    translator: StreamlingTranslator | None = None,
    settings: Settings | None = None,
    taken: set[dg.AssetKey] | None = None,
) -> PipelineDefinitions:
    out = PipelineDefinitions(pf)
    settings = settings or load_settings()
    if pf.pipeline is None:
        spec, check = invalid_pipeline(pf, settings)
        out.assets.append(spec)
        out.checks.append(check)
        return out
    translator = translator or StreamlingTranslator()
    specs = pipeline_specs(pf, translator, settings, taken, job_names(pf))
    out.specs = specs
    out.assets += specs.upstream
    if pf.can_backfill:
        out.assets.append(backfill_assets(pf, specs.sinks))
        job = dg.define_asset_job(
            f"{pf.name}__backfill",
            selection=dg.AssetSelection.assets(*[s.key for s in specs.sinks]),
            description=f"Run {pf.path.name}'s bounded sources to their end (job mode).",
            tags={"streamling/pipeline": pf.name},
            executor_def=dg.in_process_executor,
        )
        out.jobs.append(job)
        on_change = pf.orchestration.backfill_on_change
        status = dg.DefaultSensorStatus.RUNNING if on_change else dg.DefaultSensorStatus.STOPPED
        out.sensors.append(backfill_sensor(pf, job, default_status=status))
        plan = pf.orchestration
        if plan.backfill_schedule:
            out.schedules.append(backfill_schedule(pf, job))  # skips while the pipeline streams
    else:
        out.assets.append(stream_observations(pf, specs.sinks))
    if pf.can_stream:
        stream = stream_job(pf)
        out.jobs.append(stream)
        out.sensors.append(keeper_sensor(pf, stream))
        if reports_lag(pf):
            out.checks.append(health_checks(pf))
    if pf.can_backfill and pf.can_stream:
        out.jobs.append(backfill_then_stream_job(pf))
    return out


def streamling_assets(
    *,
    pipeline: str | Path,
    translator: StreamlingTranslator | None = None,
    settings: Settings | None = None,
    name: str | None = None,
) -> Callable[[Callable[..., Any]], dg.AssetsDefinition]:
    """`@dbt_assets` for a pipeline file: the decorated function becomes the backfill of its sinks — their assets
    (keyed by the translator), `rows_reconcile` checks and partitions — and runs it with
    ``yield from streamling.backfill(context, spark)``, with whatever else it wants before or after::

        @streamling_assets(pipeline="pipelines/orders_hybrid.yaml")
        def orders(context: AssetExecutionContext, streamling: StreamlingResource, spark: StreamlingSparkResource):
            yield from streamling.backfill(context, spark)

    The pipeline must be able to backfill (bounded sources); build its stream jobs with `pipeline_definitions`.
    """
    settings = settings or load_settings()
    pf = read_pipeline_file(Path(pipeline), settings)
    if pf.pipeline is None:
        raise dg.DagsterInvalidDefinitionError("\n".join(located_errors(pf)))
    if not pf.can_backfill:
        raise dg.DagsterInvalidDefinitionError(f"{pf.path} cannot backfill: {pf.backfill_errors[0]}")
    specs = pipeline_specs(pf, translator or StreamlingTranslator(), settings, None, job_names(pf))

    def decorate(fn: Callable[..., Any]) -> dg.AssetsDefinition:
        return dg.multi_asset(**backfill_asset_args(pf, specs.sinks, name or fn.__name__))(fn)

    return decorate


def pipeline_definitions(
    path: str | Path | PipelineFile,
    translator: StreamlingTranslator | None = None,
    settings: Settings | None = None,
    *,
    define_inputs: bool = True,
    resources: dict[str, Any] | None = None,
) -> dg.Definitions:
    """Everything for one pipeline file, with its own positions sensor (`<p>__committed_positions`).

    `define_inputs=False` leaves the topics and tables it reads undefined (Dagster shows them as external
    dependencies) — for when another definition, another pipeline's sink say, is their producer.
    `resources` defaults to the `streamling` and `spark` resources built from the settings.
    """
    from streamling_dagster.observations import positions_sensor
    from streamling_dagster.resources import default_resources

    settings = settings or load_settings()
    translator = translator or StreamlingTranslator()
    # the component passes a PipelineFile
    pf = path if isinstance(path, PipelineFile) else read_pipeline_file(Path(path), settings)
    built = build_pipeline(pf, translator, settings)
    assets = list(built.assets)
    if define_inputs and built.specs is not None:
        assets += [input_spec(key, [obj], translator) for key, obj in built.specs.inputs.items()]
    sensors = list(built.sensors)
    if built.pf.pipeline is not None:
        sensors.append(positions_sensor([built.pf], name=f"{built.pf.name}__committed_positions"))
    return dg.Definitions(
        assets=assets,
        asset_checks=built.checks,
        jobs=built.jobs,
        sensors=sensors,
        schedules=built.schedules,
        resources=resources if resources is not None else default_resources(settings),
    )
