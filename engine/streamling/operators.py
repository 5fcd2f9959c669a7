"""The one interface every operator implements, built-in or plugin.

Lifecycle, in the order the runtime calls it:

- ``initialize(ctx)`` once before data flows (open connections, create tables);
- per epoch: sources describe a Spark streaming DataFrame; transforms map DataFrames; sinks ``write``
  the epoch's DataFrame, then ``prepare_checkpoint`` (the marker: flush everything durable), then,
  after the source's position is committed, ``commit_checkpoint`` (the finalizer);
- ``terminate()`` once at shutdown, also after failures.

Data crosses operators as Spark DataFrames whose partitions travel as Arrow record batches; operators
written in Python consume or produce ``pyarrow.RecordBatch`` (``ArrowSink.write_batch``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

import pyarrow as pa

from streamling.topology.spec import NodeSpec, SinkSpec, SourceSpec, TransformSpec

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

    from streamling.config import Settings
    from streamling.state import StateBackend


@dataclass(frozen=True)
class Epoch:
    """One micro-batch of one source: the unit of flush and commit."""

    source: str
    id: int
    start: Mapping[str, Any]
    end: Mapping[str, Any]
    timestamp_ms: int = field(default_factory=lambda: int(time.time() * 1000))


@dataclass(frozen=True)
class AppliedEpoch:
    """An epoch as a sink recorded it: replaying exactly this range lets the sink skip it."""

    id: int
    start: Mapping[str, Any]
    end: Mapping[str, Any]


@dataclass
class RunContext:
    settings: Settings
    state: StateBackend
    spark: SparkSession


S = TypeVar("S", bound=NodeSpec)


class Operator(Generic[S]):
    kind: ClassVar[str] = "node"

    def __init__(self, name: str, spec: S, settings: Settings) -> None:
        self.name = name
        self.spec = spec
        self.settings = settings

    @property
    def label(self) -> str:
        """How errors and logs name this node: ``print sink 'out'``."""
        return f"{self.spec.type} {self.kind} '{self.name}'"

    def bind(self, operators: Mapping[str, Operator]) -> None:
        """Called once the plan has built every operator, for nodes that use others (a SQL transform
        calling a dynamic table)."""

    def initialize(self, ctx: RunContext) -> None:
        """Open connections and create external objects; never called by validation."""

    def prepare_checkpoint(self, epoch: Epoch) -> None:
        """Make everything written for `epoch` durable; the source commits only after this."""

    def commit_checkpoint(self, epoch: Epoch) -> None:
        """Called after the source committed `epoch`'s positions."""

    def terminate(self) -> None:
        """Release resources; must be safe to call after a failed initialize."""


SS = TypeVar("SS", bound=SourceSpec)


class Source(Operator[SS]):
    kind: ClassVar[str] = "source"
    reads_on_driver: ClassVar[bool] = False
    """True for sources the driver reads itself (`next_epoch`) instead of a Spark streaming query."""

    def schema(self) -> StructType:
        """Output schema, including ``_gs_op``; known without reading data."""
        raise NotImplementedError

    def load_position(self, state: StateBackend) -> dict[str, Any]:
        """Where to resume: the committed position from the state backend, else the configured start."""
        raise NotImplementedError

    def position_entries(
        self, start: Mapping[str, Any], end: Mapping[str, Any], now_ms: int
    ) -> dict[str, dict[str, Any]]:
        """State-backend entries that record `end` as committed (entries that did not change may be left out)."""
        raise NotImplementedError

    def is_exhausted(self, position: Mapping[str, Any]) -> bool:
        """True when a bounded source has nothing after `position`."""
        return False

    def rows_between(self, start: Mapping[str, Any], end: Mapping[str, Any]) -> int | None:
        """Rows an epoch from `start` to `end` covers, when positions tell; for progress reporting."""
        return None

    def stream(
        self, spark: SparkSession, start: Mapping[str, Any], replay_end: Mapping[str, Any] | None = None
    ) -> DataFrame:
        """A streaming DataFrame that starts reading at `start`. With `replay_end`, the first epoch must
        end exactly there: it replays an epoch some sink already applied, so that sink can recognise and
        skip it (see `Sink.applied_epoch`)."""
        raise NotImplementedError

    def phases(self) -> list[Source[Any]] | None:
        """For sources that run in phases (hybrid): the sources to run one after another, under this
        source's name; None for an ordinary source."""
        return None

    def next_epoch(
        self, spark: SparkSession, start: Mapping[str, Any], replay_end: Mapping[str, Any] | None = None
    ) -> tuple[DataFrame, dict[str, Any]] | None:
        """For `reads_on_driver` sources: the next epoch's rows after `start` and its end position, None
        when the source has nothing more. With `replay_end`, exactly the rows up to that end."""
        raise NotImplementedError

    def refine(self, df: DataFrame) -> DataFrame:
        """Source-side row selection (e.g. a ``filter:`` predicate), applied to every epoch and at validation."""
        return df


TS = TypeVar("TS", bound=TransformSpec)


class Transform(Operator[TS]):
    kind: ClassVar[str] = "transform"

    def inputs(self) -> list[str]:
        return self.spec.input_names()

    def apply(self, spark: SparkSession, inputs: Mapping[str, DataFrame], epoch: Epoch | None) -> DataFrame:
        """Map this epoch's input DataFrames to the output; `epoch` is None during validation."""
        raise NotImplementedError


KS = TypeVar("KS", bound=SinkSpec)


class Sink(Operator[KS]):
    kind: ClassVar[str] = "sink"

    def check(self, schema: StructType, primary_key: list[str]) -> list[str]:
        """Validation errors for an input of `schema` whose key is `primary_key` (the sink's own, else the
        one inherited from upstream; empty when none resolves). Messages name the sink. Must not touch the
        destination."""
        return []

    def write(self, df: DataFrame, epoch: Epoch) -> int:
        """Write the epoch's rows; return how many rows were written."""
        raise NotImplementedError

    def stage(self, df: DataFrame, epoch: Epoch) -> Callable[[], int]:
        """Do the part of the write that needs Spark now, inside the micro-batch, and return the rest.

        The runtime calls the returned function later on the committer thread — while Spark already
        computes the next epoch — strictly in epoch order and before the epoch commits; it returns the
        rows written. It must not use `df`, which is released by then. By default everything happens
        now (`write`)."""
        rows = self.write(df, epoch)
        return lambda: rows

    @property
    def flush_interval_sec(self) -> float | None:
        """The longest this sink wants rows to wait; sources feeding it close epochs at least this often."""
        return None

    def applied_epoch(self, source: str) -> AppliedEpoch | None:
        """The last epoch of `source` this sink applied durably, for sinks that record it atomically with
        their data (effectively-once). Called after `initialize`, before data flows."""
        return None


class ArrowSink(Sink[KS]):
    """A sink written against Arrow: the epoch's rows arrive on the driver as record batches, in
    partition order. Suits sinks that need ordering or a single writer (print, HTTP)."""

    def write(self, df: DataFrame, epoch: Epoch) -> int:
        return self.stage(df, epoch)()

    def stage(self, df: DataFrame, epoch: Epoch) -> Callable[[], int]:
        table = df.toArrow()

        def deliver() -> int:
            rows = 0
            for batch in _batches(table):
                self.write_batch(batch, epoch)
                rows += batch.num_rows
            return rows

        return deliver

    def write_batch(self, batch: pa.RecordBatch, epoch: Epoch) -> None:
        raise NotImplementedError


def _batches(table: pa.Table) -> Iterator[pa.RecordBatch]:
    yield from table.to_batches()
