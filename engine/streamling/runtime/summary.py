"""What a run reports: per-source progress and per-sink rows; the CLI logs it, Dagster records it as metadata."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class SourceProgress:
    epochs: int = 0
    rows_in: int = 0
    position: dict[str, Any] = field(default_factory=dict)


@dataclass
class RunSummary:
    """What a run did; the CLI logs it and the Dagster control plane records it as metadata.

    `sink_rows` holds every sink's rows written in this run. `sink_ops` breaks them down for the sinks that
    report operations (`Written`; see `Sink.stage`): ``{"inserts": …, "updates": …, "deletes": …, "unchanged": …}``,
    all four keys present and adding up to that sink's `sink_rows`. Sinks that report only a count are absent there."""

    sources: dict[str, SourceProgress] = field(default_factory=dict)
    sink_rows: dict[str, int] = field(default_factory=dict)
    sink_ops: dict[str, dict[str, int]] = field(default_factory=dict)
    duration_sec: float = 0.0
    stopped_by_signal: bool = False
    restarts: int = 0
    """Times the run restarted from its last committed epochs (`runtime/restarts.py`)."""
    last_error: str | None = None
    """What the last restart was for."""
