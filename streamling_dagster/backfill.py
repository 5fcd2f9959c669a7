"""The backfill: materializing a pipeline's sink assets runs its bounded sources to their end (job mode),
with a `rows_reconcile` check per sink and the run's figures as materialization metadata.

Which data a run reads:
- a partition (``orchestration.backfill_partitions``): its range, from scratch, in the namespace
  ``<namespace>.partition.<key>``; rows are applied again (sinks upsert by key, `_gs_op` says how), so a re-run
  after an edit brings the new result. A re-execution of a failed or canceled run (Dagster's
  ``dagster/parent_run_id``) resumes where that run's positions are instead.
- unpartitioned, tagged ``streamling/reprocess`` (the backfill sensor sets it when the pipeline file changed): the
  bounded sources from their start (`streamling.reset_positions`; a hybrid's stream offsets are kept). Else it
  resumes after the committed positions.

A terminated run records what it wrote (an observation marked ``backfill_incomplete``), and the run that resumes
it reports its own rows and the backfill's total since it began (``backfill_rows_total``).
"""

import functools
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import dagster as dg
from dagster import AssetExecutionContext

from streamling import RunSummary, Settings, SourceStatus, reset_positions, source_status
from streamling_dagster import nodes
from streamling_dagster.guard import check_no_other_run, op_tags, pipeline_pool
from streamling_dagster.observations import feeding, named_positions
from streamling_dagster.partitions import partition_namespace
from streamling_dagster.pipelines import PipelineFile
from streamling_dagster.resources import BACKFILLS, StreamlingResource, StreamlingSparkResource
from streamling_dagster.streaming import StopSignals, StreamConfig, end_if_stopped, run_engine, stopped_cleanly

RECONCILE_CHECK = "rows_reconcile"
"""Transforms that keep or drop rows, never make more (the stateless guard rules out joins and explode); a transform
cannot say so through the operator interface yet, so a plugin's is not reconciled."""
REPROCESS_TAG = "streamling/reprocess"
"""On an unpartitioned backfill run: read the bounded sources from their start (the value says why)."""
PARENT_RUN_TAG = "dagster/parent_run_id"
INCOMPLETE = "backfill_incomplete"
TOTAL = "backfill_rows_total"


def reconcilable(pf: PipelineFile, sink: str) -> bool:
    """Rows can be reconciled when every feeding source counts its rows (`Source.rows_between`) and every
    transform on the way keeps or drops rows (`Transform.adds_no_rows`: SQL, dynamic tables)."""
    assert pf.pipeline is not None
    pipeline = pf.pipeline
    sources = feeding(pf, sink)
    between = {n for s in sources for n in pipeline.downstream(s)} - {sink}
    transforms = [pipeline.nodes[n] for n in between if pipeline.nodes[n].kind == "transform"]
    return all(nodes.counts_rows(pipeline.nodes[s]) for s in sources) and all(
        getattr(t.optype.operator, "adds_no_rows", False) for t in transforms
    )


def reconciled_sinks(pf: PipelineFile) -> list[str]:
    assert pf.pipeline is not None
    return [node.name for node in pf.pipeline.sinks if reconcilable(pf, node.name)]


@dataclass
class BackfillRun:
    """What one backfill run reads: its settings (namespace, range) and whether it starts over."""

    settings: Settings
    fresh: bool
    why: str
    partition: str | None = None


def plan_run(context: AssetExecutionContext, pf: PipelineFile, streamling: StreamlingResource) -> BackfillRun:
    settings = streamling.pipeline_settings(pf, job_mode="true")
    tags = context.run.tags
    parent = tags.get(PARENT_RUN_TAG)
    partitions = pf.orchestration.backfill_partitions
    if context.has_partition_key and partitions is not None:
        key = context.partition_key
        wanted = partitions.range_of(context.assets_def.partitions_def, key)  # type: ignore[arg-type]
        ranged = settings.model_copy(
            update={"application_id": partition_namespace(settings.application_id, key), "backfill_range": wanted}
        )
        if parent:
            return BackfillRun(ranged, False, f"range {wanted}, resuming re-executed run {parent}", key)
        return BackfillRun(ranged, True, f"range {wanted}, from its start", key)
    if tags.get(REPROCESS_TAG) and not parent:
        return BackfillRun(settings, True, f"from the start of every bounded source ({tags[REPROCESS_TAG]})")
    return BackfillRun(settings, False, "resuming after the committed positions")


