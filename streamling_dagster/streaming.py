"""Running the engine inside a Dagster op: progress in the run log, observations, and a graceful stop.

The engine runs in a thread with a stop Event. The op's own thread watches it: a progress line in the run log
every `progress_interval_sec` and, for streams, an AssetObservation per sink as soon as the first epoch commits
and then every `observe_interval_sec`. Those are written to the run's event log from inside the op (`log_event`
stores them at once), not yielded: after a yield, Dagster holds an interrupt that arrives while it handles the
event and raises it outside the op, where no graceful stop can run and a bare signal ends the run FAILURE. So
an op yields only last, once everything else is done. A termination request from the UI or the API reaches the
run worker as a SIGINT, like a SIGTERM/SIGINT sent to it; in the ops, those set the stop Event (`StopSignals`)
rather than raising into whatever the op's thread was doing, except in blocking work that cannot watch the Event
(the state backend, Spark's start), which they break into. The op's thread then marks the run CANCELING, waits
for the engine (the in-flight epoch finishes and commits, nothing after it starts) and records the final
positions. A stream then marks its run CANCELED and returns; its job's hook ends the run there (see
`stopped_cleanly`), so terminating is a normal end: no step failure, no traceback.
"""

from __future__ import annotations

import signal
import sys
import threading
import time
from collections.abc import Callable, Generator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

import dagster as dg

from streamling import EngineClient, RunSummary, Settings, run_on_engine, run_pipeline, source_status
from streamling.errors import StreamlingError, first_line
from streamling_dagster.guard import end_canceled, engine_refusal
from streamling_dagster.observations import named_position, position_text, sink_observations, unchanged_key
from streamling_dagster.pipelines import PipelineFile

FIRST_OBSERVATION_RETRY_SEC = 2.0
HELD_EVENTS = 100
"""Logged observations Dagster keeps in memory to hand out when the op yields next or ends; older ones are stored
already and are dropped from memory, so a stream running for weeks does not grow."""
STOPPED_BY_TAG = "streamling/stopped_by"
"""Set on a run that stopped because its worker got SIGTERM/SIGINT (the keeper restarts those)."""


class StreamConfig(dg.Config):
    observe_interval_sec: float = 60.0
    """How often a running stream reports positions, backlog, rows/s and the last epoch on its sinks."""
    progress_interval_sec: float = 30.0
    """How often a progress line is written to the run log."""
    wait_for_running_sec: float = 0.0
    """When another run of the pipeline is running as this one starts (only a run that bypassed the queue can meet
    one: `dagster job execute`), wait up to this long for it to end instead of being refused at once."""


