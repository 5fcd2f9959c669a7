"""The one interface every operator implements, built-in or plugin.

Lifecycle, in the order the runtime calls it:

- ``initialize(ctx)`` once before data flows (open connections, create tables);
- per epoch: sources offer a stream reader (or read on the driver); transforms map DataFrames; sinks ``write``
  the epoch's DataFrame, then ``flush_epoch`` (the marker: flush everything durable), then,
  after the source's position is committed, ``epoch_committed`` (the finalizer);
- ``terminate()`` once at shutdown, also after failures.

Data crosses operators as Spark DataFrames whose partitions travel as Arrow record batches; operators
written in Python consume or produce ``pyarrow.RecordBatch`` (``DriverSink.write_batch``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

from streamling.core.rows import GS_OP
from streamling.spec import NodeSpec, SinkSpec, SourceSpec, TransformSpec, flush_interval
from streamling.telemetry.tasks import NodeRecorder

if TYPE_CHECKING:  # pyarrow too: the control plane reads this interface (`Source`) without loading Arrow
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.datasource import DataSourceStreamReader
    from pyspark.sql.types import StructType

    from streamling.config import Settings
    from streamling.state import StateBackend
    from streamling.telemetry.run import RunTelemetry


@dataclass(frozen=True)
class Epoch:
    """One micro-batch of one source: the unit of flush and commit."""

    source: str
    id: int
    start: Mapping[str, Any]
    end: Mapping[str, Any]
    timestamp_ms: int = field(default_factory=lambda: int(time.time() * 1000))
    generation: int = 0
    """The lease generation of the run that made it (0: no lease): a sink that records its progress refuses to
    write over a later generation's, so a run that lost its lease cannot write once another run has."""


@dataclass(frozen=True)
class AppliedEpoch:
    """An epoch as a sink recorded it: replaying exactly this range lets the sink skip it."""

    id: int
    start: Mapping[str, Any]
    end: Mapping[str, Any]


@dataclass(frozen=True)
class ExternalObject:
    """A thing outside the pipeline a node reads or writes (a topic, a table): the control plane's asset.

    Its key is ``(system, *path)`` — ``("kafka", "orders")``, ``("postgres", db, schema, table)`` — so a topic one
    pipeline writes and another reads is one asset. `description` and `metadata` are shown with it."""

    system: str
    path: tuple[str, ...]
    description: str | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)
    connection: str | None = None
    """Set when the pipeline does not name where the object lives, so that `path[0]` (a database) comes from the
    settings named here (``postgres_sink``, ``postgres_sink_connections.<node>``, ``clickhouse_source``…): it
    differs between environments, and the control plane keys the object by a logical connection name in its
    place (`StreamlingTranslator.get_connection_name`)."""

    @property
    def key(self) -> tuple[str, ...]:
        return (self.system, *self.path)


@dataclass
class RunContext:
    settings: Settings
    state: StateBackend
    spark: SparkSession
    telemetry: RunTelemetry | None = None
    """The run's telemetry (`streamling.telemetry.run`); operators ask it for their `NodeRecorder`."""

    def recorder(self, node: str) -> NodeRecorder:
        """Where `node` reports latencies, retries and dead-lettered or rejected rows, from the driver or its tasks."""
        return self.telemetry.recorder(node) if self.telemetry is not None else NodeRecorder(node)


S = TypeVar("S", bound=NodeSpec)


