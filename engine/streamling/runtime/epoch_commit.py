"""The epoch commit: how one source's epoch becomes durable, on that source's committer thread.

In this order, strictly one epoch after another: the sinks' deferred writes; every downstream operator's
`flush_epoch` (the marker: make the epoch durable); the source's new position, the epoch counter and any operator
state (`Operator.state_entries`) in ONE state-backend write, fenced by the run's lease (the backend refuses it in
the same transaction once another run holds the pipeline, `StateBackend.put_many(fence=)`); then
every operator's `epoch_committed` (the finalizer). A failure before the state write leaves the position where it
was, so the epoch is read again on restart: at-least-once.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, NamedTuple

from streamling.core.faults import crash_point
from streamling.errors import LeaseLostError, error_context
from streamling.operators import Epoch, Operator, Source, Written, rows_of
from streamling.state import epoch_key

if TYPE_CHECKING:
    from streamling.runtime.protocols import Runner
    from streamling.runtime.summary import SourceProgress
    from streamling.telemetry.observe import EpochFigures

log = logging.getLogger("streamling.runtime")


class Staged(NamedTuple):
    """A sink's staged write."""

    name: str
    label: str
    deferred: Callable[[], Written | int]
    """The rest of the write, run on the committer thread."""
    staging_sec: float = 0.0
    """How long `Sink.stage` took (the write's Spark part)."""


class EpochTiming(NamedTuple):
    started: float
    """`time.monotonic()` when the epoch's Spark work began."""
    spark_sec: float
    """Its Spark part: reading, transforms and the sinks' staging (the source's per-batch latency)."""


class EpochCommit:
    def __init__(
        self, runner: Runner, source: Source, downstream: Sequence[Operator], progress: SourceProgress
    ) -> None:
        self.runner = runner
        self.source = source
        self.downstream = list(downstream)
        self.progress = progress

    def finish(
        self,
        epoch: Epoch,
        rows_in: int | None,
        staged: list[Staged],
        timing: EpochTiming,
        figures: EpochFigures | None = None,
    ) -> None:
        """On the committer thread: deferred writes, flush, commit, finalize — in epoch order. Then the epoch's
        figures (`figures`: what Spark counted per node) go to the telemetry, which counts committed epochs only.
        `rows_in`: the source's rows in the epoch, when its positions tell (asked once, when the epoch began)."""
        sink_rows: dict[str, int] = {}
        latencies = {self.source.name: timing.spark_sec * 1000}
        for name, label, deferred, staging_sec in staged:
            began = time.monotonic()
            with error_context(label):
                written = deferred()
            latencies[name] = (staging_sec + time.monotonic() - began) * 1000
            sink_rows[name] = rows_of(written)
            self.runner.count_sink_rows(name, written)
        for op in self.downstream:
            with error_context(op.label):
                op.flush_epoch(epoch)
        crash_point("after_write", epoch.id)
        self._write_state(epoch, rows_in, timing.started)
        crash_point("after_commit", epoch.id)
        duration_ms = (time.monotonic() - timing.started) * 1000
        self.runner.telemetry.epoch_committed(epoch, figures, sink_rows, latencies, duration_ms)
        for op in [self.source, *self.downstream]:
            with error_context(op.label):
                op.epoch_committed(epoch)

    def _write_state(self, epoch: Epoch, rows: int | None, started: float) -> None:
        now_ms = int(time.time() * 1000)
        entries = dict(self.source.position_entries(epoch.start, epoch.end, now_ms))
        entries[epoch_key(self.source.name)] = {"epoch": epoch.id, "updated_at": now_ms}
        for op in [self.source, *self.downstream]:
            with error_context(op.label):
                entries.update(op.state_entries(epoch))
        for value in entries.values():  # one commit, one time: every entry it writes says when it was written
            if isinstance(value, dict) and "updated_at" in value:
                value["updated_at"] = now_ms
        self.runner.check_lease()
        crash_point("during_commit", epoch.id)
        fence = self.runner.fence()
        with error_context(f"{self.source.label}: failed to commit epoch {epoch.id}"):
            try:
                self.runner.state.put_many(entries, fence=fence)
            except LeaseLostError as exc:  # fenced: named as the run's, not the source's, failure
                log.warning("%s: the commit of epoch %d was refused: %s", self.source.label, epoch.id, exc.message)
                raise LeaseLostError(
                    f"pipeline '{self.runner.plan.pipeline.name}': {exc.message}; stopping without committing "
                    f"epoch {epoch.id} of {self.source.label}, as another run may be writing its positions",
                    retriable=True,
                ) from None
        self.progress.epochs += 1
        self.progress.position = dict(epoch.end)
        self.progress.rows_in += rows or 0
        log.debug(
            "Epoch finalized: %d (%s, position %s, %s rows, %.2fs)",
            epoch.id,
            self.source.label,
            epoch.end,
            "?" if rows is None else rows,
            time.monotonic() - started,
        )
