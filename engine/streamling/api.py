"""The engine's Python API: validate and run pipelines. The CLI and the Dagster control plane use
these functions and nothing below them."""

from __future__ import annotations

import threading
from pathlib import Path

from pyspark.sql import SparkSession

from streamling.config import Settings, load_settings
from streamling.errors import InvalidPipelineError, StreamlingError
from streamling.runtime.executor import PipelineRunner, RunSummary
from streamling.runtime.plan import Plan
from streamling.runtime.session import build_session
from streamling.state import open_state_backend
from streamling.topology.pipeline import Pipeline, ValidationReport, load_pipeline, read_pipeline_text


def resolve_location(location: str | Path | None, settings: Settings) -> Path:
    chosen = location or settings.pipeline_definition_location
    if not chosen:
        raise StreamlingError.user(
            "no pipeline given: pass PIPELINE_FILE or set STREAMLING__PIPELINE_DEFINITION_LOCATION"
        )
    return Path(chosen)


def plan_pipeline(
    location: str | Path, settings: Settings, spark: SparkSession | None = None
) -> tuple[Plan | None, ValidationReport]:
    """Validate a pipeline file fully (structure, then SQL and schemas on Spark) and build its plan.

    Spark is started only when the structure is valid, so most mistakes are reported in well under a
    second. Nothing is written and no sink is contacted.
    """
    path = Path(location)
    text = read_pipeline_text(path)
    pipeline, report = load_pipeline(text, name=path.stem, path=path, job_mode=settings.job_mode)
    if pipeline is None:
        return None, report
    return analyze(pipeline, settings, spark, report)


def analyze(
    pipeline: Pipeline, settings: Settings, spark: SparkSession | None, report: ValidationReport
) -> tuple[Plan | None, ValidationReport]:
    plan = Plan(pipeline, settings)
    report.errors += plan.analyze(spark or build_session(settings.spark))
    return (plan if report.is_valid else None), report


def validate_pipeline(
    location: str | Path, settings: Settings | None = None, spark: SparkSession | None = None
) -> ValidationReport:
    return plan_pipeline(location, settings or load_settings(), spark)[1]


def prepare_pipeline(location: str | Path | None, settings: Settings, spark: SparkSession) -> Plan:
    """A validated plan, or InvalidPipelineError listing every problem."""
    path = resolve_location(location, settings)
    plan, report = plan_pipeline(path, settings, spark)
    if plan is None:
        raise InvalidPipelineError(invalid_pipeline_message(path, report), report.errors)
    return plan


def execute_plan(
    plan: Plan, settings: Settings, spark: SparkSession, stop: threading.Event | None = None
) -> RunSummary:
    with open_state_backend(settings.state_backend, settings.application_id) as state:
        return PipelineRunner(plan, settings, spark, state, stop=stop).run()


def run_pipeline(
    location: str | Path | None = None,
    settings: Settings | None = None,
    spark: SparkSession | None = None,
    stop: threading.Event | None = None,
) -> RunSummary:
    """Run until every source is exhausted (always the case in job mode), SIGTERM/SIGINT, or `stop` is set
    (from any thread; the in-flight epoch then finishes and commits, as on SIGTERM)."""
    settings = settings or load_settings()
    resolve_location(location, settings)  # fail before starting Spark when nothing is given
    spark = spark or build_session(settings.spark)
    return execute_plan(prepare_pipeline(location, settings, spark), settings, spark, stop)


def invalid_pipeline_message(path: Path, report: ValidationReport) -> str:
    lines = "\n".join(f"  - {error}" for error in report.errors)
    return f"pipeline '{path}' is invalid:\n{lines}"
