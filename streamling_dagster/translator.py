"""How a pipeline's parts become Dagster assets: key, group, description, metadata, owners, tags and kinds.

Assets are the objects data lives in — `kafka/<topic>`, `postgres/<db>/<schema>/<table>`,
`clickhouse/<db>/<table>` — so a topic one pipeline writes and another reads is one node, and lineage crosses
pipelines. What only exists inside a pipeline (a generator, a transform, a print sink) is `<pipeline>/<node>`.
Subclass `StreamlingTranslator` (as dagster-dbt's `DagsterDbtTranslator`) to map these to a deployment's own
conventions; every definition the control plane builds asks it, so keys stay consistent across jobs, checks and
observations.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

import dagster as dg
import yaml

from streamling.config import Settings
from streamling.topology.pipeline import Node
from streamling_dagster.pipelines import PipelineFile, asset_name

Role = Literal["input", "transform", "output"]
SYSTEMS = {"kafka": "Kafka topic", "postgres": "Postgres table", "clickhouse": "ClickHouse table"}


def key_part(text: str) -> str:
    """Keep names readable (dots and dashes are fine in Dagster keys); only a slash would split a key."""
    return re.sub(r"[^A-Za-z0-9_.\-]", "_", text)


@dataclass(frozen=True, eq=False)
class StreamlingObject:
    """One asset of a pipeline: an external object it reads or writes, or a node that lives only in it."""

    pipeline: PipelineFile
    node: Node
    role: Role
    """`input`: read by a source; `transform`: a transform's output; `output`: what a sink writes."""
    system: str | None
    """`kafka`, `postgres` or `clickhouse` for an external object; None for a pipeline-owned node."""
    path: tuple[str, ...] = ()
    """Where in the system: (topic,), (database, schema, table), (database, table)."""

    @property
    def name(self) -> str:
        """The object as people write it: `orders`, `db.schema.table`; the node name when pipeline-owned."""
        return ".".join(self.path) if self.system else self.node.name


class StreamlingTranslator:
    """The default mapping. Override any `get_*` method; each gets one `StreamlingObject`."""

    def get_asset_key(self, obj: StreamlingObject) -> dg.AssetKey:
        if obj.system is None:
            return dg.AssetKey([obj.pipeline.name, asset_name(obj.node.name)])
        return dg.AssetKey([obj.system, *(key_part(p) for p in obj.path)])

    def get_group_name(self, obj: StreamlingObject) -> str | None:
        """A pipeline's own nodes and outputs are its group; inputs it only reads group by system."""
        return obj.system if obj.role == "input" and obj.system else obj.pipeline.name

    def get_description(self, obj: StreamlingObject) -> str:
        pf, node = obj.pipeline, obj.node
        if obj.role == "input":
            what = f"{SYSTEMS.get(obj.system or '', 'Input')} `{obj.name}`, read by source '{node.name}' of {pf.name}."
        elif obj.role == "output" and obj.system:
            what = f"{SYSTEMS[obj.system]} `{obj.name}`, written by {node.kind} '{node.name}' of {pf.name}."
        else:
            what = f"{node.kind.capitalize()} '{node.name}' of pipeline {pf.name} ({node.spec.type})."
        return f"{what}\n\n```yaml\n{pf.node_yaml(node)}```"

    def get_metadata(self, obj: StreamlingObject) -> dict[str, Any]:
        metadata = node_targets(obj.node)
        metadata["pipeline_file"] = str(obj.pipeline.path)
        if obj.node.kind == "sink":
            metadata["pipeline_yaml"] = dg.MetadataValue.md(f"```yaml\n{obj.pipeline.text}\n```")
        return metadata

    def get_owners(self, obj: StreamlingObject) -> list[str]:
        return []

    def get_tags(self, obj: StreamlingObject) -> dict[str, str]:
        return {}

    def get_kinds(self, obj: StreamlingObject) -> set[str]:
        if obj.system:
            return {obj.system}
        return {"spark"} if obj.role == "transform" else {obj.node.spec.type.split(".")[-1]}

    def get_asset_spec(self, obj: StreamlingObject, deps: list[dg.AssetKey] | None = None) -> dg.AssetSpec:
        return dg.AssetSpec(
            self.get_asset_key(obj),
            deps=deps or [],
            description=self.get_description(obj),
            metadata=self.get_metadata(obj),
            group_name=self.get_group_name(obj),
            owners=self.get_owners(obj),
            tags=self.get_tags(obj),
            kinds=self.get_kinds(obj),
        )


def node_targets(node: Node) -> dict[str, Any]:
    """Connector targets for metadata: where data comes from or goes to, never credentials (values as the spec
    serializes them for display: a URL without user, password or query values)."""
    spec: Any = node.spec
    shown = spec.model_dump()
    out: dict[str, Any] = {"type": node.spec.type}
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


def _clickhouse(table_name: str, default_database: str) -> tuple[str, ...]:
    database, _, table = table_name.rpartition(".")
    return (database or default_database, table)


def inputs_of(pf: PipelineFile, node: Node, settings: Settings) -> list[StreamlingObject]:
    """The external objects a source reads (a hybrid reads tables, then a topic); a generator is its own."""
    spec: Any = node.spec
    kind = spec.type

    def obj(system: str | None, *path: str) -> StreamlingObject:
        return StreamlingObject(pf, node, "input" if system else "transform", system, tuple(path))

    if kind == "kafka":
        return [obj("kafka", spec.topic)]
    if kind == "clickhouse":
        return [obj("clickhouse", *_clickhouse(spec.table_name, settings.clickhouse_source.database))]
    if kind == "hybrid":
        found = [
            obj("clickhouse", *_clickhouse(b.table_name, settings.clickhouse_source.database))
            for b in spec.bounded_sources
        ]
        if spec.unbounded_source is not None:
            found.append(obj("kafka", spec.unbounded_source.topic))
        return list({(o.system, o.path): o for o in reversed(found)}.values())[::-1]  # a table read twice: once
    return [StreamlingObject(pf, node, "output", None)]


def object_of(pf: PipelineFile, node: Node, settings: Settings) -> StreamlingObject:
    """What a sink or transform writes: its table or topic, or the node itself."""
    spec: Any = node.spec
    kind = spec.type
    role: Role = "output" if node.kind == "sink" else "transform"
    if kind == "postgres":
        database = settings.postgres_connection(node.name).database
        return StreamlingObject(pf, node, role, "postgres", (database, spec.schema_, spec.table))
    if kind == "postgres_aggregate":
        database = settings.postgres_connection(node.name).database
        return StreamlingObject(pf, node, role, "postgres", (database, spec.schema_, spec.agg_table))
    if kind == "clickhouse" and node.kind == "sink":
        return StreamlingObject(
            pf, node, role, "clickhouse", _clickhouse(spec.table, settings.clickhouse_sink.database)
        )
    if kind == "kafka" and node.kind == "sink":
        return StreamlingObject(pf, node, role, "kafka", (spec.topic,))
    if kind == "dynamic_table" and spec.backend_type == "Postgres":
        database = settings.dynamic_table_connection(node.name).database
        return StreamlingObject(pf, node, "output", "postgres", (database, spec.schema_, spec.backend_entity_name))
    return StreamlingObject(pf, node, role, None)


def as_yaml(value: Any) -> str:
    return yaml.safe_dump(value, sort_keys=False, allow_unicode=True, default_flow_style=False)
