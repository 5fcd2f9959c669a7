"""Committed positions as asset observations, without running a pipeline.

A sensor reads the state backend — the engine's only source of truth for where each source resumes — and
reports, on every sink asset, the positions and last finalized epoch of the sources feeding it. It reports
only what changed since its last tick (its cursor), so the asset's event log shows progress, not noise.
"""

import hashlib
import json
from typing import Any

import dagster as dg

from streamling.state import open_state_backend
from streamling_dagster.assets import node_key
from streamling_dagster.pipelines import PipelineFile
from streamling_dagster.resources import StreamlingResource

OBSERVE_INTERVAL_SEC = 60


def committed_positions(entries: dict[str, Any], source: str) -> dict[str, Any]:
    """The state-backend entries of one source: Kafka partitions, ClickHouse cursors, generator offsets,
    hybrid phase and epoch."""
    prefixes = (f"{source}:", f"clickhouse_source:{source}:", f"clickhouse_source:{source}#")
    return {key: value for key, value in entries.items() if key.startswith(prefixes)}


def observations(pipelines: list[PipelineFile], entries: dict[str, Any]) -> list[dg.AssetObservation]:
    events = []
    for pf in pipelines:
        if pf.pipeline is None:
            continue
        for sink in pf.pipeline.sinks:
            feeding = [s.name for s in pf.pipeline.sources if sink.name in pf.pipeline.downstream(s.name)]
            positions = {source: committed_positions(entries, source) for source in feeding}
            if not any(positions.values()):
                continue
            epochs = {
                source: (found.get(f"{source}:__epoch__") or {}).get("epoch") for source, found in positions.items()
            }
            events.append(
                dg.AssetObservation(
                    asset_key=node_key(pf.name, sink.name),
                    metadata={
                        "committed_positions": dg.MetadataValue.json(positions),
                        "last_finalized_epoch": dg.MetadataValue.json(epochs),
                    },
                )
            )
    return events


def positions_sensor(pipelines: list[PipelineFile]) -> dg.SensorDefinition:
    @dg.sensor(
        name="streamling_committed_positions",
        minimum_interval_seconds=OBSERVE_INTERVAL_SEC,
        default_status=dg.DefaultSensorStatus.RUNNING,
        description="Reports each sink's committed source positions from the state backend as observations.",
    )
    def committed_positions_sensor(context: dg.SensorEvaluationContext, streamling: StreamlingResource) -> Any:
        settings = streamling.settings()
        with open_state_backend(settings.state_backend, settings.application_id) as state:
            entries = state.items()
        events = observations(pipelines, entries)
        digest = hashlib.sha256(
            json.dumps(
                [(e.asset_key.to_user_string(), e.metadata["committed_positions"].value) for e in events],
                sort_keys=True,
                default=str,
            ).encode()
        ).hexdigest()
        if digest == context.cursor:
            return dg.SkipReason("no committed position changed")
        return dg.SensorResult(asset_events=events, cursor=digest)

    return committed_positions_sensor
