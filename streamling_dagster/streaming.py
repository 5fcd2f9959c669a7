"""Running the engine inside a Dagster op: progress in the run log, observations, and a graceful stop.

The engine runs in a thread with a stop Event (signal handlers belong to Dagster's main thread). The op's
own thread watches it: a progress line in the run log every `progress_interval_sec` and, for streams, an
AssetObservation per sink every `observe_interval_sec`. A termination request from the UI or the API, or a
SIGTERM/SIGINT to the run worker, interrupts the op's thread: it sets the stop Event (the in-flight epoch
finishes and commits, nothing after it starts), waits for the engine, records the final positions and
re-raises, so Dagster ends the run CANCELED rather than FAILED.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Any

import dagster as dg

from streamling import RunSummary, Settings, run_pipeline, source_status
from streamling.errors import first_line
from streamling_dagster.observations import sink_observations
from streamling_dagster.pipelines import PipelineFile

STOPPED_BY_TAG = "streamling/stopped_by"
"""Set on a run that stopped because its worker got SIGTERM/SIGINT (the keeper restarts those)."""


class StreamConfig(dg.Config):
    observe_interval_sec: float = 60.0
    """How often a running stream reports positions, backlog, rows/s and the last epoch on its sinks."""
    progress_interval_sec: float = 30.0
    """How often a progress line is written to the run log."""


@dataclass
class Progress:
    """Throttled reporting from the op's thread while the engine runs."""

    context: dg.OpExecutionContext
    pf: PipelineFile
    settings: Settings
    summary: RunSummary
    config: StreamConfig
    observe: bool
    started: float = field(default_factory=time.monotonic)
    _logged: tuple[float, int] = field(init=False)
    _observed: tuple[float, dict[str, int]] = field(init=False)

    def __post_init__(self) -> None:
        self._logged = (self.started, 0)
        self._observed = (self.started, {})

    def tick(self, now: float) -> list[dg.AssetObservation]:
        last, _ = self._logged
        if now - last >= self.config.progress_interval_sec:
            self.log_line(now)
        if self.observe and now - self._observed[0] >= self.config.observe_interval_sec:
            return self.observations(now)
        return []

    def log_line(self, now: float) -> None:
        last, rows_then = self._logged
        rows = sum(self.summary.sink_rows.values())
        sources = ", ".join(
            f"{name}: epoch {p.epochs}, {p.rows_in} rows in, at {p.position}"
            for name, p in self.summary.sources.items()
        )
        sinks = ", ".join(f"{name}: {n} rows" for name, n in self.summary.sink_rows.items())
        rate = (rows - rows_then) / (now - last) if now > last else 0.0
        self.context.log.info(
            f"{self.pf.name}: {now - self.started:.0f} s, {rate:,.0f} rows/s | sources {sources or '-'} | "
            f"sinks {sinks or '-'}"
        )
        self._logged = (now, rows)

    def observations(self, now: float) -> list[dg.AssetObservation]:
        last, rows_then = self._observed
        rows = dict(self.summary.sink_rows)
        elapsed = max(now - last, 1e-9)
        extra = {
            sink: {
                "stream_rows_written": dg.MetadataValue.int(count),
                "rows_per_sec": dg.MetadataValue.float(round((count - rows_then.get(sink, 0)) / elapsed, 1)),
                "run_id": dg.MetadataValue.text(self.context.run_id),
            }
            for sink, count in rows.items()
        }
        self._observed = (now, rows)
        try:
            statuses = source_status(self.pf.path, self.settings)
        except Exception as exc:  # monitoring must never stop the stream
            self.context.log.warning(f"cannot read positions for observations: {first_line(exc)}")
            return []
        return sink_observations(self.pf, statuses, extra)


def run_engine(
    context: dg.OpExecutionContext,
    pf: PipelineFile,
    settings: Settings,
    spark: Any,
    config: StreamConfig,
    observe: bool,
    summary: RunSummary | None = None,
) -> Generator[dg.AssetObservation, None, RunSummary]:
    """Run the pipeline in a thread until its sources end, it fails, or the run is terminated; yields the
    observations (events must be yielded: ones logged from an op that then raises would be lost). A given
    `summary` is filled as epochs commit, so the caller knows what a terminated run did."""
    summary = summary if summary is not None else RunSummary()
    stop = threading.Event()
    outcome: dict[str, Any] = {}

    def engine() -> None:
        try:
            outcome["summary"] = run_pipeline(pf.path, settings, spark, stop=stop, summary=summary)
        except BaseException as exc:  # handed to the op's thread
            outcome["error"] = exc

    thread = threading.Thread(target=engine, name=f"streamling-{pf.name}", daemon=True)
    progress = Progress(context, pf, settings, summary, config, observe)
    thread.start()
    try:
        while thread.is_alive():
            thread.join(timeout=0.5)
            yield from progress.tick(time.monotonic())
    except BaseException:  # Dagster's interrupt: a termination request or a signal to the run worker
        stop.set()
        _report_stopping(context)
        context.log.info("Stop requested: finishing the in-flight epoch, then stopping")
        thread.join()
        yield from _final(progress, observe)
        if "error" in outcome:
            context.log.error(f"the pipeline failed while stopping: {first_line(outcome['error'])}")
        raise
    yield from _final(progress, observe)
    if "error" in outcome:
        raise outcome["error"]
    return outcome["summary"]


def _final(progress: Progress, observe: bool) -> list[dg.AssetObservation]:
    now = time.monotonic()
    progress.log_line(now)
    return progress.observations(now) if observe else []


def _report_stopping(context: dg.OpExecutionContext) -> None:
    """A termination request already marked the run CANCELING; a bare signal did not — mark it, so the run
    ends CANCELED, and tag it so the stream keeper knows nobody asked for the stop."""
    run = context.instance.get_run_by_id(context.run_id)
    if run is None or run.status == dg.DagsterRunStatus.CANCELING:
        return
    context.instance.add_run_tags(context.run_id, {STOPPED_BY_TAG: "signal"})
    context.instance.report_run_canceling(run, message="The run worker received a stop signal")
