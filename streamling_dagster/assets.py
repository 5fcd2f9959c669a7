"""A pipeline as asset specs: what its sources read, its transforms, and what its sinks write, keyed by the
translator. The specs of the sinks are what the pipeline produces (materialized by a backfill, observed by a
stream); the others are upstream, so the asset graph shows the topology and crosses pipelines."""

from __future__ import annotations

from dataclasses import dataclass, field

import dagster as dg

from streamling.config import Settings
from streamling_dagster.pipelines import PipelineFile, node_key
from streamling_dagster.translator import (
    StreamlingObject,
    StreamlingTranslator,
    inputs_of,
    object_description,
    object_of,
)


@dataclass
class PipelineSpecs:
    inputs: dict[dg.AssetKey, StreamlingObject] = field(default_factory=dict)
    """External objects the sources read (topics, tables), each once."""
    upstream: list[dg.AssetSpec] = field(default_factory=list)
    """Pipeline-owned sources and transforms, and dynamic tables."""
    sinks: list[dg.AssetSpec] = field(default_factory=list)


def pipeline_specs(
    pf: PipelineFile,
    translator: StreamlingTranslator,
    settings: Settings,
    taken: set[dg.AssetKey] | None = None,
    jobs: list[str] | None = None,
) -> PipelineSpecs:
    """Fills `pf.asset_keys`. A sink whose object another pipeline already writes (a key in `taken`) keeps the
    pipeline-scoped key `<pipeline>/<sink>`: one asset has one producer in Dagster."""
    assert pf.pipeline is not None
    pipeline = pf.pipeline
    taken = taken if taken is not None else set()
    out = PipelineSpecs()
    keys_of: dict[str, list[dg.AssetKey]] = {}
    for node in pipeline.sources:
        keys_of[node.name] = []
        for obj in inputs_of(pf, node, settings):
            key = translator.get_asset_key(obj)
            keys_of[node.name].append(key)
            if obj.system is None:
                out.upstream.append(translator.get_asset_spec(obj))
            else:
                out.inputs.setdefault(key, obj)
        pf.asset_keys[node.name] = keys_of[node.name][0]

    def deps(name: str) -> list[dg.AssetKey]:
        parents = [*pipeline.inputs.get(name, []), *pipeline.after.get(name, [])]
        return list(dict.fromkeys(k for parent in parents for k in keys_of.get(parent, [])))

    for name in pipeline.topological_order():
        node = pipeline.nodes[name]
        if node.kind == "source":
            continue
        obj = object_of(pf, node, settings)
        key = translator.get_asset_key(obj)
        if key in taken:
            key = node_key(pf.name, name)
        taken.add(key)
        keys_of[name] = [key]
        pf.asset_keys[name] = key
        spec = translator.get_asset_spec(obj, deps(name)).replace_attributes(key=key)
        if node.kind == "sink":
            if jobs:
                spec = spec.merge_attributes(metadata={"streamling/jobs": jobs_metadata(jobs)})
            out.sinks.append(spec)
        else:
            out.upstream.append(spec)
    return out


ROLES = {"__backfill": "the backfill", "__stream": "the stream", "__backfill_then_stream": "backfill, then stream"}


def jobs_metadata(jobs: list[str]) -> dg.MetadataValue:
    """The jobs that write a sink, linked (Dagster's `/guess/<job>` route finds a job in any code location): the
    asset page's own job list names only asset jobs, not the stream that feeds it."""
    lines = []
    for job in jobs:
        role = next(text for suffix, text in sorted(ROLES.items(), key=lambda r: -len(r[0])) if job.endswith(suffix))
        lines.append(f"- [{job}](/guess/{job}): {role}")
    return dg.MetadataValue.md("\n".join(lines))


def input_spec(key: dg.AssetKey, readers: list[StreamlingObject], translator: StreamlingTranslator) -> dg.AssetSpec:
    """A topic or table read by one or more pipelines and written by none of them: one node for all."""
    first = readers[0]
    spec = translator.get_asset_spec(first)
    if len(readers) > 1:
        names = ", ".join(f"{r.pipeline.name} (source '{r.node.name}')" for r in readers)
        what = spec.description.split("\n\n")[0] if spec.description else object_description(first)
        spec = spec.replace_attributes(description=f"{what}\n\nRead by {names}.")
    return spec.replace_attributes(key=key).merge_attributes(
        metadata={"streamling/read_by": ", ".join(sorted({r.pipeline.name for r in readers}))}
    )
