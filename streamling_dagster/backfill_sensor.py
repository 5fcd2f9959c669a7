"""A sensor per backfillable pipeline: run `<pipeline>__backfill` when one of its bounded inputs advanced.

What counts as advancing is what a backfill would act on: the pipeline's definition changed, or a ClickHouse table
it reads — a `clickhouse` source, or a bounded phase of a `hybrid` one — has a larger first sort-key value than
recorded. Rows with smaller keys do not count: a backfill resumes after its committed cursor and would not read
them.

The definition is compared as parsed and normalised, node by node (`definition_digests`: each node's validated
spec, defaults filled in), like dagster-dbt's code versions: a comment, a reformatting, a default written out or
an ``orchestration:`` setting changes nothing a run does and launches nothing. The file is read at each tick, so
an edit is seen before the code location reloads; a file that no longer parses skips the tick (cursor kept).

A changed definition's run reprocesses: it carries ``streamling/reprocess`` and reads the bounded sources from
their start (`backfill.plan_run`); its trigger tag names the nodes added, removed or changed. A grown table's
run resumes. For a partitioned pipeline a changed definition runs every range already backfilled again; new
rows request nothing (ranges are launched from the partition view).

The cursor is the fingerprint (JSON): each node's digest and, per table, the largest first sort-key value seen
(a high-water mark, kept when the table shrinks). A run's key is derived from the fingerprint, so one state
never launches two runs. When ClickHouse cannot be read the tick is skipped with the reason and the cursor kept.
The tables' marks come from the engine's public `streamling.table_marks` (no ClickHouse SQL or client here): with a
warm engine (`engine_url`) and the embedded ClickHouse, the engine reads the tables, its runs holding the data path,
which chdb lets no other process open.
A cursor of an older version (a digest of the file's bytes) is taken over without a run.
"""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING, Any

import dagster as dg

from streamling import load_pipeline, read_pipeline_text, table_marks
from streamling.config import Settings
from streamling.errors import StreamlingError, first_line
from streamling_dagster.backfill import REPROCESS_TAG
from streamling_dagster.guard import stream_skip_reason
from streamling_dagster.nodes import operator_of
from streamling_dagster.pipelines import PipelineFile
from streamling_dagster.resources import StreamlingResource

if TYPE_CHECKING:
    from streamling import KeyMark

BACKFILL_INTERVAL_SEC = 60
PIPELINE_TAG = "streamling/pipeline"
TRIGGER_TAG = "streamling/trigger"
FIRST_TRIGGER = "first evaluation: this sensor has not requested a backfill yet"
FILE_CHANGED = "pipeline definition changed"
CLICKHOUSE = "clickhouse"
"""The system whose tables this sensor watches (what it can query: the `clickhouse_source` connection)."""


def bounded_tables(pf: PipelineFile, settings: Settings) -> list[tuple[str, str]]:
    """(database, table) of every ClickHouse table the pipeline's sources read (`Operator.reads`: a `clickhouse`
    source's, a hybrid's bounded phases'), once each, in order."""
    assert pf.pipeline is not None
    found: dict[tuple[str, str], None] = {}
    for node in pf.pipeline.sources:
        for read in operator_of(node, settings).reads():
            if read.system == CLICKHOUSE and len(read.path) == 2:
                found[(read.path[0], read.path[1])] = None
    return list(found)


def definition_digests(pf: PipelineFile, settings: Settings) -> dict[str, str]:
    """Each node's digest (``<kind> <name>`` → sha256 of its validated spec as JSON, inputs included), from the
    file as it is on disk now. Raises StreamlingError when the file cannot be read or no longer validates."""
    text = read_pipeline_text(pf.path)
    pipeline, report = load_pipeline(text, name=pf.path.stem, path=pf.path, settings=settings)
    if pipeline is None:
        raise StreamlingError.user(report.errors[0] if report.errors else f"{pf.path} does not validate")
    return {
        f"{node.kind} {name}": hashlib.sha256(
            json.dumps(node.spec.model_dump(mode="json", by_alias=True), sort_keys=True, default=str).encode()
        ).hexdigest()[:16]
        for name, node in pipeline.nodes.items()
    }


