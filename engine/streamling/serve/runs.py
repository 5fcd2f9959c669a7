"""The pipelines a warm engine (`streamling serve`) runs side by side, each on a thread of its own.

A run gets its own `SparkSession.newSession()` of the engine's one SparkContext (its own SQL configuration, temp
views and data sources), its own settings (resolved by the submitter: its config file, ``STREAMLING__`` variables
and Dagster resource), its own stop flag and its own log: every engine log line is tagged with its run
(`RUN_SCOPE`) and kept for the submitter. A failing run ends alone. Positions live in each run's state backend, as
in a CLI run, so a run lost with the engine resumes where it committed when submitted again.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from streamling.errors import StreamlingError, first_line
from streamling.runtime.summary import RunSummary
from streamling.telemetry.logs import RUN_SCOPE

log = logging.getLogger("streamling.serve")

LOG_LINES_KEPT = 20_000
SESSION_CONF_PREFIXES = ("spark.sql.",)
"""A run's own ``spark.conf`` entries that its session can take; the rest belong to the engine's SparkContext."""

EXIT_CODES = {"succeeded": 0, "stopped": 0, "failed": 1, "invalid": 2}


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
    submitted_at: float = field(default_factory=time.time)
    state: str = "starting"
    error: str | None = None
    summary: RunSummary = field(default_factory=RunSummary)
    stop: threading.Event = field(default_factory=threading.Event)
    done: threading.Event = field(default_factory=threading.Event)
    logs: deque[str] = field(default_factory=lambda: deque(maxlen=LOG_LINES_KEPT))
    log_count: int = 0  # lines ever logged; logs holds the last LOG_LINES_KEPT of them
    lock: threading.Lock = field(default_factory=threading.Lock)

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
            "id": self.id,
            "pipeline": self.submission.pipeline,
            "state": self.state,
            "done": self.done.is_set(),
            "exit_code": EXIT_CODES.get(self.state),
            "error": self.error,
            "submitted_at": self.submitted_at,
            "summary": summary_view(self.summary),
            "logs": lines,
            "next_log": count,
        }


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
    """The engine's runs: started on submission, stopped on request or when the engine stops."""

    def __init__(self, spark: SparkSession) -> None:
        self.spark = spark
        self._runs: dict[str, Run] = {}
        self._lock = threading.Lock()
        self.closed = False

    def get(self, run_id: str) -> Run | None:
        with self._lock:
            return self._runs.get(run_id)

    def all(self) -> list[Run]:
        with self._lock:
            return list(self._runs.values())

    def submit(self, submission: Submission) -> Run:
        with self._lock:
            if self.closed:
                raise StreamlingError.user("the engine is stopping: it takes no new runs")
            run = Run(uuid.uuid4().hex[:12], submission)
            self._runs[run.id] = run
        thread = threading.Thread(target=self._execute, args=(run,), name=f"streamling-run-{run.id}", daemon=True)
        thread.start()
        return run

    def stop_all(self, timeout: float | None = None) -> bool:
        """Ask every run to stop (each finishes and commits its in-flight epoch) and wait for them."""
        with self._lock:
            self.closed = True
            runs = list(self._runs.values())
        for run in runs:
            run.stop.set()
        deadline = None if timeout is None else time.monotonic() + timeout
        return all(run.done.wait(None if deadline is None else max(0.0, deadline - time.monotonic())) for run in runs)

    def _execute(self, run: Run) -> None:
        from streamling.api import check_structure, execute_plan, prepare_pipeline, resolve_location
        from streamling.cli import log_summary
        from streamling.config.layers import settings_from_document

        scope = RUN_SCOPE.set(run.id)
        submission = run.submission
        try:
            log.info("run %s: %s submitted", run.id, submission.pipeline)
            try:
                settings = settings_from_document(submission.settings)
                location = resolve_location(submission.pipeline, settings)
                check_structure(location, settings)
                spark = self._session(settings.spark.conf, settings.spark.shuffle_partitions)
                plan = prepare_pipeline(Path(location), settings, spark)
            except StreamlingError as exc:
                run.error = exc.message
                run.state = "invalid" if exc.user_facing and not exc.retriable else "failed"
                log.error("run %s is invalid: %s", run.id, exc.message)
                return
            run.state = "running"
            summary = execute_plan(plan, settings, spark, run.stop, run.summary)
            log_summary(summary)
            run.state = "stopped" if summary.stopped_by_signal else "succeeded"
        except StreamlingError as exc:
            run.error, run.state = exc.message, "failed"
            log.error("run %s failed: %s", run.id, exc.message)
        except Exception as exc:  # an engine bug: this run fails, the engine and its other runs go on
            run.error, run.state = f"internal error: {first_line(exc)}", "failed"
            log.error("run %s failed: %s", run.id, run.error, exc_info=log.isEnabledFor(logging.DEBUG))
        finally:
            RUN_SCOPE.reset(scope)
            run.done.set()
            log.info("run %s: %s", run.id, run.state)

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
