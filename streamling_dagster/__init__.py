"""The Dagster control plane for Streamling pipelines.

`defs` (what `workspace.yaml` and `dagster job execute -m streamling_dagster` load) is built when Dagster asks
for it, not on import. Build your own with `build_definitions(directory)` (a folder of pipeline files),
`pipeline_definitions(path)` (one file), `@streamling_assets` (a backfill with your own code around it, as
`@dbt_assets`), or drop `StreamlingPipelineComponent` into a `dg` project.
"""

import dagster as dg

from streamling_dagster import quiet  # noqa: F401 - the warnings filters, before any definition is built
from streamling_dagster.component import StreamlingPipelineComponent
from streamling_dagster.definitions import build_definitions
from streamling_dagster.factory import pipeline_definitions, streamling_assets
from streamling_dagster.resources import StreamlingResource, StreamlingSparkResource
from streamling_dagster.translator import StreamlingObject, StreamlingTranslator


@dg.definitions
def defs() -> dg.Definitions:
    return build_definitions()


__all__ = [
    "StreamlingObject",
    "StreamlingPipelineComponent",
    "StreamlingResource",
    "StreamlingSparkResource",
    "StreamlingTranslator",
    "build_definitions",
    "defs",
    "pipeline_definitions",
    "streamling_assets",
]