def changed_nodes(old: dict[str, str], new: dict[str, str]) -> list[str]:
    """What differs, as a trigger names it: ``transform 'x' changed``, ``sink 'y' added``, ``source 'z' removed``."""
    out = []
    for key in sorted(old.keys() | new.keys()):
        kind, _, name = key.partition(" ")
        if key not in old:
            out.append(f"{kind} '{name}' added")
        elif key not in new:
            out.append(f"{kind} '{name}' removed")
        elif old[key] != new[key]:
            out.append(f"{kind} '{name}' changed")
    return out


def _previous(cursor: str | None) -> dict[str, Any] | None:
    if not cursor:
        return None
    try:
        value = json.loads(cursor)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _shown(value: str | None) -> str:
    return "(empty)" if value is None else value


def evaluate(
    pf: PipelineFile, settings: Settings, cursor: str | None, where: str, done: list[str] | None = None
) -> dg.SensorResult | dg.SkipReason:
    """One tick: the current fingerprint against the cursor's. `done`: the partitions already backfilled (of a
    partitioned pipeline), which a changed file runs again."""
    previous = _previous(cursor)
    recorded_tables: dict[str, str | None] = (previous or {}).get("tables") or {}
    try:
        nodes = definition_digests(pf, settings)
    except StreamlingError as exc:
        return dg.SkipReason(f"cannot read pipeline file {pf.path} (cursor kept): {first_line(exc.message)}")
    recorded_nodes = (previous or {}).get("nodes")
    if not isinstance(recorded_nodes, dict):  # none yet, or an older cursor (a digest of the bytes): taken over
        recorded_nodes = nodes
    differences = changed_nodes(recorded_nodes, nodes) if previous is not None else []
    advanced = [f"{FILE_CHANGED}: {', '.join(differences)}"] if differences else []
    unchanged = [] if advanced else ["pipeline definition unchanged"]
    tables: dict[str, str | None] = {}
    targets = bounded_tables(pf, settings)
    marks: list[KeyMark] = []
    checking = ".".join(targets[0]) if targets else ""

    def check(table: str) -> None:
        nonlocal checking
        checking = table

    try:
        if targets:
            marks = table_marks(settings, targets, recorded_tables, where, check)
    except StreamlingError as exc:  # its message has no credentials (`table_marks`)
        problem = first_line(exc).removeprefix(f"{where}: ")
        return dg.SkipReason(f"cannot check clickhouse {checking} (cursor kept): {problem}")
    for mark in marks:
        component, now = mark.component, mark.now
        known = component in recorded_tables
        old = recorded_tables.get(component)
        tables[component] = now if mark.grew or not known else old  # a high-water mark
        if mark.grew and previous is not None:
            advanced.append(f"clickhouse {component} {_shown(old)} -> {now}")
        elif now == tables[component]:
            unchanged.append(f"clickhouse {component} still {_shown(now)}")
        else:
            unchanged.append(f"clickhouse {component} {_shown(now)}, not beyond {old}")
    fingerprint = json.dumps({"nodes": nodes, "tables": tables}, sort_keys=True)
    if previous is not None and not advanced:
        reason = dg.SkipReason("no bounded input advanced: " + "; ".join(unchanged))
        if fingerprint == cursor:
            return reason
        return dg.SensorResult(skip_reason=reason, cursor=fingerprint)  # e.g. a table no longer read
    run_key = f"{pf.name}:{hashlib.sha256(fingerprint.encode()).hexdigest()[:16]}"
    trigger = "; ".join(advanced) if previous is not None else FIRST_TRIGGER
    tags = {PIPELINE_TAG: pf.name, TRIGGER_TAG: trigger}
    changed = previous is not None and advanced[0].startswith(FILE_CHANGED)
    if pf.orchestration.backfill_partitions is not None:
        return _partition_requests(pf, fingerprint, run_key, tags, changed, done or [])
    if changed:  # the definition changed: existing data is read again, so the edit reaches it
        tags[REPROCESS_TAG] = FILE_CHANGED
    return dg.SensorResult(run_requests=[dg.RunRequest(run_key=run_key, tags=tags)], cursor=fingerprint)