@dataclass
class Progress:
    """Throttled reporting from the op's thread while the engine runs.

    Rates say what they cover: the log line gives the rows written by all sinks per second since the previous
    line and since the run started; an observation gives each sink's rows per second since the previous
    observation and since the run started. The first observation comes as soon as the first epoch commits,
    then at most every `observe_interval_sec`, and only when a sink's rows, committed positions or backlog moved
    since the previous one: an idle stream reports nothing (one identical event a minute is ~1,440 per asset and
    day that tell an operator nothing)."""

    context: dg.OpExecutionContext
    pf: PipelineFile
    settings: Settings
    summary: RunSummary
    config: StreamConfig
    observe: bool
    started: float = field(default_factory=time.monotonic)
    _logged: tuple[float, int] = field(init=False)
    _observed: tuple[float, dict[str, int]] = field(init=False)
    _first_seen: bool = field(init=False, default=False)
    _tried: float = field(init=False, default=float("-inf"))
    _reported: Any = field(init=False, default=None)
    """What the last observations said (`observations.unchanged_key`), to skip identical ones."""

    def __post_init__(self) -> None:
        self._logged = (self.started, 0)
        self._observed = (self.started, {})

    def committed(self) -> bool:
        return any(p.epochs for p in self.summary.sources.values())

    def tick(self, now: float) -> list[dg.AssetObservation]:
        last, _ = self._logged
        if now - last >= self.config.progress_interval_sec:
            self.log_line(now)
        if not self.observe:
            return []
        due = now - self._observed[0] >= self.config.observe_interval_sec
        # until the first observation, try every FIRST_OBSERVATION_RETRY_SEC once an epoch committed (a hybrid
        # source between phases has no position to report for a moment)
        first = not self._first_seen and self.committed() and now - self._tried >= FIRST_OBSERVATION_RETRY_SEC
        if not (due or first):
            return []
        self._tried = now
        events = self.observations(now, only_changed=True)
        self._first_seen = self._first_seen or self._reported is not None
        return events

    def log_line(self, now: float) -> None:
        last, rows_then = self._logged
        rows = sum(self.summary.sink_rows.values())
        at = {
            name: position_text(named_position(self.pf, name, p.position, settings=self.settings))
            for name, p in self.summary.sources.items()
        }
        sources = ", ".join(
            f"{name}: epoch {p.epochs}, {p.rows_in} rows in, at {at[name]}" for name, p in self.summary.sources.items()
        )
        sinks = ", ".join(f"{name}: {n} rows" for name, n in self.summary.sink_rows.items())
        rate = (rows - rows_then) / (now - last) if now > last else 0.0
        average = rows / (now - self.started) if now > self.started else 0.0
        self.context.log.info(
            f"{self.pf.name}: {now - self.started:.0f} s, all sinks {rate:,.1f} rows/s over the last "
            f"{now - last:.0f} s ({average:,.1f} rows/s since the run started) | sources {sources or '-'} | "
            f"sinks {sinks or '-'}"
        )
        self._logged = (now, rows)

    def observations(self, now: float, only_changed: bool = False) -> list[dg.AssetObservation]:
        """Each sink's observation; with `only_changed`, none when they would say what the previous ones said
        (rows written, committed positions and backlog), and the rates then keep counting from the previous
        one."""
        last, rows_then = self._observed
        rows = dict(self.summary.sink_rows)
        elapsed = max(now - last, 1e-9)
        running = max(now - self.started, 1e-9)
        extra = {
            sink: {
                "stream_rows_written": dg.MetadataValue.int(count),
                "rows_per_sec_since_last_observation": dg.MetadataValue.float(
                    round((count - rows_then.get(sink, 0)) / elapsed, 1)
                ),
                "rows_per_sec_since_run_start": dg.MetadataValue.float(round(count / running, 1)),
                "run_id": dg.MetadataValue.text(self.context.run_id),
                **({"admin_page": dg.MetadataValue.url(page)} if (page := self.settings.admin_api_url) else {}),
            }
            for sink, count in rows.items()
        }
        try:
            statuses = source_status(self.pf.path, self.settings)
        except Exception as exc:  # monitoring must never stop the stream
            self.context.log.warning(f"cannot read positions for observations: {first_line(exc)}")
            return []
        events = sink_observations(self.pf, statuses, extra, self.settings)
        said = [unchanged_key(e, "stream_rows_written") for e in events]
        if only_changed and events and said == self._reported:
            return []
        if events:
            self._reported = said
        self._observed = (now, rows)
        return events


