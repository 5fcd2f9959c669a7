"""The engine's Python API: validate and run pipelines. The CLI and the Dagster control plane use
these functions and nothing below them."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from streamling.config import Settings, load_settings
from streamling.config.layers import resolve_location
from streamling.config.model import SparkSettings
from streamling.errors import InvalidPipelineError, StreamlingError
from streamling.runtime.summary import RunSummary
from streamling.state import epoch_key, open_state_backend, phase_key
from streamling.topology.pipeline import Pipeline, ValidationReport, load_pipeline, read_pipeline_text

if TYPE_CHECKING:  # the control plane imports this module to ask for positions, which needs no Spark
    from pyspark.sql import SparkSession

    from streamling.clickhouse.marks import KeyMark
    from streamling.runtime.executor import PipelineRunner
    from streamling.runtime.plan import Plan

log = logging.getLogger("streamling.api")


Starting = "SparkSession | Future[SparkSession] | None"
"""A session, one still starting (`spark/session.start_session`), or none (one is built when needed)."""


def plan_pipeline(
    location: str | Path, settings: Settings, spark: Starting = None
) -> tuple[Plan | None, ValidationReport]:
    """Validate a pipeline file fully (structure, then SQL and schemas on Spark) and build its plan.

    Spark is waited for (or started) only when the structure is valid, so most mistakes are reported in well
    under a second; the operators' Spark-free lookups (`Operator.prefetch`) run before that wait. Nothing is
    written and no sink is contacted.
    """
    path = Path(location)
    text = read_pipeline_text(path)
    pipeline, report = load_pipeline(text, name=path.stem, path=path, job_mode=settings.job_mode, settings=settings)
    if pipeline is None:
        return None, report
    return analyze(pipeline, settings, spark, report)


def check_structure(location: str | Path, settings: Settings) -> Pipeline:
    """The structural validation alone (no Spark): the pipeline, or InvalidPipelineError listing every problem."""
    path = Path(location)
    pipeline, report = load_pipeline(
        read_pipeline_text(path), name=path.stem, path=path, job_mode=settings.job_mode, settings=settings
    )
    if pipeline is None:
        raise InvalidPipelineError(invalid_pipeline_message(path, report), report.errors)
    return pipeline


def analyze(
    pipeline: Pipeline, settings: Settings, spark: Starting, report: ValidationReport
) -> tuple[Plan | None, ValidationReport]:
    from streamling.runtime.plan import Plan
    from streamling.spark.session import build_session
    from streamling.spark.shipping import ship_plugins

    plan = Plan(pipeline, settings)
    plan.prefetch()
    spark = spark.result() if isinstance(spark, Future) else spark or build_session(settings.spark)
    ship_plugins(spark)
    report.errors += plan.analyze(spark)
    report.warnings += plan.warnings + plan.key_warnings
    return (plan if report.is_valid else None), report


def validate_pipeline(
    location: str | Path, settings: Settings | None = None, spark: Starting = None
) -> ValidationReport:
    return plan_pipeline(location, settings or load_settings(), spark)[1]


def prepare_pipeline(location: str | Path | None, settings: Settings, spark: Starting) -> Plan:
    """A validated plan, or InvalidPipelineError listing every problem."""
    path = resolve_location(location, settings)
    plan, report = plan_pipeline(path, settings, spark)
    if plan is None:
        raise InvalidPipelineError(invalid_pipeline_message(path, report), report.errors)
    for warning in report.warnings:
        log.warning("%s", warning)
    return plan


def execute_plan(
    plan: Plan,
    settings: Settings,
    spark: SparkSession,
    stop: threading.Event | None = None,
    summary: RunSummary | None = None,
    on_running: Callable[[PipelineRunner], None] | None = None,
) -> RunSummary:
    """Run a prepared plan; `on_running` is called once every source's query started (and after each restart)."""
    from streamling.runtime.executor import PipelineRunner

    with open_state_backend(settings.state_backend, settings.application_id) as state:
        return PipelineRunner(plan, settings, spark, state, stop=stop, summary=summary, on_running=on_running).run()


