"""A pipeline as assets: its sinks are materializable assets (`<pipeline>/<sink>`); its sources (Kafka topics,
ClickHouse tables, generators) and transforms are specs upstream of them, so the asset graph shows the topology."""

from typing import Any

import dagster as dg
from dagster import AssetExecutionContext

from streamling import RunSummary, SourceStatus, source_status
from streamling.topology.pipeline import Node
from streamling_dagster.observations import feeding
from streamling_dagster.pipelines import PipelineFile, asset_name, node_key
from streamling_dagster.resources import StreamlingResource, StreamlingSparkResource
from streamling_dagster.streaming import StreamConfig, run_engine


def source_keys(node: Node, pipeline: str) -> list[dg.AssetKey]:
    """What a source reads, as external asset keys shared across pipelines reading the same topic or table."""
    spec: Any = node.spec
    if node.spec.type == "kafka":
        return [dg.AssetKey(["kafka", asset_name(spec.topic)])]
    if node.spec.type == "clickhouse":
        return [_table_key(spec.table_name)]
    if node.spec.type == "hybrid":
        keys = [_table_key(b.table_name) for b in spec.bounded_sources]
        if spec.unbounded_source is not None:
            keys.append(dg.AssetKey(["kafka", asset_name(spec.unbounded_source.topic)]))
        return keys
    return [dg.AssetKey([pipeline, asset_name(node.name)])]


def _table_key(table_name: str) -> dg.AssetKey:
    return dg.AssetKey(["clickhouse", *[asset_name(p) for p in table_name.split(".")]])


def _described(what: str, pf: PipelineFile, node: Node) -> str:
    return f"{what}\n\n```yaml\n{pf.node_yaml(node)}\n```"


def _targets(node: Node) -> dict[str, Any]:
    """Connector targets for metadata: where data comes from or goes to, never credentials (values as the spec
    serializes them for display: a URL without user, password or query values)."""
    spec: Any = node.spec
    shown = spec.model_dump()
    out = {"type": node.spec.type}
    for field in ("topic", "table_name", "table", "schema_", "landing_table", "agg_table", "url"):
        value = shown.get(field)
        if isinstance(value, str):
            out[field.rstrip("_")] = value
    if getattr(spec, "sql", None):
        out["sql"] = dg.MetadataValue.md(f"```sql\n{spec.sql}\n```")
    if node.spec.type == "script":
        out["language"] = spec.language
        out["script"] = dg.MetadataValue.md(f"```{spec.language}\n{spec.script}\n```")
    return out


def pipeline_specs(pf: PipelineFile) -> tuple[list[dg.AssetSpec], list[dg.AssetSpec]]:
    """(upstream specs: sources and transforms, sink specs)."""
    assert pf.pipeline is not None
    pipeline = pf.pipeline
    upstream: dict[dg.AssetKey, dg.AssetSpec] = {}
    keys_of: dict[str, list[dg.AssetKey]] = {}
    for node in pipeline.sources:
        keys_of[node.name] = source_keys(node, pf.name)
        for key in keys_of[node.name]:
            upstream[key] = dg.AssetSpec(
                key,
                description=_described(f"Read by source '{node.name}' of pipeline {pf.name}.", pf, node),
                metadata=_targets(node),
                group_name=pf.name if key.path[0] == pf.name else None,
                kinds={node.spec.type.split(".")[-1]},
            )
    for name in pipeline.topological_order():
        node = pipeline.nodes[name]
        if node.kind != "transform":
            continue
        key = node_key(pf.name, name)
        keys_of[name] = [key]
        deps = [k for parent in pipeline.inputs.get(name, []) for k in keys_of.get(parent, [])]
        upstream[key] = dg.AssetSpec(
            key,
            deps=deps,
            description=_described(f"Transform '{name}' of pipeline {pf.name}.", pf, node),
            metadata=_targets(node),
            group_name=pf.name,
            kinds={"spark"},
        )
    sinks = [
        dg.AssetSpec(
            node_key(pf.name, node.name),
            deps=[k for parent in pipeline.inputs.get(node.name, []) for k in keys_of.get(parent, [])],
            description=_described(f"Sink '{node.name}' of pipeline {pf.name} ({pf.path.name}).", pf, node),
            metadata={
                **_targets(node),
                "pipeline_file": str(pf.path),
                "pipeline_yaml": dg.MetadataValue.md(f"```yaml\n{pf.text}\n```"),
            },
            group_name=pf.name,
            kinds={node.spec.type.split(".")[-1]},
        )
        for node in pipeline.sinks
    ]
    return list(upstream.values()), sinks


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
            asset=node_key(pf.name, node.name),
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
            yield dg.MaterializeResult(asset_key=node_key(pf.name, sink), metadata=metadata)
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
    sink = pf.pipeline.nodes[next(n for n in pf.pipeline.nodes if node_key(pf.name, n) == key)]
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
