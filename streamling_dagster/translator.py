"""How a pipeline's parts become Dagster assets: key, group, description, metadata, owners, tags and kinds.

Assets are the objects data lives in, as each node's operator names them (`Operator.reads`/`writes`, an
`ExternalObject` keyed `<system>/<path…>`: `kafka/<topic>`, `postgres/<connection>/<schema>/<table>`,
`clickhouse/<db>/<table>`, or a plugin's own) — so a topic one pipeline writes and another reads is one node, and
lineage crosses pipelines.

Keys come from the pipeline and the translator only, never from the environment of the process that loads the
definitions: where a database is not named in the pipeline but taken from connection settings (a Postgres table;
a bare ClickHouse table name), a logical connection name stands in for it (`get_connection_name`, ``default``),
so a code server whose environment differs from production gets production's keys.

What only exists inside a pipeline (a generator, a transform, a print sink) is
`<pipeline>/<node>`. The translator knows no operator type by name: a plugin's objects, descriptions and metadata
come out as the built-ins' do.

Subclass `StreamlingTranslator` (as dagster-dbt's `DagsterDbtTranslator`) to map these to a deployment's own
conventions; every definition the control plane builds asks it, so keys stay consistent across jobs, checks and
observations.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any, Literal

import dagster as dg
import yaml

from streamling import Node
from streamling.config import Settings
from streamling.plugin import ExternalObject
from streamling_dagster.nodes import operator_of
from streamling_dagster.pipelines import PipelineFile, asset_name

Role = Literal["input", "transform", "output"]


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
    """The external object's system (`kafka`, `postgres`, `clickhouse`, a plugin's); None for a pipeline-owned
    node."""
    path: tuple[str, ...] = ()
    """Where in the system: (topic,), (database, schema, table), (database, table)."""
    external: ExternalObject | None = None
    """What the node's operator said it reads or writes (`Operator.reads`/`writes`), with its description and
    metadata; None for a pipeline-owned node."""

    @property
    def name(self) -> str:
        """The object as people write it: `orders`, `db.schema.table`; the node name when pipeline-owned."""
        return ".".join(self.path) if self.system else self.node.name

    @classmethod
    def of(cls, pf: PipelineFile, node: Node, role: Role, external: ExternalObject) -> StreamlingObject:
        return cls(pf, node, role, external.system, tuple(external.path), external)


def object_description(obj: StreamlingObject) -> str:
    """What the object is, as its operator describes it (else its system and name)."""
    described = obj.external.description if obj.external is not None else None
    return described or f"{obj.system} object `{obj.name}`."


class StreamlingTranslator:
    """The default mapping. Override any `get_*` method; each gets one `StreamlingObject`."""

    def get_asset_key(self, obj: StreamlingObject) -> dg.AssetKey:
        if obj.system is None:
            return dg.AssetKey([obj.pipeline.name, asset_name(obj.node.name)])
        path = obj.path
        if obj.external is not None and obj.external.connection is not None:
            path = (self.get_connection_name(obj), *path[1:])
        return dg.AssetKey([obj.system, *(key_part(p) for p in path)])

    def get_connection_name(self, obj: StreamlingObject) -> str:
        """The logical name that stands in, in the asset key, for a database the environment's settings chose
        (`ExternalObject.connection` says which settings: ``postgres_sink``, ``postgres_sink_connections.<node>``,
        ``dynamic_table_backend.postgres``, ``clickhouse_sink``, ``clickhouse_source``). Default ``default``: one
        database per system. Override it to tell several apart, e.g.
        ``{"postgres_sink": "warehouse"}.get(obj.external.connection, "default")``; the real database is in the
        asset's metadata."""
        return "default"

    def get_group_name(self, obj: StreamlingObject) -> str | None:
        """A pipeline's own nodes and outputs are its group; inputs it only reads group by system."""
        return obj.system if obj.role == "input" and obj.system else obj.pipeline.name

    def get_description(self, obj: StreamlingObject) -> str:
        pf, node = obj.pipeline, obj.node
        if obj.role == "input":
            what = f"{object_description(obj)}\n\nRead by source '{node.name}' of {pf.name}."
        elif obj.system:
            what = f"{object_description(obj)}\n\nWritten by {node.kind} '{node.name}' of {pf.name}."
        else:
            what = f"{node.kind.capitalize()} '{node.name}' of pipeline {pf.name} ({node.spec.type})."
        return f"{what}\n\n```yaml\n{pf.node_yaml(node)}```"

    def get_metadata(self, obj: StreamlingObject) -> dict[str, Any]:
        """The node's targets, then what its operator says of the object (`ExternalObject.metadata`)."""
        metadata = node_targets(obj.node)
        if obj.external is not None:
            metadata.update(obj.external.metadata)
        metadata["pipeline_file"] = str(obj.pipeline.path)
        if obj.node.kind == "sink":
            metadata["pipeline_yaml"] = dg.MetadataValue.md(f"```yaml\n{obj.pipeline.text}\n```")
        return metadata

    def get_owners(self, obj: StreamlingObject) -> list[str]:
        return []

    def get_tags(self, obj: StreamlingObject) -> dict[str, str]:
        return {}

    def get_kinds(self, obj: StreamlingObject) -> set[str]:
        """The object's system; a transform's output is Spark's; another pipeline-owned node is its type's."""
        if obj.system:
            return {obj.system}
        return {"spark"} if obj.role == "transform" else {obj.node.optype.type_name}

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
    if isinstance(shown.get("sql"), str):
        out["sql"] = dg.MetadataValue.md(f"```sql\n{spec.sql}\n```")
    if isinstance(shown.get("script"), str):
        language = shown.get("language") or ""
        if language:
            out["language"] = language
        out["script"] = dg.MetadataValue.md(f"```{language}\n{spec.script}\n```")
    return out


def inputs_of(pf: PipelineFile, node: Node, settings: Settings) -> list[StreamlingObject]:
    """The external objects a source's operator reads (`Operator.reads`, in reading order); a source that reads
    none (a generator) is its own asset."""
    read = operator_of(node, settings).reads()
    if not read:
        return [StreamlingObject(pf, node, "output", None)]
    return [StreamlingObject.of(pf, node, "input", o) for o in read]


def object_of(pf: PipelineFile, node: Node, settings: Settings) -> StreamlingObject:
    """What a sink or transform writes (`Operator.writes`: its first object is the node's asset), or the node
    itself."""
    written = operator_of(node, settings).writes()
    if not written:
        return StreamlingObject(pf, node, "output" if node.kind == "sink" else "transform", None)
    first = written[0]
    if len(written) > 1:  # one asset per node: the others are named on it
        also = ", ".join("/".join(o.key) for o in written[1:])
        first = replace(first, metadata={**first.metadata, "streamling/also_writes": also})
    return StreamlingObject.of(pf, node, "output", first)


def as_yaml(value: Any) -> str:
    return yaml.safe_dump(value, sort_keys=False, allow_unicode=True, default_flow_style=False)