def backfill_asset_args(pf: PipelineFile, sinks: list[dg.AssetSpec], name: str | None = None) -> dict[str, Any]:
    """`dg.multi_asset` arguments of a pipeline's backfill: the sinks (skippable: a terminated run has none),
    the `rows_reconcile` checks, the partitions, the op tags the run coordinator reads, the pipeline's pool, the
    clean-stop hook."""
    assert pf.pipeline is not None
    checks = [
        dg.AssetCheckSpec(
            RECONCILE_CHECK,
            asset=pf.asset_key(sink),
            description="Rows read ≥ rows the sources offered at the start, and rows read = written + filtered out",
        )
        for sink in reconciled_sinks(pf)
    ]
    plan = pf.orchestration.backfill_partitions
    name = name or f"backfill_{pf.name}"
    BACKFILLS[name] = functools.partial(backfill_events, pf)
    return {
        "name": name,
        "specs": [spec.replace_attributes(skippable=True) for spec in sinks],
        "hooks": {stopped_cleanly},
        "check_specs": checks,
        "can_subset": False,
        "partitions_def": plan.definition() if plan is not None else None,
        "op_tags": op_tags(pf),
        "pool": pipeline_pool(pf),
    }


def backfill_assets(pf: PipelineFile, sinks: list[dg.AssetSpec]) -> dg.AssetsDefinition:
    """Materializing the sinks runs the pipeline's bounded sources to their end (job mode); with
    `backfill_partitions`, one range per partition."""

    @dg.multi_asset(**backfill_asset_args(pf, sinks))
    def run(
        context: AssetExecutionContext,
        config: StreamConfig,
        streamling: StreamlingResource,
        spark: StreamlingSparkResource,
    ) -> Any:
        yield from backfill_events(pf, context, streamling, spark, config)

    return run


def backfill_events(
    pf: PipelineFile,
    context: AssetExecutionContext,
    streamling: StreamlingResource,
    spark: StreamlingSparkResource,
    config: StreamConfig | None = None,
) -> Iterator[Any]:
    """The backfill of `pf` inside an asset op: its materializations and `rows_reconcile` results. Terminated,
    it records what it wrote, marks the run CANCELED and returns (the `stopped_cleanly` hook ends the run
    without a step failure). The results are yielded last, after all the work (see `StopSignals`)."""
    stop = threading.Event()
    op_context = context.op_execution_context
    with StopSignals(stop) as signals:
        with signals.interruptible():  # the event log and the state backend, which can block
            wait = config.wait_for_running_sec if config is not None else 0.0
            if not check_no_other_run(op_context, pf, wait):  # before resetting positions or starting Spark
                yield from nothing_ran(pf, "the run was refused")
                return
            job = plan_run(context, pf, streamling)
        if stop.is_set():
            end_if_stopped(op_context, stop)
            yield from nothing_ran(pf, "stopped on request before it started")
            return
        settings = job.settings
        if job.fresh:  # not broken into: one source reset and another not would be resumed from as they are
            removed = reset_positions(pf.path, settings)
            context.log.info(f"Starting over in namespace {settings.application_id}: reset {removed or 'nothing'}")
        with signals.interruptible():
            carried = {} if job.fresh else carried_rows(context.instance, pf, job.partition)
            before = source_status(pf.path, settings)
        if stop.is_set():
            end_if_stopped(op_context, stop)
            yield from nothing_ran(pf, "stopped on request before it started")
            return
        summary = RunSummary()
        if not job.fresh and not any(carried.values()) and at_their_end(before):
            context.log.info(
                "Nothing new since the last backfill: every source is at its end (backlog 0), so Spark is not "
                "started and the sinks keep their latest materialization"
            )
            yield from [reconcile(pf, pf.asset_key(sink), before, summary) for sink in reconciled_sinks(pf)]
            return
        context.log.info(f"Running {pf.path} in job mode, {job.why} (state namespace {settings.application_id})")
        try:
            yield from run_engine(  # observe=False: yields nothing
                op_context,
                pf,
                settings,
                lambda: spark.session_for(settings),
                config or StreamConfig(),
                observe=False,
                summary=summary,
                clean_stop=True,
                stop=stop,
            )
        except BaseException:  # failed while stopping: what was written is recorded all the same
            yield from incomplete(pf, summary, carried, job.partition)
            raise
        results: list[Any] = []
        if summary.stopped_by_signal:  # terminated: recorded, and counted when the backfill resumes
            results += incomplete(pf, summary, carried, job.partition)
            for sink in reconciled_sinks(pf):  # a declared check must report: what the partial run shows, as a warning
                result = reconcile(pf, pf.asset_key(sink), before, summary)
                results.append(
                    result._replace(
                        severity=dg.AssetCheckSeverity.WARN,
                        description=f"terminated before the end (resume to complete): {result.description}",
                    )
                )
        else:
            if nothing_new(summary, carried, job.fresh):
                context.log.info(
                    "Nothing new since the last backfill (no rows read or written): the sinks keep their latest "
                    "materialization"
                )
            else:
                for sink, metadata in sink_metadata(pf, summary, carried, settings).items():
                    results.append(dg.MaterializeResult(asset_key=pf.asset_key(sink), metadata=metadata))
            results += [reconcile(pf, pf.asset_key(sink), before, summary) for sink in reconciled_sinks(pf)]
            end_if_stopped(op_context, stop, summary)  # a stop after the engine finished: whole, and recorded
    yield from results


