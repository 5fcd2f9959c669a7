"""The run: initialise operators, start one query driver per source (`runtime/queries.py`), supervise them.

Each driver turns its source's reads into epochs: it evaluates the downstream DAG on the epoch and lets every sink
`stage` its write; the source's committer thread then finishes the epoch (`runtime/epoch_commit.py`) while Spark
computes the next one. A failure anywhere fails the pipeline before the commit, so the epoch is replayed on
restart: at-least-once. Sinks that report their last applied epoch (`Sink.applied_epoch`) get that epoch replayed
with identical bounds so they can skip it (`PipelineRunner.replay_end`).

Restarts resume from the state backend, the only source of truth for positions, also within a run: a failure that
is not the user's own restarts the run's queries from their last committed epochs (`runtime/restarts.py`). A run
holds its pipeline's lease (`runtime/lease.py`) from before it touches anything until it has cleaned up, also
across its restarts, and checks it before each commit, so two runs never write one pipeline's positions.

A run's Spark jobs go to the FAIR scheduler pool of its pipeline (`scheduler_pool`), so in an engine hosting many
runs a backfill's tasks do not hold back a trickling pipeline's, and each source's jobs form a job group that a hard
stop cancels.
"""

from __future__ import annotations

import json
import logging
import signal
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from pyspark.sql import SparkSession

from streamling.config import Settings
from streamling.core.held import PROCESS, RUN_PROPERTY
from streamling.core.scope import RUN_SCOPE
from streamling.errors import StreamlingError, error_context, first_line, wrap
from streamling.operators import RunContext, Sink, Source, Written, rows_of
from streamling.runtime.lease import RunLease
from streamling.runtime.plan import Plan
from streamling.runtime.protocols import QueryDriver
from streamling.runtime.queries import SHUTDOWN_GRACE_SEC, PhasedQuery, SourceQuery
from streamling.runtime.restarts import Restarts
from streamling.runtime.summary import RunSummary, SourceProgress
from streamling.state import Fence, StateBackend, epoch_key
from streamling.telemetry.run import RunTelemetry

log = logging.getLogger("streamling.runtime")
IDLE_CHECK_SEC = 1.0
SUPERVISE_SEC = 0.25
"""The supervisor's longest sleep between looks at its queries. A query wakes it at once when its thread ends or an
epoch's commit finishes (`PipelineRunner.wake`), so this bounds only the reaction to an outside stop request and
the lease check; it used to look every 50 ms, twenty wake-ups a second per run, a third of an idle engine's driver
CPU (py-spy, fifty idle runs: 210 of 582 samples in the supervisor's loop)."""

__all__ = ["PipelineRunner", "RunSummary", "SourceProgress"]


