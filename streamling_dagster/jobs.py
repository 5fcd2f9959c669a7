"""Long-running jobs per pipeline: `<pipeline>__stream` and `<pipeline>__backfill_then_stream`.

Both carry the `streamling/pipeline` tag (dagster.yaml allows one run per pipeline at a time, backfills included)
and `streamling/stream` (how the keeper finds them, and what makes the run coordinator refuse other runs of the
pipeline meanwhile), run in-process (the run worker is the process holding Spark, so killing it is a crash the
keeper sees) and opt out of Dagster's run retries: the stream keeper sensor restarts streams, with backoff.
Terminating one is a normal end: the run is CANCELED with its positions committed (`streaming.stopped_cleanly`).
"""

import threading
from collections.abc import Iterator

import dagster as dg

from streamling import release_embedded, source_status
from streamling_dagster.backfill import backfill_checks, sink_metadata
from streamling_dagster.guard import STREAM_TAG, check_no_other_run, op_tags, pipeline_pool
from streamling_dagster.observations import named_position, position_text
from streamling_dagster.pipelines import PipelineFile
from streamling_dagster.resources import StreamlingResource, StreamlingSparkResource
from streamling_dagster.streaming import StopSignals, StreamConfig, end_if_stopped, run_engine, stopped_cleanly

__all__ = ["STREAM_TAG", "backfill_then_stream_job", "stream_job", "stream_tags"]


def stream_tags(pf: PipelineFile) -> dict[str, str]:
    return {"streamling/pipeline": pf.name, STREAM_TAG: pf.name, "dagster/max_retries": "0"}


def stream_job(pf: PipelineFile) -> dg.JobDefinition:
    @dg.op(
        out={},
        name=f"stream_{pf.name}",
        description=f"Run {pf.path.name} from its committed positions until the run is terminated.",
        tags=op_tags(pf, streaming=True),
        pool=pipeline_pool(pf),
    )
    def stream(
        context: dg.OpExecutionContext,
        config: StreamConfig,
        streamling: StreamlingResource,
        spark: StreamlingSparkResource,
    ) -> Iterator[dg.AssetObservation | dg.AssetMaterialization]:
        stop = threading.Event()
        with StopSignals(stop) as signals:  # from the op's first line: a stop before the engine starts ends cleanly
            settings = streamling.pipeline_settings(pf, job_mode="false")
            context.log.info(f"Streaming {pf.path} (state namespace {settings.application_id})")
            with signals.interruptible():
                if not check_no_other_run(context, pf, config.wait_for_running_sec):  # before positions and Spark
                    return
            session = lambda: spark.session_for(settings)  # noqa: E731 - started after the one-run-per-pipeline check
            yield from run_engine(context, pf, settings, session, config, observe=True, clean_stop=True, stop=stop)

    @dg.job(
        name=f"{pf.name}__stream",
        description=f"Stream {pf.path.name}: terminate the run to stop it gracefully.",
        tags=stream_tags(pf),
        executor_def=dg.in_process_executor,
        hooks={stopped_cleanly},
    )
    def job() -> None:
        stream()

    return job


def backfill_then_stream_job(pf: PipelineFile) -> dg.JobDefinition:
    """Job mode first (the bounded phases, recorded as materializations of the sinks), then the stream from
    the positions the backfill committed: the boundary is the state backend, so nothing is lost or applied
    twice between the phases (a hybrid source with `start_at: latest` pins its stream start when the backfill
    begins)."""

    @dg.op(
        out={},
        name=f"backfill_then_stream_{pf.name}",
        description=f"Backfill {pf.path.name}, then stream it until the run is terminated.",
        tags=op_tags(pf, streaming=True),
        pool=pipeline_pool(pf),
    )
    def backfill_then_stream(
        context: dg.OpExecutionContext,
        config: StreamConfig,
        streamling: StreamlingResource,
        spark: StreamlingSparkResource,
    ) -> Iterator[dg.AssetObservation | dg.AssetMaterialization | dg.AssetCheckEvaluation]:
        stop = threading.Event()
        with StopSignals(stop) as signals:  # a stop before or between the phases, too, is a clean end
            settings = streamling.pipeline_settings(pf, job_mode="true")
            context.log.info(f"Backfilling {pf.path} (state namespace {settings.application_id})")
            with signals.interruptible():
                if not check_no_other_run(context, pf, config.wait_for_running_sec):  # before positions and Spark
                    return
                before = source_status(pf.path, settings)
            if stop.is_set():
                end_if_stopped(context, stop)
                return
            session = lambda: spark.session_for(settings)  # noqa: E731 - started after the one-run-per-pipeline check
            summary = yield from run_engine(
                context, pf, settings, session, config, observe=False, clean_stop=True, stop=stop
            )
            if summary.stopped_by_signal:  # terminated during the backfill: the stream does not start
                return
            # Stored, not yielded: Dagster raises an interrupt that meets a yield outside the op (see streaming.py).
            for sink, metadata in sink_metadata(pf, summary, settings=settings).items():
                context.log_event(dg.AssetMaterialization(asset_key=pf.asset_key(sink), metadata=metadata))
            for evaluation in backfill_checks(pf, before, summary):
                context.log_event(evaluation)
            boundary = "; ".join(
                f"{name} at {position_text(named_position(pf, name, progress.position, settings=settings))}"
                for name, progress in summary.sources.items()
            )
            context.log.info(f"Backfill done; streaming from the committed positions: {boundary or 'none'}")
            if release_embedded():  # another pipeline's run can open it while this one streams
                context.log.info("Released the embedded ClickHouse data path (the bounded phase is over)")
            streaming = settings.model_copy(update={"job_mode": False})
            yield from run_engine(context, pf, streaming, session, config, observe=True, clean_stop=True, stop=stop)

    @dg.job(
        name=f"{pf.name}__backfill_then_stream",
        description=f"Backfill {pf.path.name}, then stream from where the backfill ended, in one run.",
        tags=stream_tags(pf),
        executor_def=dg.in_process_executor,
        hooks={stopped_cleanly},
    )
    def job() -> None:
        backfill_then_stream()

    return job
