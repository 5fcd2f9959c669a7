"""Where each pipeline stands — committed positions, backlog, last epoch — without running it.

One computation (`streamling.source_status`: the state backend plus each source's `Source.backlog`, e.g. Kafka
high watermarks), three uses: the `streamling_committed_positions` sensor (observations and stream-health
evaluations on every sink, only when something changed), the stream op (observations at a throttled interval
while it runs), and the `<pipeline>__stream_health` asset checks (run from the UI on demand).
"""

import hashlib
import json
import time
from typing import Any

import dagster as dg

from streamling import SourceStatus, source_status
from streamling.config import Settings
from streamling.errors import first_line
from streamling_dagster import nodes
from streamling_dagster.pipelines import PipelineFile
from streamling_dagster.resources import StreamlingResource

OBSERVE_INTERVAL_SEC = 60
LAG_CHECK = "stream_lag"
FRESHNESS_CHECK = "stream_freshness"


def reports_lag(pf: PipelineFile) -> bool:
    """Stream-health checks need a source whose stream knows its backlog behind what it reads (`Source.backlog`):
    a Kafka source, a hybrid's stream, a plugin's that implements it."""
    assert pf.pipeline is not None
    return any(nodes.reports_lag(s) for s in pf.pipeline.sources)


def feeding(pf: PipelineFile, sink: str) -> list[str]:
    assert pf.pipeline is not None
    return [s.name for s in pf.pipeline.sources if sink in pf.pipeline.downstream(s.name)]


def named_position(
    pf: PipelineFile, source: str, value: Any, phase: int | None = None, settings: Settings | None = None
) -> Any:
    """A position or backlog by partition (partition → offset) under the object it is in, the last one the source
    reads at `phase` (unknown: its stream's), e.g. a Kafka topic: ``{"<topic>": {"0": 12}}``; other positions as
    they are."""
    assert pf.pipeline is not None
    if not isinstance(value, dict) or not all(str(k).isdigit() for k in value):
        return value
    where = nodes.position_object(pf.pipeline.nodes[source], phase, settings)
    if where is None:
        return value
    return {".".join(where.path): {str(k): v for k, v in value.items()}}


def position_text(value: Any) -> str:
    """A position for a log line, not a Python dict: ``orders[0]=12 orders[1]=3`` (partitions under their
    object), ``cursor=5``, ``the start`` before the first commit."""
    if value is None:
        return "the start"
    if not isinstance(value, dict):
        return str(value)
    parts = []
    for key, inner in value.items():
        if isinstance(inner, dict):
            parts += [f"{key}[{k}]={v}" for k, v in inner.items()]
        else:
            parts.append(f"{key}={inner}")
    return " ".join(parts) or "nothing yet"


def named_positions(
    pf: PipelineFile,
    positions: dict[str, Any],
    phases: dict[str, int | None] | None = None,
    settings: Settings | None = None,
) -> Any:
    """Per source, `named_position` (for metadata: committed, final or backlog positions)."""
    return {
        name: named_position(pf, name, value, (phases or {}).get(name), settings) for name, value in positions.items()
    }


def status_metadata(
    pf: PipelineFile, statuses: dict[str, SourceStatus], sources: list[str], settings: Settings | None = None
) -> dict[str, Any]:
    mine = {name: statuses[name] for name in sources if name in statuses}
    known = [s.backlog_total for s in mine.values() if s.backlog_total is not None]
    phases = {n: s.phase for n, s in mine.items()}
    metadata: dict[str, Any] = {
        "committed_positions": dg.MetadataValue.json(
            named_positions(pf, {n: s.position for n, s in mine.items()}, phases, settings)
        ),
        "backlog": dg.MetadataValue.json(
            named_positions(pf, {n: s.backlog for n, s in mine.items()}, phases, settings)
        ),
        "last_finalized_epoch": dg.MetadataValue.json({n: s.last_epoch for n, s in mine.items()}),
    }
    if known:
        metadata["backlog_total"] = dg.MetadataValue.int(sum(known))
    assert pf.pipeline is not None
    phased = {n: nodes.phase_label(pf.pipeline.nodes[n], p, settings) for n, p in phases.items() if p is not None}
    if phased:  # where a hybrid source is: its bounded phases, or its stream
        metadata["source_phase"] = dg.MetadataValue.json(phased)
    commits = [s.updated_at_ms for s in mine.values() if s.updated_at_ms]
    if commits:
        metadata["last_commit_at"] = dg.MetadataValue.timestamp(max(commits) / 1000)
    return metadata


def sink_observations(
    pf: PipelineFile,
    statuses: dict[str, SourceStatus],
    extra: dict[str, dict[str, Any]] | None = None,
    settings: Settings | None = None,
) -> list[dg.AssetObservation]:
    """One observation per sink fed by a source that committed something, or that a running stream wrote to
    (`extra`: a hybrid source that just moved to its Kafka phase has no position there yet, but the run's
    figures are news)."""
    assert pf.pipeline is not None
    events = []
    for sink in pf.pipeline.sinks:
        sources = feeding(pf, sink.name)
        written = sink.name in (extra or {})
        if not written and all(statuses.get(name) is None or statuses[name].position is None for name in sources):
            continue
        metadata = {**status_metadata(pf, statuses, sources, settings), **(extra or {}).get(sink.name, {})}
        events.append(dg.AssetObservation(asset_key=pf.asset_key(sink.name), metadata=metadata))
    return events