def run_pipeline(
    location: str | Path | None = None,
    settings: Settings | None = None,
    spark: SparkSession | None = None,
    stop: threading.Event | None = None,
    summary: RunSummary | None = None,
) -> RunSummary:
    """Run until every source is exhausted (always the case in job mode), SIGTERM/SIGINT, or `stop` is set
    (from any thread; the in-flight epoch then finishes and commits, as on SIGTERM). A given `summary` is
    updated live as epochs commit, for progress reporting from another thread."""
    settings = settings or load_settings()
    resolve_location(location, settings)  # fail before starting Spark when nothing is given
    if spark is None:
        from streamling.spark.session import build_session

        spark = build_session(settings.spark)
    return execute_plan(prepare_pipeline(location, settings, spark), settings, spark, stop, summary)


def spark_conf(settings: SparkSettings, resolve_archive: bool = True) -> dict[str, str]:
    """The engine's whole Spark configuration for `settings` (master and app name included), for a caller that
    holds the session itself. Without `resolve_archive` (a configuration to show, not to start), the packed
    environment's archive is named as set rather than built or checked. Imports no Spark."""
    from streamling.spark.conf import session_conf

    return session_conf(settings, resolve_archive=resolve_archive)


def start_spark_session(conf: Mapping[str, Any]) -> SparkSession:
    """A Spark session started as the CLI starts its own, from `conf` (a whole Spark configuration, e.g.
    `spark_conf` plus a caller's secrets; values as the session builder takes them: ``True`` is ``"true"``, a
    ``None`` is left out): the driver's JVM out of the caller's process group, the engine's finishing (quiet logs,
    the workers' warm-up, the package on a cluster) and the loaded plugins shipped to Spark's Python workers."""
    from pyspark.sql.utils import to_str

    from streamling.spark.session import session_from_conf
    from streamling.spark.shipping import ship_plugins

    spark = session_from_conf({key: str(to_str(value)) for key, value in conf.items() if value is not None})
    ship_plugins(spark)
    return spark


def invalid_pipeline_message(path: Path, report: ValidationReport) -> str:
    lines = "\n".join(f"  - {error}" for error in report.errors)
    return f"pipeline '{path}' is invalid:\n{lines}"


@dataclass
class SourceStatus:
    """Where a source stands according to the state backend, and how much is waiting after that."""

    position: dict[str, Any] | None
    """The committed position the source resumes from; None before the first commit."""
    last_epoch: int | None
    """The last epoch whose positions were committed; None before the first commit."""
    updated_at_ms: int | None
    backlog: dict[str, int] | None
    """Records after `position` (or the configured start) per partition (Kafka: lag to the high watermark);
    None when the source cannot tell."""
    phase: int | None = None
    """For phased (hybrid) sources: the index of the current phase."""

    @property
    def backlog_total(self) -> int | None:
        return None if self.backlog is None else sum(self.backlog.values())


def source_status(location: str | Path, settings: Settings) -> dict[str, SourceStatus]:
    """Each source's committed position, last epoch and backlog, read from the state backend and, for the
    backlog, the source's metadata (Kafka high watermarks) — without Spark, without reading data."""
    path = Path(location)
    pipeline, report = load_pipeline(
        read_pipeline_text(path), name=path.stem, path=path, job_mode=False, settings=settings
    )
    if pipeline is None:
        raise InvalidPipelineError(invalid_pipeline_message(path, report), report.errors)
    from streamling.runtime.plan import Plan

    plan = Plan(pipeline, settings)
    out: dict[str, SourceStatus] = {}
    with open_state_backend(settings.state_backend, settings.application_id) as state:
        for node in pipeline.sources:
            source = top = plan.source(node.name)
            phases, index = source.phases(), None
            if phases:
                index = min(int((state.get(phase_key(node.name)) or {}).get("phase", 0)), len(phases) - 1)
                source = phases[index]
            epoch = state.get(epoch_key(node.name)) or {}
            position = source.committed_position(state)
            try:
                backlog = source.backlog(position)
            finally:
                top.terminate()
            out[node.name] = SourceStatus(position, epoch.get("epoch"), epoch.get("updated_at"), backlog, index)
    return out