def at_their_end(statuses: dict[str, SourceStatus]) -> bool:
    """Every source has committed a position and knows nothing waits after it (`Source.backlog`, e.g. bounded Kafka:
    its end offsets). Sources that cannot tell (ClickHouse, generators) are read to find out."""
    return bool(statuses) and all(s.position is not None and s.backlog_total == 0 for s in statuses.values())


def nothing_new(summary: RunSummary, carried: dict[str, int], fresh: bool) -> bool:
    """A resumed backfill that found nothing after its committed positions: recording it would make `rows_written
    0` every sink's latest materialization, hiding what the backfill did. (A fresh run — a reprocess, a range — or
    one that completes an interrupted backfill is always recorded.)"""
    return (
        not fresh
        and not any(carried.values())
        and not any(p.rows_in for p in summary.sources.values())
        and not any(summary.sink_rows.values())
    )


def carried_rows(instance: dg.DagsterInstance, pf: PipelineFile, partition: str | None) -> dict[str, int]:
    """Per sink, the rows the interrupted runs of this backfill wrote so far: the total on the newest
    `backfill_incomplete` record, when no materialization (a finished backfill) came after it."""
    assert pf.pipeline is not None
    out: dict[str, int] = {}
    for node in pf.pipeline.sinks:
        key = pf.asset_key(node.name)
        where = dg.AssetRecordsFilter(asset_key=key, asset_partitions=[partition] if partition else None)
        finished = instance.fetch_materializations(where, limit=1).records
        after = finished[0].storage_id if finished else 0
        for record in instance.fetch_observations(where, limit=100).records:  # newest first
            if record.storage_id < after:
                break
            observed = record.asset_observation
            if observed is not None and INCOMPLETE in observed.metadata and TOTAL in observed.metadata:
                out[node.name] = int(observed.metadata[TOTAL].value)  # type: ignore[arg-type]
                break
    return out


def incomplete(
    pf: PipelineFile, summary: RunSummary, carried: dict[str, int], partition: str | None
) -> Iterator[dg.AssetObservation]:
    for sink, metadata in sink_metadata(pf, summary, carried).items():
        metadata[INCOMPLETE] = dg.MetadataValue.bool(True)
        yield dg.AssetObservation(asset_key=pf.asset_key(sink), partition=partition, metadata=metadata)