def run_engine(
    context: dg.OpExecutionContext,
    pf: PipelineFile,
    settings: Settings,
    spark: Callable[[], Any] | Any,
    config: StreamConfig,
    observe: bool,
    summary: RunSummary | None = None,
    clean_stop: bool = False,
    stop: threading.Event | None = None,
) -> Generator[dg.AssetObservation, None, RunSummary]:
    """Run the pipeline in a thread until its sources end, it fails, or the run is terminated; observations while
    it runs are stored as they are made (module docstring), the final ones are yielded last, once everything else
    is done. A given `summary` is filled as epochs commit, so the caller knows what a terminated run did; a given
    `stop` is the caller's (see `StopSignals`), and once set the engine does not start.

    `spark` is the session, or a function giving it, called after the one-run-per-pipeline check so that a
    refused run never starts Spark. With `clean_stop`, a stop request returns the summary (`stopped_by_signal`
    set) once the run is marked CANCELED, and the job's `stopped_cleanly` hook ends it there, without a step
    failure; otherwise the interrupt is raised after the graceful stop."""
    stop = stop if stop is not None else threading.Event()
    summary = summary if summary is not None else RunSummary()
    outcome: dict[str, Any] = {}
    interrupt: BaseException | None = None
    warm: EngineClient | None = None
    session: Any = None
    finished = False  # the engine ended on its own, before any stop request
    with StopSignals(stop) as signals:
        progress = Progress(context, pf, settings, summary, config, observe)
        if not stop.is_set():  # a stop that came first: nothing is started for the engine
            with signals.interruptible():  # blocking work that cannot watch the stop Event
                _link_admin_page(context, settings)
                warm = warm_engine(context, settings)
                session = None if warm is not None else own_session(signals, spark)
        if not stop.is_set():
            try:
                finished = _run_until_done_or_stopped(
                    context, pf, settings, warm, session, summary, progress, stop, outcome
                )
            except INTERRUPTS as exc:  # Dagster's interrupt, where the signal handlers cannot be ours
                interrupt = exc
        elif warm is not None:
            warm.close()
        final = _final(progress, observe)
        requested = stop.is_set() and not finished
        if requested and "error" in outcome:
            context.log.error(f"the pipeline failed while stopping: {first_line(outcome['error'])}")
        if stop.is_set() and clean_stop and "error" not in outcome:
            # Marked at the request already; here for a stop before the engine started, or after it finished: the
            # run's work is then whole, and the run still ends as asked.
            end_if_stopped(context, stop, summary)
            summary.stopped_by_signal = requested
    yield from final  # last: Dagster handles yielded events with its own signal handler (`StopSignals`)
    if requested:
        if not summary.stopped_by_signal:
            raise interrupt if interrupt is not None else dg.DagsterExecutionInterruptedError()
        return summary
    if "error" in outcome:
        refused = engine_refusal(context, pf, outcome["error"])
        if refused is not None:
            raise refused from None
        raise outcome["error"]
    return outcome["summary"]


def _run_until_done_or_stopped(
    context: dg.OpExecutionContext,
    pf: PipelineFile,
    settings: Settings,
    warm: EngineClient | None,
    session: Any,
    summary: RunSummary,
    progress: Progress,
    stop: threading.Event,
    outcome: dict[str, Any],
) -> bool:
    """Starts the engine's thread and reports progress until it ends; a stop request is reported (the run marked
    CANCELING) and waited for, so this returns only once the engine has stopped, with its result in `outcome`:
    True when it ended on its own, before any stop request. Anything else that goes wrong on the op's thread stops
    the engine too, and is raised once it stopped."""
    done = threading.Event()  # not Thread.join/is_alive: see `_drain`

    def engine() -> None:
        try:
            if warm is not None:
                with warm:
                    outcome["summary"] = run_on_engine(warm, pf.path, settings, stop, summary, on_log=_to_stderr)
            else:
                outcome["summary"] = run_pipeline(pf.path, settings, session, stop=stop, summary=summary)
        except BaseException as exc:  # handed to the op's thread
            outcome["error"] = exc
        finally:
            done.set()

    thread = threading.Thread(target=engine, name=f"streamling-{pf.name}", daemon=True)
    thread.start()
    held = 0
    try:
        while not done.wait(timeout=0.5) and not stop.is_set():
            held = _log_events(context, progress.tick(time.monotonic()), held)
    except INTERRUPTS:
        _stopping(context, stop, done)
        raise
    except BaseException:  # not a stop request: the engine must not run on unwatched
        stop.set()
        _drain(done)
        raise
    if stop.is_set():
        _stopping(context, stop, done)
        return False
    return True