class Operator(Generic[S]):
    kind: ClassVar[str] = "node"
    spec_model: ClassVar[type[NodeSpec] | None] = None
    """The pydantic model of the node's YAML (its spec); an operator listed in a plugin's ``PLUGIN`` needs one."""

    def __init__(self, name: str, spec: S, settings: Settings) -> None:
        self.name = name
        self.spec = spec
        self.settings = settings

    @property
    def label(self) -> str:
        """How errors and logs name this node: ``print sink 'out'``."""
        return f"{self.spec.type} {self.kind} '{self.name}'"

    def labels(self) -> dict[str, Any]:
        """The node's ``telemetry.labels``: extra dimensions of every metric it emits."""
        return self.spec.labels()

    def primary_key(self) -> list[str]:
        """The node's own primary key: its ``primary_key`` field (a source may find one in its schema)."""
        columns_of = getattr(self.spec, "primary_key_columns", None)
        return columns_of() if columns_of else []

    @property
    def flush_interval_sec(self) -> float | None:
        """The longest this node wants rows to wait (its ``batch_flush_interval``); sources feeding it close epochs
        at least this often."""
        return flush_interval(getattr(self.spec, "batch_flush_interval", None))

    def warnings(self) -> list[str]:
        """Things validation reports and a run logs once at start (never per epoch): settings the node took
        from elsewhere, or fields accepted for the original's pipelines that change nothing (or something else)
        here, each naming the node, the field and what it maps to."""
        return []

    def reads(self) -> list[ExternalObject]:
        """The external objects this node reads (a source's topic or tables), in reading order; none for a node
        whose data has no home outside the pipeline (a generator, a transform)."""
        return []

    def writes(self) -> list[ExternalObject]:
        """The external objects this node writes (a sink's table or topic, a dynamic table's backing table)."""
        return []

    def bind(self, operators: Mapping[str, Operator]) -> None:
        """Called once the plan has built every operator, for nodes that use others (a SQL transform
        calling a dynamic table)."""

    def prefetch(self) -> None:
        """Look up, without Spark, what the node's schema needs from outside (a Schema Registry's latest schema):
        the CLI runs it while the JVM starts, so the wait is not added to the start. A failure is kept and raised
        where the value is needed, so validation reports it as before."""

    def initialize(self, ctx: RunContext) -> None:
        """Open connections and create external objects; never called by validation."""

    def flush_epoch(self, epoch: Epoch) -> None:
        """Make everything written for `epoch` durable; the source commits only after this."""

    def state_entries(self, epoch: Epoch) -> dict[str, Any]:
        """State-backend entries to write in the same transaction as `epoch`'s source position (a plugin's cursor,
        say); keys must start with ``<node name>:``. Called on the committer thread after `flush_epoch`."""
        return {}

    def epoch_committed(self, epoch: Epoch) -> None:
        """Called after the source committed `epoch`'s positions."""

    def terminate(self) -> None:
        """Release resources; must be safe to call after a failed initialize."""


SS = TypeVar("SS", bound=SourceSpec)


class Source(Operator[SS]):
    kind: ClassVar[str] = "source"
    reads_on_driver: ClassVar[bool] = False
    """True for sources the driver reads itself (`next_epoch`) instead of Spark tasks (`stream_reader`)."""

    def schema(self) -> StructType:
        """Output schema, including ``_gs_op``; known without reading data."""
        raise NotImplementedError

    def load_position(self, state: StateBackend) -> dict[str, Any]:
        """Where to resume: the committed position from the state backend, else the configured start."""
        raise NotImplementedError

    def committed_position(self, state: StateBackend) -> dict[str, Any] | None:
        """The position recorded in the state backend (None before the first commit); reads nothing else."""
        return None

    def position_entries(
        self, start: Mapping[str, Any], end: Mapping[str, Any], now_ms: int
    ) -> dict[str, dict[str, Any]]:
        """State-backend entries that record `end` as committed (entries that did not change may be left out)."""
        raise NotImplementedError

    def reset_position(self, state: StateBackend) -> list[str]:
        """Forget the committed position, so the next run starts from the configured start; the keys removed.
        Default: every key of this source but its epoch counter and phase (``<name>:__…__``)."""
        keys = [k for k in state.items(f"{self.name}:") if not k.startswith(f"{self.name}:__")]
        for key in keys:
            state.remove(key)
        return keys

    def is_exhausted(self, position: Mapping[str, Any]) -> bool:
        """True when a bounded source has nothing after `position`."""
        return False

    def rows_between(self, start: Mapping[str, Any], end: Mapping[str, Any]) -> int | None:
        """Rows an epoch from `start` to `end` covers, when positions tell (progress, live sampling); asked once per
        epoch, when it begins."""
        return None

    def backlog(self, position: Mapping[str, Any] | None) -> dict[str, int] | None:
        """Records available after `position` (None: after the configured start) per partition — the lag to
        the high watermark — when the source can tell without reading them; for monitoring."""
        return None

    def stream_reader(
        self, spark: SparkSession, start: Mapping[str, Any], replay_end: Mapping[str, Any] | None = None
    ) -> DataSourceStreamReader:
        """The reader of this source's stream from `start`: Spark's own contract (`latestOffset` paces epochs,
        `partitions` splits one, `read` reads a partition into ``pyarrow.RecordBatch``es). The engine calls
        `latestOffset` and `partitions` on the driver and `read` in Spark tasks, on a copy pickled before the
        driver's first call (`runtime/reading.py`); `stop` when the query ends. With `replay_end`, the first
        `latestOffset` must answer exactly that end: the epoch replays one some sink already applied, so that sink
        can recognise and skip it (see `Sink.applied_epoch`)."""
        raise NotImplementedError

    def shape_epoch(self, df: DataFrame) -> DataFrame:
        """What each epoch's rows go through as they are read, before the plan (a hybrid's phase conforms them to
        the hybrid's schema); the rows as they are by default."""
        return df

    def phases(self) -> list[Source[Any]] | None:
        """For sources that run in phases (hybrid): the sources to run one after another, under this
        source's name; None for an ordinary source."""
        return None

    def next_epoch(
        self, spark: SparkSession, start: Mapping[str, Any], replay_end: Mapping[str, Any] | None = None
    ) -> tuple[DataFrame | None, dict[str, Any]] | None:
        """For `reads_on_driver` sources: the next epoch's rows after `start` and its end position, None
        when the source has nothing more, ``(None, start)`` when it has nothing new yet (after waiting a little;
        the runtime asks again unless it is stopping). With `replay_end`, exactly the rows up to that end."""
        raise NotImplementedError

    def refine(self, df: DataFrame) -> DataFrame:
        """Source-side row selection (e.g. a ``filter:`` predicate), applied to every epoch and at validation."""
        return df


