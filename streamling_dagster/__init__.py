"""The Dagster control plane for Streamling pipelines: `defs` is what `workspace.yaml` loads."""

from streamling_dagster.definitions import build_definitions

defs = build_definitions()

__all__ = ["build_definitions", "defs"]
