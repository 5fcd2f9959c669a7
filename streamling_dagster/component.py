"""`StreamlingPipelineComponent`: one pipeline file in a `dg` project, without Python.

    # defs/orders/defs.yaml
    type: streamling_dagster.StreamlingPipelineComponent
    attributes:
      pipeline: orders_hybrid.yaml        # relative to this folder
      group_name: shop
      keep_streaming: true

It builds what `pipeline_definitions` builds for the file (assets keyed by the topics and tables, only the jobs
the pipeline can use, sensors, checks), with a translator made from the attributes, and the file's
`orchestration:` block overridden by the scheduling attributes that are set.
"""

import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import dagster as dg
from pydantic import ValidationError

from streamling.config import Settings, load_settings
from streamling_dagster.factory import pipeline_definitions
from streamling_dagster.pipelines import Orchestration, PipelineFile, read_pipeline_file
from streamling_dagster.translator import StreamlingObject, StreamlingTranslator

SCHEDULING = ("backfill_schedule", "timezone", "backfill_on_change", "keep_streaming", "application_id")


class ConfiguredTranslator(StreamlingTranslator):
    """The default mapping with a key prefix, one group, and owners and tags added to every asset."""

    def __init__(
        self,
        asset_key_prefix: list[str] | None = None,
        group_name: str | None = None,
        owners: list[str] | None = None,
        tags: dict[str, str] | None = None,
    ) -> None:
        self.asset_key_prefix = list(asset_key_prefix or [])
        self.group_name = group_name
        self.owners = list(owners or [])
        self.tags = dict(tags or {})

    def get_asset_key(self, obj: StreamlingObject) -> dg.AssetKey:
        return super().get_asset_key(obj).with_prefix(self.asset_key_prefix)

    def get_group_name(self, obj: StreamlingObject) -> str | None:
        return self.group_name or super().get_group_name(obj)

    def get_owners(self, obj: StreamlingObject) -> list[str]:
        return [*super().get_owners(obj), *self.owners]

    def get_tags(self, obj: StreamlingObject) -> dict[str, str]:
        return {**super().get_tags(obj), **self.tags}


@functools.cache
def _shared_resources() -> tuple[Settings, dict[str, Any]]:
    """One set of resources for every component of a code location: Dagster refuses to merge definitions that
    bind different objects to the same resource key."""
    from streamling_dagster.resources import default_resources

    settings = load_settings()
    return settings, default_resources(settings)


@dataclass
class StreamlingPipelineComponent(dg.Component, dg.Resolvable):
    """A Streamling pipeline file as Dagster assets, jobs, sensors and checks.

    `pipeline` is the file, relative to the folder of this defs.yaml. `asset_key_prefix`, `group_name`, `owners`
    and `tags` shape every asset. `backfill_schedule`, `timezone`, `backfill_on_change`, `keep_streaming` and
    `application_id` override the same keys of the file's `orchestration:` block. `define_inputs: false` leaves
    the topics and tables the pipeline reads to another definition (another component whose pipeline writes
    them), since one asset key may be defined once per code location.
    """

    pipeline: str
    asset_key_prefix: list[str] = field(default_factory=list)
    group_name: str | None = None
    owners: list[str] = field(default_factory=list)
    tags: dict[str, str] = field(default_factory=dict)
    define_inputs: bool = True
    backfill_schedule: str | None = None
    timezone: str | None = None
    backfill_on_change: bool | None = None
    keep_streaming: bool | None = None
    application_id: str | None = None

    def translator(self) -> StreamlingTranslator:
        return ConfiguredTranslator(self.asset_key_prefix, self.group_name, self.owners, self.tags)

    def pipeline_file(self, base: Path, settings: Settings | None = None) -> PipelineFile:
        path = (base / self.pipeline).resolve()
        if not path.is_file():
            raise dg.DagsterInvalidDefinitionError(
                f"StreamlingPipelineComponent in {base}: attribute 'pipeline' = {self.pipeline!r}: "
                f"no such file ({path})"
            )
        pf = read_pipeline_file(path, settings)
        overrides = {k: getattr(self, k) for k in SCHEDULING if getattr(self, k) is not None}
        if pf.pipeline is None or not overrides:
            return pf  # an invalid file is shown by its failing check, as in the standalone setup
        try:
            pf.orchestration = Orchestration.model_validate({**pf.orchestration.model_dump(), **overrides})
        except ValidationError as exc:
            problem = exc.errors()[0]
            name = problem["loc"][0]
            raise dg.DagsterInvalidDefinitionError(
                f"StreamlingPipelineComponent in {base}: attribute '{name}' = {overrides.get(name)!r}: "
                f"{problem['msg'].removeprefix('Value error, ')}"
            ) from None
        for wanted in ("backfill_schedule", "backfill_on_change"):
            if overrides.get(wanted) and pf.backfill_errors:
                raise dg.DagsterInvalidDefinitionError(
                    f"StreamlingPipelineComponent in {base}: attribute '{wanted}' = {overrides[wanted]!r}: "
                    f"{path.name} cannot backfill: {pf.backfill_errors[0]}"
                )
        return pf

    def build_defs(self, context: dg.ComponentLoadContext) -> dg.Definitions:
        base = context.path if context.path.is_dir() else context.path.parent
        settings, resources = _shared_resources()
        return pipeline_definitions(
            self.pipeline_file(base, settings),
            self.translator(),
            settings,
            define_inputs=self.define_inputs,
            resources=resources,
        )