def stream_health(
    pf: PipelineFile, statuses: dict[str, SourceStatus], now: float | None = None
) -> list[dg.AssetCheckEvaluation]:
    """Per sink: lag (records waiting ≤ `stream_max_lag`) and freshness (when records wait, the last commit is at
    most `stream_max_staleness_sec` old). Sinks whose sources cannot tell their backlog get no evaluation."""
    assert pf.pipeline is not None
    now = time.time() if now is None else now
    limits = pf.orchestration
    out = []
    for sink in pf.pipeline.sinks:
        mine = [statuses[name] for name in feeding(pf, sink.name) if name in statuses]
        backlogs = [s.backlog_total for s in mine]
        if not mine or any(b is None for b in backlogs):
            continue
        waiting = sum(b or 0 for b in backlogs)
        key = pf.asset_key(sink.name)
        out.append(
            dg.AssetCheckEvaluation(
                asset_key=key,
                check_name=LAG_CHECK,
                passed=waiting <= limits.stream_max_lag,
                severity=dg.AssetCheckSeverity.WARN,
                description=f"{waiting} records wait after the committed positions (limit {limits.stream_max_lag})",
                metadata={"backlog_total": waiting, "limit": limits.stream_max_lag},
            )
        )
        commits = [s.updated_at_ms for s in mine if s.updated_at_ms]
        age = now - max(commits) / 1000 if commits else None
        fresh = waiting == 0 or (age is not None and age <= limits.stream_max_staleness_sec)
        described = "never committed" if age is None else f"last commit {age:.0f} s ago"
        out.append(
            dg.AssetCheckEvaluation(
                asset_key=key,
                check_name=FRESHNESS_CHECK,
                passed=fresh,
                severity=dg.AssetCheckSeverity.WARN,
                description=(
                    f"{described}; {waiting} records waiting (limit {limits.stream_max_staleness_sec:.0f} s "
                    "while records wait)"
                ),
                metadata={  # no commit yet: no age (the description says so)
                    **({"seconds_since_commit": round(age, 1)} if age is not None else {}),
                    "backlog_total": waiting,
                    "limit_sec": limits.stream_max_staleness_sec,
                },
            )
        )
    return out


def health_check_specs(pf: PipelineFile) -> list[dg.AssetCheckSpec]:
    assert pf.pipeline is not None
    return [
        dg.AssetCheckSpec(name, asset=pf.asset_key(sink.name), description=text)
        for sink in pf.pipeline.sinks
        for name, text in (
            (LAG_CHECK, f"Records waiting after the committed positions ≤ {pf.orchestration.stream_max_lag}"),
            (
                FRESHNESS_CHECK,
                f"While records wait, the last commit is ≤ {pf.orchestration.stream_max_staleness_sec:.0f} s old",
            ),
        )
    ]


def health_checks(pf: PipelineFile) -> dg.AssetChecksDefinition:
    """The stream-health checks, runnable from the UI; the positions sensor also evaluates them each tick."""

    @dg.multi_asset_check(specs=health_check_specs(pf), name=f"{pf.name}__stream_health", can_subset=True)
    def stream_health_checks(context: dg.AssetCheckExecutionContext, streamling: StreamlingResource) -> Any:
        statuses = source_status(pf.path, streamling.pipeline_settings(pf))
        evaluated = {(e.asset_key, e.check_name): e for e in stream_health(pf, statuses)}
        for key in context.selected_asset_check_keys:
            found = evaluated.get((key.asset_key, key.name))
            if found is None:
                yield dg.AssetCheckResult(
                    asset_key=key.asset_key,
                    check_name=key.name,
                    passed=True,
                    description="the sources cannot tell their backlog",
                )
                continue
            yield dg.AssetCheckResult(
                asset_key=found.asset_key,
                check_name=found.check_name,
                passed=found.passed,
                severity=found.severity,
                description=found.description,
                metadata=found.metadata,
            )

    return stream_health_checks


def positions_sensor(
    pipelines: list[PipelineFile], name: str = "streamling_committed_positions"
) -> dg.SensorDefinition:
    @dg.sensor(
        name=name,
        minimum_interval_seconds=OBSERVE_INTERVAL_SEC,
        default_status=dg.DefaultSensorStatus.RUNNING,
        description=(
            "Reports each sink's committed source positions, backlog and last epoch from the state backend as "
            "observations, and evaluates the stream-health checks; only when something changed."
        ),
    )
    def committed_positions_sensor(context: dg.SensorEvaluationContext, streamling: StreamlingResource) -> Any:
        events: list[dg.AssetObservation | dg.AssetCheckEvaluation] = []
        for pf in pipelines:
            if pf.pipeline is None:
                continue
            settings = streamling.pipeline_settings(pf)
            try:
                statuses = source_status(pf.path, settings)
            except Exception as exc:  # one unreachable broker must not hide the other pipelines
                context.log.warning(f"{pf.name}: cannot read positions: {first_line(exc)}")
                continue
            events += sink_observations(pf, statuses, settings=settings)
            if reports_lag(pf):
                events += stream_health(pf, statuses)
        digest = hashlib.sha256(json.dumps([unchanged_key(e) for e in events], default=str).encode()).hexdigest()
        if digest == context.cursor:
            return dg.SkipReason("no committed position, backlog or check result changed")
        return dg.SensorResult(asset_events=events, cursor=digest)

    return committed_positions_sensor


def unchanged_key(event: dg.AssetObservation | dg.AssetCheckEvaluation, *also: str) -> Any:
    """What an event says that matters for "did anything change": a check's result; an observation's committed
    positions and backlog (and the `also` metadata entries, e.g. a running stream's rows written) — not times or
    rates, which differ on every reading."""
    if isinstance(event, dg.AssetCheckEvaluation):
        return [event.asset_key.to_user_string(), event.check_name, event.passed]
    fields = ("committed_positions", "backlog", *also)
    return [event.asset_key.to_user_string(), {k: event.metadata[k].value for k in fields if k in event.metadata}]