def _partition_requests(
    pf: PipelineFile, fingerprint: str, run_key: str, tags: dict[str, str], changed: bool, done: list[str]
) -> dg.SensorResult:
    """A partitioned pipeline: when its file changed, every range already backfilled runs again (from its start,
    as partition runs do); new rows, or a first evaluation, request nothing: ranges are launched from the
    partition view."""
    if not changed:
        why = "ranges are launched from the partition view (backfill_partitions is set)"
        return dg.SensorResult(skip_reason=dg.SkipReason(f"{tags[TRIGGER_TAG]}: {why}"), cursor=fingerprint)
    if not done:
        reason = dg.SkipReason(f"{FILE_CHANGED}, but no range has been backfilled yet")
        return dg.SensorResult(skip_reason=reason, cursor=fingerprint)
    requests = [dg.RunRequest(run_key=f"{run_key}:{key}", partition_key=key, tags=tags) for key in done]
    return dg.SensorResult(run_requests=requests, cursor=fingerprint)


def backfill_sensor(
    pf: PipelineFile,
    job: dg.JobDefinition | dg.UnresolvedAssetJobDefinition | None = None,
    *,
    minimum_interval_seconds: int = BACKFILL_INTERVAL_SEC,
    default_status: dg.DefaultSensorStatus = dg.DefaultSensorStatus.STOPPED,
) -> dg.SensorDefinition:
    """`<pipeline>__backfill_sensor` for a pipeline that can backfill; it targets `job`, else the job named
    `<pipeline>__backfill` (which the Definitions must then contain)."""
    assert pf.can_backfill, f"{pf.name} cannot backfill"
    name = f"{pf.name}__backfill_sensor"
    target: dict[str, Any] = {"job": job} if job is not None else {"job_name": f"{pf.name}__backfill"}
    starts = (
        f"; it starts stopped (turn it on in the UI or with `dagster sensor start {name}`)."
        if default_status == dg.DefaultSensorStatus.STOPPED
        else "."
    )

    @dg.sensor(
        name=name,
        minimum_interval_seconds=minimum_interval_seconds,
        default_status=default_status,
        description=(
            f"Requests a `{pf.name}__backfill` run when a bounded input advanced: the definition in {pf.path.name} "
            "changed (compared node by node as parsed and normalised, so comments, formatting and orchestration "
            "settings do not count; the run then reads every bounded source from its start, or for a partitioned "
            "pipeline every range already backfilled runs again), or a ClickHouse table its clickhouse/hybrid "
            "sources read holds "
            "a larger first sort-key value "
            "than recorded (smaller keys are not read by a resumed backfill, so they do not count); the first "
            "evaluation requests a run too. The cursor records the file digest and each table's largest key, and "
            "the run key is a digest of them, so one state never launches two runs. If ClickHouse cannot be read "
            "the tick is skipped with the reason and the cursor kept" + starts
        ),
        **target,
    )
    def sensor(context: dg.SensorEvaluationContext, streamling: StreamlingResource) -> Any:
        if busy := stream_skip_reason(context, pf.name):  # the run would be refused; cursor kept
            return busy
        done: list[str] = []
        if pf.orchestration.backfill_partitions is not None and pf.pipeline is not None:
            found = {
                p for n in pf.pipeline.sinks for p in context.instance.get_materialized_partitions(pf.asset_key(n.name))
            }
            done = sorted(found)
        return evaluate(pf, streamling.settings(), context.cursor, name, done)

    return sensor
