"""A pipeline as assets: its sinks are materializable assets (`<pipeline>/<sink>`); its sources (Kafka topics,
ClickHouse tables, generators) and transforms are specs upstream of them, so the asset graph shows the topology."""

from typing import Any

import dagster as dg

from streamling.topology.pipeline import Node
from streamling_dagster.pipelines import PipelineFile, asset_name, node_key


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
