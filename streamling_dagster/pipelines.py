"""Finding pipeline files and reading them without Spark, so one broken file never breaks the others."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from streamling.topology.pipeline import Node, Pipeline, load_pipeline

PIPELINES_ENV = "STREAMLING_DAGSTER_PIPELINES"
DEFAULT_DIRECTORY = Path(__file__).resolve().parent.parent / "pipelines"


@dataclass
class PipelineFile:
    name: str
    path: Path
    text: str
    pipeline: Pipeline | None
    errors: list[str] = field(default_factory=list)
    backfill_errors: list[str] = field(default_factory=list)
    """Why the pipeline cannot run in job mode (no bounded sources), empty when it can."""

    @property
    def can_backfill(self) -> bool:
        return self.pipeline is not None and not self.backfill_errors

    def node_yaml(self, node: Node) -> str:
        """The node's own definition as the user wrote it (for asset descriptions)."""
        body = node.spec.model_dump(by_alias=True, exclude_none=True, exclude_defaults=True)
        lines = [f"{node.name}:"] + [f"  {key}: {value}" for key, value in body.items()]
        return "\n".join(lines)


def pipelines_directory() -> Path:
    return Path(os.environ.get(PIPELINES_ENV) or DEFAULT_DIRECTORY)


def asset_name(text: str) -> str:
    """Dagster names allow letters, digits and underscores only."""
    return re.sub(r"[^A-Za-z0-9_]", "_", text)


def discover(directory: Path) -> list[PipelineFile]:
    found = []
    for path in sorted([*directory.glob("*.yaml"), *directory.glob("*.yml")]):
        text = path.read_text(encoding="utf-8")
        pipeline, report = load_pipeline(text, name=path.stem, path=path)
        backfill_errors: list[str] = []
        if pipeline is not None:
            _, job_report = load_pipeline(text, name=path.stem, path=path, job_mode=True)
            backfill_errors = job_report.errors
        found.append(PipelineFile(asset_name(path.stem), path, text, pipeline, report.errors, backfill_errors))
    return found
