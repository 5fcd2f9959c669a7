"""Streamling on Spark: YAML pipelines (sources → transforms → sinks) on Structured Streaming.

The names below are resolved on first use (PEP 562), so ``import streamling.errors`` or the plugin API
(``streamling.plugin``) never starts importing pyspark, psycopg or the executor.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from streamling.api import (
        SourceStatus,
        plan_pipeline,
        reset_positions,
        run_pipeline,
        source_status,
        spark_conf,
        start_spark_session,
        table_marks,
        validate_pipeline,
    )
    from streamling.clickhouse.client import release_embedded
    from streamling.clickhouse.marks import KeyMark
    from streamling.config import Settings, load_settings
    from streamling.engine_client import EngineClient, run_on_engine
    from streamling.errors import StreamlingError
    from streamling.runtime.summary import RunSummary
    from streamling.topology.pipeline import Node, Pipeline, ValidationReport, load_pipeline, read_pipeline_text


_HOMES = {
    "EngineClient": "streamling.engine_client",
    "KeyMark": "streamling.clickhouse.marks",
    "RunSummary": "streamling.runtime.summary",
    "Settings": "streamling.config",
    "SourceStatus": "streamling.api",
    "StreamlingError": "streamling.errors",
    "ValidationReport": "streamling.topology.pipeline",
    "load_pipeline": "streamling.topology.pipeline",
    "Node": "streamling.topology.pipeline",
    "Pipeline": "streamling.topology.pipeline",
    "read_pipeline_text": "streamling.topology.pipeline",
    "load_settings": "streamling.config",
    "plan_pipeline": "streamling.api",
    "release_embedded": "streamling.clickhouse.client",
    "reset_positions": "streamling.api",
    "run_on_engine": "streamling.engine_client",
    "run_pipeline": "streamling.api",
    "source_status": "streamling.api",
    "spark_conf": "streamling.api",
    "start_spark_session": "streamling.api",
    "table_marks": "streamling.api",
    "validate_pipeline": "streamling.api",
}

__all__ = [
    "EngineClient",
    "KeyMark",
    "Node",
    "Pipeline",
    "RunSummary",
    "Settings",
    "SourceStatus",
    "StreamlingError",
    "ValidationReport",
    "__version__",
    "load_pipeline",
    "load_settings",
    "plan_pipeline",
    "read_pipeline_text",
    "release_embedded",
    "reset_positions",
    "run_on_engine",
    "run_pipeline",
    "source_status",
    "spark_conf",
    "start_spark_session",
    "table_marks",
    "validate_pipeline",
]


def _version() -> str:
    """Asked of the installed metadata only when wanted: every Python process Spark starts imports this package,
    and `importlib.metadata` with its look-up cost each ~8 ms."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("streamling-spark")
    except PackageNotFoundError:  # running from a source tree without installation
        return "0.0.0+local"


def __getattr__(name: str) -> Any:
    if name == "__version__":
        value = globals()[name] = _version()
        return value
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'streamling' has no attribute {name!r}")
    value = getattr(import_module(home), name)
    globals()[name] = value
    return value