TS = TypeVar("TS", bound=TransformSpec)


class Transform(Operator[TS]):
    kind: ClassVar[str] = "transform"
    adds_no_rows: ClassVar[bool] = False
    """True when every output row comes from an input row of the same epoch (filters, projections, lookups), so a
    sink's rows can be reconciled against its sources' counts (the Dagster backfill's check)."""

    def inputs(self) -> list[str]:
        return self.spec.input_names()

    def apply(self, spark: SparkSession, inputs: Mapping[str, DataFrame], epoch: Epoch | None) -> DataFrame:
        """Map this epoch's input DataFrames to the output; `epoch` is None during validation."""
        raise NotImplementedError


KS = TypeVar("KS", bound=SinkSpec)


@dataclass(frozen=True)
class Written:
    """What a sink wrote for an epoch: what `Sink.stage`'s deferred function returns when the sink can tell the
    operations apart cheaply (a plain ``int`` when it cannot).

    The four counts add up to `rows`, the rows the sink *received* for the epoch — the same number a plain ``int``
    would report. A sink that only forwards rows (Kafka, print, blackhole, webhook) counts them by ``_gs_op`` as
    received (`of`): ``u`` is an update, ``d`` a delete, every other value — a NULL or a missing ``_gs_op`` column
    included — an insert, as the sinks treat such rows. A sink that can see what its store did reports that
    instead: the Postgres sinks count the rows Postgres inserted, updated and deleted, and put the rest under
    `unchanged` (a row superseded by a later one of its key in the same epoch, a conflict left alone by
    ``on_conflict: nothing`` or ``update_where``, a delete of a key that was not there, a row sent to dead
    letters). So a re-run over rows already in the table reports updates, not inserts."""

    inserts: int = 0
    updates: int = 0
    deletes: int = 0
    unchanged: int = 0

    @property
    def rows(self) -> int:
        return self.inserts + self.updates + self.deletes + self.unchanged

    def __add__(self, other: Written) -> Written:
        if not isinstance(other, Written):
            return NotImplemented
        return Written(
            self.inserts + other.inserts,
            self.updates + other.updates,
            self.deletes + other.deletes,
            self.unchanged + other.unchanged,
        )

    def received(self, rows: int) -> Written:
        """These counts of what a store did, with the rest of the `rows` received as `unchanged`."""
        return Written(self.inserts, self.updates, self.deletes, rows - self.inserts - self.updates - self.deletes)

    def as_dict(self) -> dict[str, int]:
        """The run summary's form: ``{"inserts": …, "updates": …, "deletes": …, "unchanged": …}``."""
        return {"inserts": self.inserts, "updates": self.updates, "deletes": self.deletes, "unchanged": self.unchanged}

    @classmethod
    def of_ops(cls, ops: pa.Array | pa.ChunkedArray) -> Written:
        """Count a ``_gs_op`` column, vectorised (one ``value_counts`` pass, no per-row Python)."""
        import pyarrow.compute as pc

        counts = pc.value_counts(ops)
        by_op = dict(zip(counts.field("values").to_pylist(), counts.field("counts").to_pylist(), strict=True))
        updates, deletes = int(by_op.get("u", 0)), int(by_op.get("d", 0))
        return cls(len(ops) - updates - deletes, updates, deletes)

    @classmethod
    def of(cls, rows: pa.Table | pa.RecordBatch) -> Written:
        """Count the rows of a table or batch by their ``_gs_op`` column; all inserts without one."""
        if GS_OP not in rows.schema.names:
            return cls(inserts=rows.num_rows)
        return cls.of_ops(rows.column(GS_OP))


