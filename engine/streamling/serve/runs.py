"""The pipelines a warm engine (`streamling serve`) runs side by side, each on a thread of its own.

A run gets its own `SparkSession.newSession()` of the engine's one SparkContext (its own SQL configuration, temp
views and data sources), its own settings (resolved by the submitter: its config file, ``STREAMLING__`` variables
and Dagster resource; or the engine's own for a pipeline of its directory), its own stop flag, its own log (every
engine log line is tagged with its run, `RUN_SCOPE`, and kept for the submitter) and its pipeline's FAIR scheduler
pool. A failing run ends alone. Positions live in each run's state backend, as in a CLI run, so a run lost with the
engine resumes where it committed when submitted again.

Starting is what costs (settings, the pipeline's analysis on Spark, its sources opened): at most
``engine.max_starting_runs`` runs start at once and later submissions wait in state ``queued`` (saying so in their
log), so fifty submitted together all start, one pair after another and in the order they were submitted
(`admission.py`), instead of starving each other. A run leaves
``starting`` for ``running`` once every source's query started. A finished run's record is kept for
``engine.run_retention_sec``, then evicted; what it held in the engine's processes is released when it ends
(`core/held.py`).
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pyspark.sql import SparkSession

from streamling.core.held import HELD
from streamling.core.scope import RUN_SCOPE
from streamling.errors import StreamlingError, first_line
from streamling.runtime.summary import RunSummary
from streamling.serve.admission import Admission

if TYPE_CHECKING:
    from streamling.config import Settings
    from streamling.runtime.executor import PipelineRunner

log = logging.getLogger("streamling.serve")

LOG_LINES_KEPT = 20_000
SESSION_CONF_PREFIXES = ("spark.sql.",)
"""A run's own ``spark.conf`` entries that its session can take; the rest belong to the engine's SparkContext."""

EXIT_CODES = {"succeeded": 0, "stopped": 0, "failed": 1, "invalid": 2}
LIVE_STATES = ("queued", "starting", "running")
EVICT_EVERY_SEC = 10.0


@dataclass
class Submission:
    pipeline: str
    settings: dict[str, Any]
    """The run's whole settings (`settings_document`), as the submitter resolved them."""

    @classmethod
    def parse(cls, body: object) -> Submission:
        if not isinstance(body, dict) or not isinstance(body.get("pipeline"), str) or not body["pipeline"]:
            raise StreamlingError.user("a submission needs 'pipeline': the pipeline file's path on the engine's host")
        if not isinstance(body.get("settings"), dict):
            raise StreamlingError.user("a submission needs 'settings': the run's settings document")
        return cls(body["pipeline"], body["settings"])


@dataclass
class Run:
    id: str
    submission: Submission
    origin: str = "submitted"
    """``submitted`` over the API, or ``directory`` (a file of the engine's pipelines directory)."""
    submitted_at: float = field(default_factory=time.time)
    admitted_at: float | None = None
    """When it left the queue (state ``starting``)."""
    started_at: float | None = None
    """When every source's query had started (state ``running``)."""
    finished_at: float | None = None
    state: str = "queued"
    error: str | None = None
    summary: RunSummary = field(default_factory=RunSummary)
    stop: threading.Event = field(default_factory=threading.Event)
    done: threading.Event = field(default_factory=threading.Event)
    logs: deque[str] = field(default_factory=lambda: deque(maxlen=LOG_LINES_KEPT))
    log_count: int = 0  # lines ever logged; logs holds the last LOG_LINES_KEPT of them
    lock: threading.Lock = field(default_factory=threading.Lock)
    runner: PipelineRunner | None = None
    """The run's runner once its queries started (its live figures: positions, lag)."""
    positions: set[tuple[str, ...]] = field(default_factory=set)
    """Where its sources keep their positions: (state backend, application_id, source), once it is planned."""

    @property
    def name(self) -> str:
        return Path(self.submission.pipeline).stem

    def add_log(self, line: str) -> None:
        with self.lock:
            self.logs.append(line)
            self.log_count += 1

    def view(self, logs_from: int = 0) -> dict[str, Any]:
        with self.lock:
            first = self.log_count - len(self.logs)
            lines = list(self.logs)[max(0, logs_from - first) :]
            count = self.log_count
        return {
            **self.brief(),
            "summary": summary_view(self.summary),
            "logs": lines,
            "next_log": count,
        }

    def brief(self) -> dict[str, Any]:
        """What `GET /runs` lists: state, each source's committed position and lag, restarts and the last error."""
        return {
            "id": self.id,
            "pipeline": self.submission.pipeline,
            "name": self.name,
            "origin": self.origin,
            "state": self.state,
            "done": self.done.is_set(),
            "exit_code": EXIT_CODES.get(self.state),
            "error": self.error,
            "restarts": self.summary.restarts,
            "last_error": self.error or self.summary.last_error,
            "submitted_at": self.submitted_at,
            "admitted_at": self.admitted_at,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "sources": self.sources(),
        }

    def sources(self) -> dict[str, Any]:
        runner = self.runner
        stats = runner.telemetry.stats if runner is not None and runner.telemetry is not None else None
        out: dict[str, Any] = {}
        for name, progress in list(self.summary.sources.items()):
            live = stats.sources.get(name) if stats is not None else None
            backlog = live.backlog if live is not None else None
            out[name] = {
                "position": dict(progress.position),
                "epochs": progress.epochs,
                "rows_in": progress.rows_in,
                "lag": None if backlog is None else sum(backlog.values()),
                "lag_by_partition": backlog,
                "lag_at": live.backlog_at if live is not None else None,
                "caught_up": live.caught_up if live is not None else None,
                "epoch_ms": live.epoch_ms if live is not None else None,
                "committed_at": live.committed_at if live is not None else None,
            }
        return out


