"""The two written protocols between the runner and its query drivers, apart from both so neither imports the other.

`Runner` is what a driver (and the epoch commit it runs) may use of the run it belongs to; `PipelineRunner`
(`runtime/executor.py`) implements it. `QueryDriver` is how the runner drives one source, whatever reads it;
`SourceQuery` and `PhasedQuery` (`runtime/queries.py`) implement it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from streamling.config import Settings
    from streamling.operators import Source, Written
    from streamling.runtime.plan import Plan
    from streamling.runtime.summary import RunSummary
    from streamling.state import Fence, StateBackend
    from streamling.telemetry.run import RunTelemetry


class Runner(Protocol):
    """What a driver may use of the run it belongs to (`PipelineRunner` implements it)."""

    plan: Plan
    settings: Settings
    state: StateBackend
    summary: RunSummary
    telemetry: RunTelemetry

    def count_sink_rows(self, sink: str, written: Written | int) -> None: ...

    def check_lease(self) -> None: ...

    def fence(self) -> Fence | None:
        """What this run's commits carry to be refused once another run holds the pipeline."""
        ...

    def wake(self) -> None:
        """Have the supervisor look at the run's queries now."""
        ...

    def bind_thread(self, spark: SparkSession, source: str) -> None:
        """Make the calling thread's Spark jobs this run's (its scheduler pool, its job group for `source`)."""
        ...

    def cancel_jobs(self, spark: SparkSession, source: str) -> None:
        """Cancel the Spark jobs `source`'s thread is running (a stop whose epoch outlived the grace period)."""
        ...

    def replay_end(self, source: Source, start: dict[str, Any], committed: int) -> dict[str, Any] | None:
        """Where the first epoch after `committed` must end so sinks that already applied it can skip it."""
        ...


class QueryDriver(Protocol):
    """How the runner drives one source, whatever reads it. All methods are called from the supervisor thread except
    `request_stop`, which any thread may call."""

    source: Source

    @property
    def exhausted(self) -> bool:
        """A bounded source has nothing more to read (its last epoch may still be finishing)."""
        ...

    def start(self, spark: SparkSession, replay_end: dict[str, Any] | None = None) -> None: ...

    def poll(self) -> None:
        """One supervisor tick (a phased driver moves to its next phase here)."""
        ...

    def failure(self) -> BaseException | None: ...

    def idle(self) -> bool:
        """No epoch is being computed or finished."""
        ...

    def active(self) -> bool:
        """Still reading or finishing epochs."""
        ...

    def caught_up(self) -> bool:
        """Its last look for new data found none, and no epoch is in flight (an idle source, not a stalled one)."""
        ...

    def request_stop(self) -> None:
        """Take no new epoch; the in-flight one finishes and commits."""
        ...

    def stop(self) -> None: ...

    def close(self) -> None:
        """After `stop`: let the committer finish what it was handed, or drop it after a failure."""
        ...
