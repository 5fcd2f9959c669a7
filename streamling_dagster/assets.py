"""A pipeline as assets: its sinks are materializable assets (`<pipeline>/<sink>`); its sources (Kafka topics,
ClickHouse tables, generators) and transforms are specs upstream of them, so the asset graph shows the topology."""

import time
from typing import Any

import dagster as dg
from dagster import AssetExecutionContext

from streamling import run_pipeline
from streamling.runtime.executor import RunSummary
from streamling.topology.pipeline import Node
from streamling_dagster.pipelines import PipelineFile, asset_name
from streamling_dagster.resources import StreamlingResource, StreamlingSparkResource


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


def node_key(pipeline: str, node: str) -> dg.AssetKey:
    return dg.AssetKey([pipeline, asset_name(node)])


def _targets(node: Node) -> dict[str, Any]:
    """Connector targets for metadata: where data comes from or goes to, never credentials."""
    spec: Any = node.spec
    out = {"type": node.spec.type}
    for field in ("topic", "table_name", "table", "schema_", "landing_table", "agg_table", "url"):
        value = getattr(spec, field, None)
        if isinstance(value, str):
            out[field.rstrip("_")] = value
    if getattr(spec, "sql", None):
        out["sql"] = dg.MetadataValue.md(f"```sql\n{spec.sql}\n```")
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
            metadata={**_targets(node), "pipeline_file": str(pf.path)},
            group_name=pf.name,
            kinds={node.spec.type.split(".")[-1]},
        )
        for node in pipeline.sinks
    ]
    return list(upstream.values()), sinks


def backfill_assets(pf: PipelineFile, sinks: list[dg.AssetSpec]) -> dg.AssetsDefinition:
    """Materializing the sinks runs the pipeline's bounded sources to their end (job mode)."""

    @dg.multi_asset(name=f"{pf.name}__run", specs=sinks, can_subset=False)
    def run(context: AssetExecutionContext, streamling: StreamlingResource, spark: StreamlingSparkResource) -> Any:
        settings = streamling.settings(job_mode="true")
        started = time.monotonic()
        context.log.info(f"Running {pf.path} in job mode")
        summary = run_pipeline(pf.path, settings, spark.spark_session)
        yield from materializations(pf, summary, time.monotonic() - started)

    return run


def materializations(pf: PipelineFile, summary: RunSummary, duration: float) -> Any:
    assert pf.pipeline is not None
    positions = {name: progress.position for name, progress in summary.sources.items()}
    epochs = {name: progress.epochs for name, progress in summary.sources.items()}
    for node in pf.pipeline.sinks:
        rows = summary.sink_rows.get(node.name, 0)
        yield dg.MaterializeResult(
            asset_key=node_key(pf.name, node.name),
            metadata={
                "rows_written": dg.MetadataValue.int(rows),
                "duration_sec": dg.MetadataValue.float(round(duration, 3)),
                "rows_per_sec": dg.MetadataValue.float(round(rows / duration, 1) if duration else 0.0),
                "epochs": dg.MetadataValue.json(epochs),
                "final_positions": dg.MetadataValue.json(positions),
            },
        )