def backfill_checks(
    pf: PipelineFile, before: dict[str, SourceStatus], summary: RunSummary
) -> list[dg.AssetCheckEvaluation]:
    """The `rows_reconcile` evaluations of a bounded phase run outside the backfill asset (backfill-then-stream's
    op, which does not declare the checks), as events that op can yield."""
    out = []
    for sink in reconciled_sinks(pf):
        result = reconcile(pf, pf.asset_key(sink), before, summary)
        out.append(
            dg.AssetCheckEvaluation(
                asset_key=pf.asset_key(sink),
                check_name=RECONCILE_CHECK,
                passed=result.passed,
                metadata=result.metadata,
                description=result.description,
                severity=result.severity,
            )
        )
    return out


def sink_metadata(
    pf: PipelineFile, summary: RunSummary, carried: dict[str, int] | None = None, settings: Settings | None = None
) -> dict[str, dict[str, Any]]:
    """What a bounded run did, per sink: rows and operations written, speed, and where each source ended;
    `backfill_rows_total` adds the rows of the interrupted runs this one resumed (`carried`)."""
    assert pf.pipeline is not None
    duration = summary.duration_sec
    positions = {name: progress.position for name, progress in summary.sources.items()}
    epochs = {name: progress.epochs for name, progress in summary.sources.items()}
    out = {}
    for node in pf.pipeline.sinks:
        rows = summary.sink_rows.get(node.name, 0)
        metadata: dict[str, Any] = {
            "rows_written": dg.MetadataValue.int(rows),
            TOTAL: dg.MetadataValue.int(rows + (carried or {}).get(node.name, 0)),
            "duration_sec": dg.MetadataValue.float(round(duration, 3)),
            "rows_per_sec": dg.MetadataValue.float(round(rows / duration, 1) if duration else 0.0),
            "epochs": dg.MetadataValue.json(epochs),
            "final_positions": dg.MetadataValue.json(named_positions(pf, positions, settings=settings)),
        }
        for op, count in summary.sink_ops.get(node.name, {}).items():
            metadata[op] = dg.MetadataValue.int(count)
        out[node.name] = metadata
    return out


def nothing_ran(pf: PipelineFile, why: str) -> list[dg.AssetCheckResult]:
    """The `rows_reconcile` results of a run that read and wrote nothing (a declared check must report, or the
    step fails): nothing to reconcile, so each passes, saying why nothing ran."""
    results = []
    for sink in reconciled_sinks(pf):
        result = reconcile(pf, pf.asset_key(sink), {}, RunSummary())
        results.append(result._replace(description=f"Nothing read or written: {why}"))
    return results


def reconcile(
    pf: PipelineFile, key: dg.AssetKey, before: dict[str, SourceStatus], summary: RunSummary
) -> dg.AssetCheckResult:
    assert pf.pipeline is not None
    sink = next(s for s in pf.pipeline.sinks if pf.asset_key(s.name) == key)
    sources = feeding(pf, sink.name)
    read = sum(summary.sources[s].rows_in for s in sources if s in summary.sources)
    offered = [before[s].backlog_total if s in before else None for s in sources]
    expected = sum(o for o in offered if o is not None) if all(o is not None for o in offered) else None
    written = summary.sink_rows.get(sink.name, 0)
    problems = []
    if expected is not None and read < expected:  # more is fine: records may arrive while the run starts
        problems.append(f"read {read} rows but the sources offered {expected} when the run started")
    if written > read:
        problems.append(f"wrote {written} rows, more than the {read} read")
    return dg.AssetCheckResult(
        asset_key=key,
        check_name=RECONCILE_CHECK,
        passed=not problems,
        description="; ".join(problems) or f"{read} read = {written} written + {read - written} filtered out",
        metadata={
            **({"source_rows_offered": expected} if expected is not None else {}),  # omitted when unknown
            "source_rows_read": read,
            "sink_rows_written": written,
            "rows_filtered": read - written,
        },
    )