def _stopping(context: dg.OpExecutionContext, stop: threading.Event, done: threading.Event) -> None:
    stop.set()
    _report_stopping(context)
    context.log.info("Stop requested: finishing the in-flight epoch, then stopping")
    _drain(done)


def end_if_stopped(context: dg.OpExecutionContext, stop: threading.Event, summary: RunSummary | None = None) -> None:
    """A stop requested while the op did work of its own, before the engine started or after it finished: the
    run ends CANCELED as asked (the job's `stopped_cleanly` hook), not SUCCESS under a pending termination."""
    if stop.is_set():
        _report_stopping(context)
        _report_canceled(context, summary if summary is not None else RunSummary())


class StopRequested(BaseException):
    """A stop request breaking into blocking work that cannot watch the stop Event (`StopSignals.interruptible`,
    which catches it). A BaseException, like KeyboardInterrupt, so that no `except Exception` on the way swallows
    it."""


INTERRUPTS = (KeyboardInterrupt, dg.DagsterExecutionInterruptedError)
"""What a stop request arrives as on the op's thread, when it is raised at all."""


class StopSignals:
    """While inside, on the main thread, SIGINT and SIGTERM set `stop` instead of raising. Dagster delivers a
    termination request to the run worker as a SIGINT, and its own handler raises it into whatever the op's thread
    is doing: between a backfill and its stream, or while a record is stored, that was a step failure and a lost
    record. Inside `interruptible()` — blocking work that cannot watch the Event: the state backend, Spark's
    start — a signal also cuts that work short; afterwards, the caller looks at `stop`.

    Dagster puts its own handler in place around each resumption of an op's generator, so guarded code must not
    yield: results are yielded last. On leaving, the previous handlers come back only if ours is still in place.
    Nested, the inner one restores the outer one. Off the main thread no handler can be set (nor does Dagster set
    one there)."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self, stop: threading.Event) -> None:
        self.stop = stop
        self._raising = False
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            for signo in self.SIGNALS:
                self._previous[signo] = signal.getsignal(signo)
                signal.signal(signo, self._handle)
        return self

    def __exit__(self, *exc_info: object) -> None:
        if threading.current_thread() is not threading.main_thread():
            return  # a generator closed from another thread: the handlers are no longer ours to restore
        for signo, handler in self._previous.items():
            if signal.getsignal(signo) == self._handle:
                signal.signal(signo, handler if handler is not None else signal.SIG_DFL)
        self._previous.clear()

    def _handle(self, signo: int, frame: FrameType | None) -> None:
        self.stop.set()
        if self._raising:
            self._raising = False
            raise StopRequested

    def reclaim(self) -> None:
        """Put the handlers back after code inside replaced them. Starting a SparkContext on the main thread
        installs PySpark's SIGINT handler, which cancels every Spark job — the in-flight epoch the stop was to let
        finish — and raises: a terminated stream on its own Spark then ended with `the pipeline failed while
        stopping: … An error occurred while calling o134.getResult` and a step failure."""
        if threading.current_thread() is not threading.main_thread():
            return
        for signo in self._previous:
            signal.signal(signo, self._handle)

    @contextmanager
    def interruptible(self) -> Iterator[None]:
        """The block runs to its end, or up to the first stop request; either way the caller goes on after it."""
        self._raising = True
        try:
            yield
        except StopRequested:
            pass
        finally:
            self._raising = False


def own_session(signals: StopSignals, spark: Callable[[], Any] | Any) -> Any:
    """The run's own Spark session (`spark`, or started now by calling it), with `signals`' handlers back in
    place: a SparkContext started here puts PySpark's SIGINT handler in place of ours (`StopSignals.reclaim`)."""
    session = spark() if callable(spark) else spark
    signals.reclaim()
    return session