def reset_positions(location: str | Path, settings: Settings, streams: bool = False) -> list[str]:
    """Make the next job-mode run in namespace `settings.application_id` read every bounded source from its
    start (or its `backfill_range`'s start): their committed positions are removed, a hybrid source goes back
    to its first phase. With `streams`, unbounded sources (Kafka) start over too, from `starting_offsets`.
    Kept: each source's epoch counter (sinks' progress tables number on, so no new epoch is mistaken for one
    they applied) and a hybrid's stream offsets (its stream goes on where it was). Returns the keys removed or
    reset. This is the only way a changed starting point is honoured: a run resumes from committed positions."""
    path = Path(location)
    pipeline, report = load_pipeline(
        read_pipeline_text(path), name=path.stem, path=path, job_mode=False, settings=settings
    )
    if pipeline is None:
        raise InvalidPipelineError(invalid_pipeline_message(path, report), report.errors)
    from streamling.runtime.plan import Plan

    plan = Plan(pipeline, settings)
    removed: list[str] = []
    with open_state_backend(settings.state_backend, settings.application_id) as state:
        for node in pipeline.sources:
            if not node.spec.bounded and not streams:
                continue
            source = plan.source(node.name)
            try:
                removed += source.reset_position(state)
            finally:
                source.terminate()
    log.info("Positions reset in namespace %s: %s", settings.application_id, ", ".join(removed) or "none saved")
    return removed


def table_marks(
    settings: Settings,
    tables: Sequence[tuple[str, str]],
    recorded: Mapping[str, str | None] | None = None,
    where: str = "clickhouse_source",
    checking: Callable[[str], None] | None = None,
) -> list[KeyMark]:
    """How far each ClickHouse table (``(database, table)`` on `settings.clickhouse_source`) has grown for a backfill:
    the largest value of its first sort-key column, and whether it is beyond `recorded` (by `KeyMark.component`) in
    ClickHouse's own order. What the Dagster backfill sensor watches, answered by the engine so the control plane
    builds no ClickHouse SQL: the warm engine reads the tables when `engine_url` is set and they are embedded (its
    runs hold the data path), else this process does, with a client it closes. `checking` is told each table before
    it is read, `where` names the caller in messages. Failures are StreamlingErrors without credentials.

    The ClickHouse modules are imported here, when called: ``import streamling`` stays free of the driver.
    An engine that cannot be reached does not hold the data path: then the tables are read here too."""
    from streamling.clickhouse.client import redact
    from streamling.clickhouse.marks import KeyMark, read_marks
    from streamling.core.redaction import redact_url
    from streamling.engine_client import EngineClient
    from streamling.errors import first_line

    targets, known = list(tables), dict(recorded or {})
    if settings.engine_url and not settings.clickhouse_source.url:
        try:
            with EngineClient.for_settings(settings) as engine:
                return [KeyMark(**mark) for mark in engine.key_marks(settings, targets, known)]
        except StreamlingError as exc:
            if exc.user_facing:
                raise StreamlingError.user(redact(exc.message, settings.clickhouse_source)) from None
        except Exception as exc:
            # Not a failure to reach the engine but a bad `engine_url` (a port out of range) or an answer this
            # version cannot read (another engine version's marks, a body that is not JSON). The Dagster sensor
            # catches StreamlingErrors only: anything else would fail its tick rather than skip it.
            failure = f"{type(exc).__name__}: {first_line(exc)}"
            text = f"{where}: the table marks from the engine at {redact_url(settings.engine_url)}: {failure}"
            raise StreamlingError.retry(redact(text, settings.clickhouse_source)) from None
    return read_marks(settings, targets, known, where, checking or (lambda _: None))