def rows_of(written: Written | int) -> int:
    """The row count of what a sink reported, either way."""
    return written.rows if isinstance(written, Written) else int(written)


class Sink(Operator[KS]):
    """A destination. The runtime calls `stage` once per epoch; sinks implement either `write` (everything
    happens inside the micro-batch) or `stage` (Spark work now, the rest deferred to the committer thread).

    Row counts reach the run summary (`RunSummary.sink_rows`) through what `stage`'s deferred function
    returns: a `Written` adds the epoch's inserts / updates / deletes to `RunSummary.sink_ops` as well, a
    plain ``int`` only the rows. A sink should return one or the other consistently."""

    kind: ClassVar[str] = "sink"

    def check(self, schema: StructType, primary_key: list[str]) -> list[str]:
        """Validation errors for an input of `schema` whose key is `primary_key` (the sink's own, else the
        one inherited from upstream; empty when none resolves). Messages name the sink. Must not touch the
        destination."""
        return []

    def write(self, df: DataFrame, epoch: Epoch) -> int:
        """Write the epoch's rows now; return how many rows were written (a plain count: operation counts
        travel only through `stage`). Sinks that implement `stage` instead offer this as a shortcut that
        runs the staged write at once and returns its `rows_of`."""
        raise NotImplementedError

    def stage(self, df: DataFrame, epoch: Epoch) -> Callable[[], Written | int]:
        """Do the part of the write that needs Spark now, inside the micro-batch, and return the rest.

        The runtime calls the returned function later on the committer thread — while Spark already
        computes the next epoch — strictly in epoch order and before the epoch commits. It returns what
        was written: a `Written` (rows by ``_gs_op``) when the sink can count the operations without a
        per-row loop or an extra Spark action, else the row count as an ``int``. Sinks that deduplicate
        or merge (upserts) count the rows they *received* for the epoch, by operation, not the rows the
        destination ended up changing; an epoch the sink skips (already applied) counts nothing. The
        function must not use `df`, which is released by then. By default everything happens now
        (`write`), which reports an ``int``."""
        rows = self.write(df, epoch)
        return lambda: rows

    def applied_epoch(self, source: str) -> AppliedEpoch | None:
        """The last epoch of `source` this sink applied durably, for sinks that record it atomically with
        their data (effectively-once). Called after `initialize`, before data flows."""
        return None


class DriverSink(Sink[KS]):
    """A sink written against Arrow: the epoch's rows arrive on the driver as record batches, in
    partition order. Suits sinks that need ordering or a single writer (print, HTTP). Reports a `Written`
    counted from each batch's ``_gs_op``."""

    def write(self, df: DataFrame, epoch: Epoch) -> int:
        return rows_of(self.stage(df, epoch)())

    def stage(self, df: DataFrame, epoch: Epoch) -> Callable[[], Written | int]:
        table = df.toArrow()

        def deliver() -> Written:
            written = Written()
            for batch in _batches(table):
                self.write_batch(batch, epoch)
                written += Written.of(batch)
            return written

        return deliver

    def write_batch(self, batch: pa.RecordBatch, epoch: Epoch) -> None:
        raise NotImplementedError


def _batches(table: pa.Table) -> Iterator[pa.RecordBatch]:
    yield from table.to_batches()