def summary_view(summary: RunSummary) -> dict[str, Any]:
    return {
        "sources": {
            name: {"epochs": p.epochs, "rows_in": p.rows_in, "position": dict(p.position)}
            for name, p in list(summary.sources.items())
        },
        "sink_rows": dict(summary.sink_rows),
        "sink_ops": {name: dict(ops) for name, ops in list(summary.sink_ops.items())},
        "duration_sec": summary.duration_sec,
        "stopped_by_signal": summary.stopped_by_signal,
        "restarts": summary.restarts,
        "last_error": summary.last_error,
    }


class RunLogHandler(logging.Handler):
    """Files each engine log line under the run it belongs to."""

    def __init__(self, runs: Runs) -> None:
        super().__init__()
        self.runs = runs

    def emit(self, record: logging.LogRecord) -> None:
        run_id = RUN_SCOPE.get()
        run = self.runs.get(run_id) if run_id else None
        if run is not None:
            run.add_log(self.format(record))


class Runs:
    """The engine's runs: queued on submission, started as admission allows, stopped on request or when the
    engine stops, evicted `retention_sec` after they ended."""

    def __init__(self, spark: SparkSession, max_starting: int = 2, retention_sec: float = 900.0) -> None:
        self.spark = spark
        self.retention_sec = retention_sec
        self._runs: dict[str, Run] = {}
        self._lock = threading.Lock()
        self.max_starting = max_starting
        self._admission = Admission(max_starting)
        self._evicted_at = time.monotonic()
        self.closed = False

    def get(self, run_id: str) -> Run | None:
        with self._lock:
            return self._runs.get(run_id)

    def all(self) -> list[Run]:
        self.evict()
        with self._lock:
            return list(self._runs.values())

    def submit(self, submission: Submission, origin: str = "submitted") -> Run:
        with self._lock:
            if self.closed:
                raise StreamlingError.user("the engine is stopping: it takes no new runs")
            run = Run(uuid.uuid4().hex[:12], submission, origin)
            self._runs[run.id] = run
            self._admission.line_up(run.stop)
        thread = threading.Thread(target=self._execute, args=(run,), name=f"streamling-run-{run.id}", daemon=True)
        thread.start()
        self.evict()
        return run

    def evict(self, now: float | None = None) -> list[str]:
        """Forget the runs that ended more than `retention_sec` ago (at most every few seconds)."""
        if now is None:
            if time.monotonic() - self._evicted_at < EVICT_EVERY_SEC:
                return []
            self._evicted_at = time.monotonic()
        cutoff = (time.time() if now is None else now) - self.retention_sec
        with self._lock:
            gone = [
                run_id
                for run_id, run in self._runs.items()
                if run.done.is_set() and run.finished_at is not None and run.finished_at < cutoff
            ]
            for run_id in gone:
                del self._runs[run_id]
        return gone

    def stop_all(self, timeout: float | None = None) -> bool:
        """Ask every run to stop (each finishes and commits its in-flight epoch) and wait for them."""
        with self._lock:
            self.closed = True
            runs = list(self._runs.values())
        for run in runs:
            run.stop.set()
        deadline = None if timeout is None else time.monotonic() + timeout
        return all(run.done.wait(None if deadline is None else max(0.0, deadline - time.monotonic())) for run in runs)

    def _admit(self, run: Run) -> bool:
        """Wait for a start slot, in submission order (state ``queued``); False when the run was stopped first."""

        def queued(waiting: int) -> None:
            log.info("run %s is queued: runs start %d at a time, %d waiting", run.id, self.max_starting, waiting)

        return self._admission.enter(run.stop, queued)

    def _execute(self, run: Run) -> None:
        from streamling.api import check_structure, execute_plan, prepare_pipeline, resolve_location
        from streamling.config.layers import settings_from_document

        scope = RUN_SCOPE.set(run.id)
        submission = run.submission
        admitted = False

        def running(runner: PipelineRunner) -> None:
            nonlocal admitted
            run.runner = runner
            if run.state != "running":
                run.state, run.started_at = "running", time.time()
                log.info("run %s is running", run.id)
            if admitted:
                admitted = False
                self._admission.leave()

        try:
            log.info("run %s: %s submitted", run.id, submission.pipeline)
            if not self._admit(run):
                run.state = "stopped"
                return
            admitted = True
            run.state, run.admitted_at = "starting", time.time()
            try:
                settings = settings_from_document(submission.settings)
                location = resolve_location(submission.pipeline, settings)
                check_structure(location, settings)
                spark = self._session(settings.spark.conf, settings.spark.shuffle_partitions)
                plan = prepare_pipeline(Path(location), settings, spark)
                self._claim_positions(run, settings, [node.name for node in plan.pipeline.sources])
            except StreamlingError as exc:
                run.error = exc.message
                run.state = "invalid" if exc.user_facing and not exc.retriable else "failed"
                log.error("run %s is invalid: %s", run.id, exc.message)
                return
            summary = execute_plan(plan, settings, spark, run.stop, run.summary, on_running=running)
            summary.log_to(logging.getLogger("streamling.cli"))  # the summary lines read as the CLI's, as they did
            run.state = "stopped" if summary.stopped_by_signal else "succeeded"
        except StreamlingError as exc:
            run.error, run.state = exc.message, "failed"
            log.error("run %s failed: %s", run.id, exc.message)
        except Exception as exc:  # an engine bug: this run fails, the engine and its other runs go on
            run.error, run.state = f"internal error: {first_line(exc)}", "failed"
            log.error("run %s failed: %s", run.id, run.error, exc_info=log.isEnabledFor(logging.DEBUG))
        finally:
            if admitted:
                self._admission.leave()
            closed = HELD.retire(run.id)
            log.debug("run %s: %d clients closed", run.id, closed)
            RUN_SCOPE.reset(scope)
            run.finished_at = time.time()
            run.done.set()
            log.info("run %s: %s", run.id, run.state)

    def _claim_positions(self, run: Run, settings: Settings, sources: list[str]) -> None:
        """Refuse a run whose sources would keep their positions where a live run of another pipeline keeps its own:
        positions are kept per source name within an application_id, so two pipelines submitted with one settings
        document, each with a source called ``src``, would read and commit each other's positions. (Two runs of one
        pipeline are kept apart by its lease.)"""
        backend = settings.state_backend
        where = (
            backend.backend_type,
            backend.sqlite.database_path if backend.backend_type == "Sqlite" else "",
            f"{backend.postgres.host}:{backend.postgres.port}/{backend.postgres.database}"
            if backend.backend_type == "Postgres"
            else "",
        )
        wanted = {(*where, settings.application_id, source) for source in sources}
        if backend.backend_type == "InMemory":
            wanted = {(*key, run.id) for key in wanted}  # each run's own process memory: nothing shared
        with self._lock:
            for other in self._runs.values():
                if other is run or other.done.is_set() or other.name == run.name:
                    continue
                shared = sorted(key[4] for key in wanted & other.positions)
                if shared:
                    raise StreamlingError.user(
                        f"pipeline '{run.name}' keeps the positions of source(s) {', '.join(repr(s) for s in shared)} "
                        f"where running pipeline '{other.name}' (run {other.id}) keeps its own (application_id "
                        f"'{settings.application_id}' in the same state backend): the two would read and commit each "
                        "other's positions; give each pipeline its own application_id"
                    )
            run.positions = wanted

    def _session(self, conf: dict[str, str], shuffle_partitions: int) -> SparkSession:
        spark = self.spark.newSession()
        spark.conf.set("spark.sql.shuffle.partitions", str(shuffle_partitions))
        ignored = []
        for key, value in conf.items():
            if key.startswith(SESSION_CONF_PREFIXES):
                spark.conf.set(key, value)
            else:
                ignored.append(key)
        if ignored:
            log.warning(
                "spark.conf %s: set on the engine (`streamling serve`), not per run; ignored for this run",
                ", ".join(sorted(ignored)),
            )
        return spark