def warm_engine(context: dg.OpExecutionContext, settings: Settings) -> EngineClient | None:
    """The warm engine (`streamling serve`) the run goes to when `engine_url` is set and it answers; else None,
    and the run starts its own Spark session (said in the run's log when an engine was configured)."""
    if not settings.engine_url:
        return None
    client = EngineClient.for_settings(settings)
    try:
        client.health()
    except StreamlingError as exc:
        client.close()
        context.log.warning(f"{exc.message}; running on a Spark session of this run instead")
        return None
    except BaseException:  # a stop request breaking in (`StopSignals.interruptible`)
        client.close()
        raise
    context.log.info(f"Running on the warm engine at {client.url}")
    return client


def _to_stderr(line: str) -> None:
    """A warm engine's log line for this run, where a local run's would go: the run worker's stderr."""
    print(line, file=sys.stderr, flush=True)


ADMIN_PAGE_TAG = "streamling/admin_page"


def _link_admin_page(context: dg.OpExecutionContext, settings: Settings) -> None:
    """With the admin API on, the run links to the pipeline's page (topology, rows/s, live rows): a run tag, shown
    on the run's page, and a log line."""
    page = settings.admin_api_url
    if page is None:
        return
    context.instance.add_run_tags(context.run_id, {ADMIN_PAGE_TAG: page})
    context.log.info(f"Pipeline page (live rows, rows/s per node): {page}")


def _drain(done: threading.Event) -> None:
    """Wait for the engine to finish its stop. Not `Thread.join`: on CPython before 3.13, a join that a signal
    handler's exception interrupts marks the still-running thread as finished (cpython#90882), so the next join
    returned at once and the run reported its summary while the engine was still committing the last epoch. A
    further interrupt meanwhile changes nothing: the stop is requested, and the engine's grace period bounds it."""
    while True:
        try:
            if done.wait(timeout=0.5):
                return
        except BaseException:  # a repeated stop request
            continue


def _log_events(context: dg.OpExecutionContext, observations: list[dg.AssetObservation], held: int) -> int:
    """Stores the observations now; returns how many Dagster holds in memory for the op's next yield or end."""
    for observation in observations:
        context.log_event(observation)
    held += len(observations)
    if held > HELD_EVENTS:
        for _ in context.consume_events():  # already in the event log
            pass
        held = 0
    return held


def _final(progress: Progress, observe: bool) -> list[dg.AssetObservation]:
    now = time.monotonic()
    progress.log_line(now)
    return progress.observations(now) if observe else []


def _report_stopping(context: dg.OpExecutionContext) -> None:
    """A termination request already marked the run CANCELING; a bare signal did not — mark it, so the run
    ends CANCELED, and tag it so the stream keeper knows nobody asked for the stop."""
    run = context.instance.get_run_by_id(context.run_id)
    if run is None or run.status in (dg.DagsterRunStatus.CANCELING, dg.DagsterRunStatus.CANCELED):
        return
    context.instance.add_run_tags(context.run_id, {STOPPED_BY_TAG: "signal"})
    context.instance.report_run_canceling(run, message="The run worker received a stop signal")


def _report_canceled(context: dg.OpExecutionContext, summary: RunSummary) -> None:
    """The stop is done and its positions committed: the run is CANCELED now (the hook ends it)."""
    run = context.instance.get_run_by_id(context.run_id)
    if run is None or run.status != dg.DagsterRunStatus.CANCELING:
        return
    epochs = ", ".join(f"{name} after epoch {p.epochs} of this run" for name, p in summary.sources.items())
    end_canceled(context, f"Stopped on request; positions committed ({epochs or 'no epoch ran'})")


@dg.success_hook(name="streamling_stopped_cleanly")
def stopped_cleanly(context: dg.HookContext) -> None:
    """Ends a run whose op stopped on request and marked it CANCELED. Dagster ends a run CANCELED (rather than
    SUCCESS) only when an interrupt leaves the execution plan; raised here, after the step succeeded, it adds
    no step failure, and the run, already CANCELED, gets no failure or traceback event either."""
    run = context.instance.get_run_by_id(context.run_id)
    if run is not None and run.status == dg.DagsterRunStatus.CANCELED:
        raise dg.DagsterExecutionInterruptedError("stopped on request")
