"""Every pipeline file of a directory as one set of definitions (what `workspace.yaml` loads).

Each topic or table is one asset however many pipelines touch it: a pipeline's sink is its producer, and a
pipeline reading it depends on that asset, so lineage crosses pipelines. A file that fails validation does not
break the code location: it becomes an asset whose check fails naming file, line and message (evaluated by the
`streamling_pipeline_files` sensor), and the other pipelines load as usual.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import dagster as dg

from streamling.config import Settings, load_settings
from streamling_dagster.assets import input_spec
from streamling_dagster.factory import VALIDITY_CHECK, PipelineDefinitions, build_pipeline
from streamling_dagster.observations import positions_sensor
from streamling_dagster.pipelines import PipelineFile, discover, located_errors, pipelines_directory
from streamling_dagster.resources import default_resources
from streamling_dagster.translator import StreamlingObject, StreamlingTranslator

FILES_SENSOR = "streamling_pipeline_files"


def files_sensor(directory: Path, loaded: list[PipelineFile], settings: Settings | None = None) -> dg.SensorDefinition:
    """Shows invalid pipeline files on the overview: the `pipeline_is_valid` check of each file that was invalid
    when the code location loaded fails with its errors; a file that became invalid since fails the tick,
    naming file, line and message (its jobs still run the last loaded definition until reloaded)."""
    known_invalid = {pf.path.resolve() for pf in loaded if pf.pipeline is None}

    @dg.sensor(
        name=FILES_SENSOR,
        minimum_interval_seconds=30,
        default_status=dg.DefaultSensorStatus.RUNNING,
        description=(
            f"Validates the pipeline files in {directory} (structure only, no Spark): an invalid file's "
            "`<file>/pipeline` asset gets a failing `pipeline_is_valid` check naming file, line and message; a file "
            "that became invalid after the code location loaded fails the tick with the same text."
        ),
    )
    def pipeline_files(context: dg.SensorEvaluationContext) -> Any:
        current = discover(directory, settings)
        invalid = [pf for pf in current if pf.pipeline is None]
        events = [
            dg.AssetCheckEvaluation(
                asset_key=dg.AssetKey([pf.name, "pipeline"]),
                check_name=VALIDITY_CHECK,
                passed=False,
                severity=dg.AssetCheckSeverity.ERROR,
                description="\n".join(located_errors(pf)),
                metadata={"errors": located_errors(pf)},
            )
            for pf in invalid
            if pf.path.resolve() in known_invalid
        ]
        newly = [error for pf in invalid if pf.path.resolve() not in known_invalid for error in located_errors(pf)]
        if newly:
            raise dg.DagsterInvariantViolationError(
                "pipeline files became invalid since the code location loaded:\n" + "\n".join(newly)
            )
        digest = hashlib.sha256(json.dumps([e.description for e in events]).encode()).hexdigest()
        if digest == context.cursor:
            return dg.SkipReason(f"{len(current)} pipeline files, {len(invalid)} invalid, unchanged")
        if not events:
            return dg.SensorResult(skip_reason=f"all {len(current)} pipeline files are valid", cursor=digest)
        return dg.SensorResult(asset_events=events, cursor=digest)

    return pipeline_files


def build_definitions(
    directory: Path | None = None,
    translator: StreamlingTranslator | None = None,
    settings: Settings | None = None,
) -> dg.Definitions:
    directory = directory or pipelines_directory()
    settings = settings or load_settings()
    translator = translator or StreamlingTranslator()
    pipelines = discover(directory, settings)
    taken: set[dg.AssetKey] = set()
    built: list[PipelineDefinitions] = []
    # producers first: a topic a pipeline writes is that pipeline's asset, whichever file sorts first
    for pf in sorted(pipelines, key=lambda p: p.pipeline is None):
        built.append(build_pipeline(pf, translator, settings, taken))
    readers: dict[dg.AssetKey, list[StreamlingObject]] = {}
    for part in built:
        for key, obj in part.specs.inputs.items() if part.specs else ():
            readers.setdefault(key, []).append(obj)
    inputs = [input_spec(key, objs, translator) for key, objs in readers.items() if key not in taken]
    valid = [part.pf for part in built if part.pf.pipeline is not None]
    return dg.Definitions(
        assets=[*inputs, *(a for part in built for a in part.assets)],
        asset_checks=[c for part in built for c in part.checks],
        jobs=[j for part in built for j in part.jobs],
        sensors=[
            positions_sensor(valid),
            files_sensor(directory, pipelines, settings),
            *(s for p in built for s in p.sensors),
        ],
        schedules=[s for part in built for s in part.schedules],
        resources=default_resources(settings),
    )
