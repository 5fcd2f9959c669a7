"""Streamling on Spark: YAML pipelines (sources → transforms → sinks) on Structured Streaming."""

from importlib.metadata import PackageNotFoundError, version

from streamling.api import (
    SourceStatus,
    plan_pipeline,
    reset_positions,
    run_pipeline,
    source_status,
    validate_pipeline,
)
from streamling.config import Settings, load_settings
from streamling.errors import StreamlingError
from streamling.runtime.executor import RunSummary
from streamling.topology.pipeline import ValidationReport, load_pipeline

try:
    __version__ = version("streamling-spark")
except PackageNotFoundError:  # running from a source tree without installation
    __version__ = "0.0.0+local"

__all__ = [
    "RunSummary",
    "Settings",
    "SourceStatus",
    "StreamlingError",
    "ValidationReport",
    "__version__",
    "load_pipeline",
    "load_settings",
    "plan_pipeline",
    "reset_positions",
    "run_pipeline",
    "source_status",
    "validate_pipeline",
]
