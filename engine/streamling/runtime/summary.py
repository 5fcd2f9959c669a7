"""What a run reports: per-source progress and per-sink rows; the CLI logs it, Dagster records it as metadata."""

from __future__ import annotations

import logging
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

    def log_to(self, log: logging.Logger) -> None:
        """The lines that end a run's output, from the CLI or from the engine server (`streamling serve`)."""
        for name, progress in self.sources.items():
            log.info(
                "source '%s': %d epochs, %d rows read, position %s",
                name,
                progress.epochs,
                progress.rows_in,
                progress.position,
            )
        for name, rows in self.sink_rows.items():
            ops = self.sink_ops.get(name)
            if ops is None:
                log.info("sink '%s': %d rows written", name, rows)
            else:
                unchanged = f", {ops['unchanged']} unchanged" if ops.get("unchanged") else ""
                log.info(
                    "sink '%s': %d rows written (%d inserts, %d updates, %d deletes%s)",
                    name,
                    rows,
                    ops["inserts"],
                    ops["updates"],
                    ops["deletes"],
                    unchanged,
                )
        log.info("Finished in %.1fs", self.duration_sec)
