"""The backfill: materializing a pipeline's sink assets runs its bounded sources to their end (job mode),
with a `rows_reconcile` check per sink and the run's figures as materialization metadata."""

from typing import Any

import dagster as dg
from dagster import AssetExecutionContext

from streamling import RunSummary, SourceStatus, source_status
from streamling_dagster.observations import feeding
from streamling_dagster.pipelines import PipelineFile
from streamling_dagster.resources import StreamlingResource, StreamlingSparkResource
from streamling_dagster.streaming import StreamConfig, run_engine

RECONCILE_CHECK = "rows_reconcile"
COUNTING_SOURCES = {"kafka", "generator", "clickhouse", "hybrid"}
"""Sources that count the rows of each epoch, so a backfill can be reconciled."""


def reconcilable(pf: PipelineFile, sink: str) -> bool:
    """Rows can be reconciled when every feeding source counts its rows and every transform on the way keeps
    or drops rows (SQL and dynamic-table checks: the stateless guard rules out joins and explode)."""
    assert pf.pipeline is not None
    pipeline = pf.pipeline
    sources = feeding(pf, sink)
    between = {n for s in sources for n in pipeline.downstream(s)} - {sink}
    return all(pipeline.nodes[s].spec.type in COUNTING_SOURCES for s in sources) and all(
        pipeline.nodes[n].spec.type in ("sql", "dynamic_table")
        for n in between
        if pipeline.nodes[n].kind == "transform"
    )


def backfill_assets(pf: PipelineFile, sinks: list[dg.AssetSpec]) -> dg.AssetsDefinition:
    """Materializing the sinks runs the pipeline's bounded sources to their end (job mode)."""
    assert pf.pipeline is not None
    checks = [
        dg.AssetCheckSpec(
            RECONCILE_CHECK,
            asset=pf.asset_key(node.name),
            description="Rows read ≥ rows the sources offered at the start, and rows read = written + filtered out",
        )
        for node in pf.pipeline.sinks
        if reconcilable(pf, node.name)
    ]

    @dg.multi_asset(name=f"{pf.name}__run", specs=sinks, check_specs=checks, can_subset=False)
    def run(
        context: AssetExecutionContext,
        config: StreamConfig,
        streamling: StreamlingResource,
        spark: StreamlingSparkResource,
    ) -> Any:
        settings = streamling.pipeline_settings(pf, job_mode="true")
        before = source_status(pf.path, settings)
        context.log.info(f"Running {pf.path} in job mode (state namespace {settings.application_id})")
        summary = yield from run_engine(
            context.op_execution_context, pf, settings, spark.spark_session, config, observe=False
        )
        for sink, metadata in sink_metadata(pf, summary).items():
            yield dg.MaterializeResult(asset_key=pf.asset_key(sink), metadata=metadata)
        for spec in checks:
            yield reconcile(pf, spec.asset_key, before, summary)

    return run


def sink_metadata(pf: PipelineFile, summary: RunSummary) -> dict[str, dict[str, Any]]:
    """What a bounded run did, per sink: rows and operations written, speed, and where each source ended."""
    assert pf.pipeline is not None
    duration = summary.duration_sec
    positions = {name: progress.position for name, progress in summary.sources.items()}
    epochs = {name: progress.epochs for name, progress in summary.sources.items()}
    out = {}
    for node in pf.pipeline.sinks:
        rows = summary.sink_rows.get(node.name, 0)
        metadata: dict[str, Any] = {
            "rows_written": dg.MetadataValue.int(rows),
            "duration_sec": dg.MetadataValue.float(round(duration, 3)),
            "rows_per_sec": dg.MetadataValue.float(round(rows / duration, 1) if duration else 0.0),
            "epochs": dg.MetadataValue.json(epochs),
            "final_positions": dg.MetadataValue.json(positions),
        }
        for op, count in summary.sink_ops.get(node.name, {}).items():
            metadata[op] = dg.MetadataValue.int(count)
        out[node.name] = metadata
    return out


def reconcile(
    pf: PipelineFile, key: dg.AssetKey, before: dict[str, SourceStatus], summary: RunSummary
) -> dg.AssetCheckResult:
    assert pf.pipeline is not None
    sink = next(s for s in pf.pipeline.sinks if pf.asset_key(s.name) == key)
    sources = feeding(pf, sink.name)
    read = sum(summary.sources[s].rows_in for s in sources if s in summary.sources)
    offered = [before[s].backlog_total if s in before else None for s in sources]
    expected = sum(o for o in offered if o is not None) if all(o is not None for o in offered) else None
    written = summary.sink_rows.get(sink.name, 0)
    problems = []
    if expected is not None and read < expected:  # more is fine: records may arrive while the run starts
        problems.append(f"read {read} rows but the sources offered {expected} when the run started")
    if written > read:
        problems.append(f"wrote {written} rows, more than the {read} read")
    return dg.AssetCheckResult(
        asset_key=key,
        check_name=RECONCILE_CHECK,
        passed=not problems,
        description="; ".join(problems) or f"{read} read = {written} written + {read - written} filtered out",
        metadata={
            "source_rows_offered": expected if expected is not None else -1,
            "source_rows_read": read,
            "sink_rows_written": written,
            "rows_filtered": read - written,
        },
    )