class PipelineRunner:
    def __init__(
        self,
        plan: Plan,
        settings: Settings,
        spark: SparkSession,
        state: StateBackend,
        stop: threading.Event | None = None,
        summary: RunSummary | None = None,
        on_running: Callable[[PipelineRunner], None] | None = None,
    ) -> None:
        self.plan = plan
        self.on_running = on_running
        """Called each time every source's query has started (after a restart too): the engine's admission."""
        self.settings = settings
        self.spark = spark
        self.state = state
        self.summary = summary or RunSummary()
        self.run_id = uuid.uuid4().hex[:16]
        self.lease: RunLease | None = None
        self._stop = stop or threading.Event()
        self._tick = threading.Event()
        self.restarts = Restarts(settings.restart_strategy, "the run", self._stop, self._restarted)
        self.telemetry: RunTelemetry | None = None
        """The run's telemetry, from `run` on (its admin API lives as long as the run)."""
        self._rows_lock = threading.Lock()
        self._limit_reached = False
        """`num_records_before_stop` was reached: the stop is the run's own, not a signal's."""

    def count_sink_rows(self, sink: str, written: Written | int) -> None:
        """Add one epoch's deferred-write result to the summary: rows always, operations for a `Written`.

        With ``num_records_before_stop``, the first sink to reach that many rows requests a graceful stop: the
        epoch being finished still commits (so does one Spark had already handed over), nothing after it runs."""
        with self._rows_lock:
            self.summary.sink_rows[sink] = total = self.summary.sink_rows.get(sink, 0) + rows_of(written)
            if isinstance(written, Written):
                ops = self.summary.sink_ops.setdefault(sink, Written().as_dict())
                for op, count in written.as_dict().items():
                    ops[op] += count
            limit = self._stop_limit(sink)
            if limit is None or total < limit or self._limit_reached:
                return
            self._limit_reached = True
        log.info("Stopping after %d records (sink '%s' wrote %d)", limit, sink, total)
        self._stop.set()
        self._tick.set()

    def _stop_limit(self, sink: str) -> int | None:
        """The sink's own ``num_records_before_stop`` (the original's print-sink field: a field of its YAML, or an
        option of an Arrow-level sink's, as the print sink's is), else the setting, else for a print sink
        ``print_sink.num_records_before_stop`` (the original's print-sink setting)."""
        spec = getattr(self.plan.operators.get(sink), "spec", None)
        own = getattr(spec, "num_records_before_stop", None) or getattr(
            getattr(spec, "options", None), "num_records_before_stop", None
        )
        limit = own or self.settings.num_records_before_stop
        if limit is None and getattr(spec, "type", None) in ("print", "print_sink"):
            limit = self.settings.print_sink.num_records_before_stop
        return limit

    def check_lease(self) -> None:
        """Raise once this run may no longer hold its pipeline's lease (before a commit, and while supervising)."""
        if self.lease is not None:
            self.lease.check()

    def fence(self) -> Fence | None:
        return self.lease.fence if self.lease is not None else None

    def request_stop(self) -> None:
        """Stop taking new data; the in-flight epoch finishes and commits. Safe from any thread."""
        self._stop.set()
        self._tick.set()

    def wake(self) -> None:
        """Have the supervisor look at the queries now (a query's thread ended, an epoch's commit finished)."""
        self._tick.set()

    def run(self) -> RunSummary:
        started = time.monotonic()
        self.telemetry = telemetry = RunTelemetry(self.settings, self.plan, self.spark)
        pipeline = self.plan.pipeline
        self.restarts.what = f"pipeline '{pipeline.name}'"
        self.lease = RunLease(
            self.state, pipeline.name, pipeline.path, self.settings.state_backend.lease_ttl_sec, self.run_id
        )
        telemetry.open()
        restore = _install_signal_handlers(self.request_stop)
        failure: str | None = None
        try:
            if not self.lease.acquire(self._stop):  # stopped while waiting for another run's lease
                self.summary.stopped_by_signal = True
                return self.summary
            self.restarts.run(self._attempt)
            self.summary.stopped_by_signal = self._stop.is_set() and not self._limit_reached
            return self.summary
        except BaseException as exc:
            failure = first_line(exc)
            raise
        finally:  # last, whatever happened: the next run may start from here on
            self.lease.release()
            restore()
            telemetry.close(failure)
            self.summary.duration_sec = time.monotonic() - started

    def _restarted(self, failure: BaseException) -> None:
        """Before a restart's backoff: count it; the next attempt runs a fresh plan (`_attempt`)."""
        assert self.telemetry is not None
        self.telemetry.restarted(first_line(failure))
        self.summary.restarts += 1
        self.summary.last_error = first_line(failure)
        self._renew = True

    _renew = False

    def _attempt(self) -> None:
        """One attempt of the run: initialise the operators, start a query per source, supervise them until they
        end; always stop and terminate what was started. A restart's attempt runs a fresh plan."""
        if self._stop.is_set():  # stopped during a restart's backoff
            return
        if self._renew:
            self.plan = self.plan.renewed(self.spark)
            self._renew = False
        assert self.telemetry is not None
        telemetry = self.telemetry
        ctx = RunContext(self.settings, self.state, self.spark, telemetry)
        queries: list[QueryDriver] = []
        initialized = []
        try:
            for op in self.plan.operators.values():
                began = time.monotonic()
                with error_context(op.label):
                    op.initialize(ctx)
                initialized.append(op)
                log.debug("%s initialized in %.3f s", op.label, time.monotonic() - began)
            positions: dict[str, dict[str, Any]] = {}
            for source_node in self.plan.pipeline.sources:
                source = self.plan.source(source_node.name)
                phases = source.phases()
                if phases is not None:
                    phased = PhasedQuery(self, source, phases)
                    queries.append(phased)
                    phased.start(self.spark)
                    positions[source.name] = dict(phased.current.position) if phased.current else {}
                    continue
                start = source.load_position(self.state)
                saved_epoch = self.state.get(epoch_key(source.name)) or {}
                query = SourceQuery(self, source, start, int(saved_epoch.get("epoch", 0)))
                queries.append(query)
                positions[source.name] = dict(start)
                if query.exhausted:
                    log.info("%s has nothing after position %s; not started", source.label, start)
                    continue
                query.start(self.spark, self.replay_end(source, start, query.epoch))
            telemetry.running(positions)
            if self.on_running is not None:
                self.on_running(self)
            self._supervise(queries)
        finally:
            for query in queries:
                query.request_stop()
            for query in queries:
                query.stop()
            for query in queries:
                query.close()
            for op in reversed(initialized):
                try:
                    op.terminate()
                except Exception as exc:  # keep shutting the others down
                    log.warning("%s: terminate failed: %s", op.label, exc)

    def _supervise(self, queries: list[QueryDriver]) -> None:
        assert self.telemetry is not None
        telemetry = self.telemetry
        grace_deadline: float | None = None
        looked = 0.0
        while True:
            self.check_lease()
            if time.monotonic() - looked >= IDLE_CHECK_SEC:  # for readiness: which sources found nothing to read
                looked = time.monotonic()
                for query in queries:
                    telemetry.caught_up(query.source.name, query.caught_up())
            for query in queries:
                query.poll()
                error = query.failure()
                if error is not None:
                    for other in queries:
                        other.request_stop()
                    raise _as_streamling_error(error, query.source.label)
                if query.exhausted and query.idle():
                    query.stop()
            if self._stop.is_set():
                if grace_deadline is None:
                    log.info("Stop requested: finishing the in-flight epoch, then stopping")
                    grace_deadline = time.monotonic() + SHUTDOWN_GRACE_SEC
                    for query in queries:
                        query.request_stop()
                for query in queries:
                    if query.idle() or time.monotonic() > grace_deadline:
                        query.stop()
            if not any(q.active() for q in queries):
                for query in queries:
                    error = query.failure()
                    if error is not None:
                        raise _as_streamling_error(error, query.source.label)
                return
            if grace_deadline is not None:
                time.sleep(0.05)  # draining: look often until every query is idle
            else:
                self._tick.wait(SUPERVISE_SEC)
                self._tick.clear()

    def replay_end(self, source: Source, start: dict[str, Any], committed: int) -> dict[str, Any] | None:
        """Where the first epoch must end so that sinks which applied the next epoch before a crash (but
        whose positions never reached the state backend) see exactly that epoch again and skip it."""
        ends: list[dict[str, Any]] = []
        for name in self.plan.sinks_of(source.name):
            sink = self.plan.operators[name]
            assert isinstance(sink, Sink)
            with error_context(sink.label):
                applied = sink.applied_epoch(source.name)
            if applied is None or applied.id <= committed:
                continue
            if applied.id == committed + 1 and _same(applied.start, start):
                ends.append(dict(applied.end))
                continue
            log.warning(
                "%s: recorded epoch %d of %s (from %s) does not follow the state backend's epoch %d at %s; "
                "the state was reset or belongs to another run, so replayed rows are applied again",
                sink.label,
                applied.id,
                source.label,
                applied.start,
                committed,
                start,
            )
        if not ends:
            return None
        if any(not _same(end, ends[0]) for end in ends[1:]):
            log.warning("%s: sinks recorded different ends for epoch %d: %s", source.label, committed + 1, ends)
        return ends[0]

    @property
    def scheduler_pool(self) -> str:
        """The FAIR scheduler pool of the run's Spark jobs: one per pipeline (a pipeline runs once at a time)."""
        return f"{self.settings.application_id}/{self.plan.pipeline.name}"

    def bind_thread(self, spark: SparkSession, source: str) -> None:
        sc = spark.sparkContext
        sc.setLocalProperty("spark.scheduler.pool", self.scheduler_pool)
        sc.setLocalProperty(RUN_PROPERTY, RUN_SCOPE.get() or PROCESS)
        sc.setJobGroup(self._job_group(source), f"{self.scheduler_pool} {source}", interruptOnCancel=True)
        # Spark names jobs by their call site; given, it no longer walks and formats the stack for every job.
        sc.setLocalProperty("callSite.short", f"{self.plan.pipeline.name}:{source}")
        sc.setLocalProperty("callSite.long", f"pipeline {self.plan.pipeline.name}, source {source}")

    def cancel_jobs(self, spark: SparkSession, source: str) -> None:
        spark.sparkContext.cancelJobGroup(self._job_group(source))

    def _job_group(self, source: str) -> str:
        return f"streamling-{self.run_id}-{source}"


def _as_streamling_error(error: BaseException, where: str) -> StreamlingError:
    if isinstance(error, StreamlingError):
        return error
    return wrap(error, where)


def _same(a: Any, b: Any) -> bool:
    return json.dumps(a, sort_keys=True, default=str) == json.dumps(b, sort_keys=True, default=str)


def _install_signal_handlers(on_stop: Callable[[], None]) -> Callable[[], None]:
    """SIGTERM/SIGINT request a graceful stop; only possible from the main thread."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}

    def handle(signum: int, _frame: object) -> None:
        log.info("Received %s", signal.Signals(signum).name)
        on_stop()

    for sig in previous:
        signal.signal(sig, handle)

    def restore() -> None:
        for sig, handler in previous.items():
            signal.signal(sig, handler)

    return restore
