"""The blackhole sink: runs the whole upstream plan and discards the rows. For throughput tests."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, ClassVar, Literal

from pydantic import PositiveInt

from streamling.config.units import Milliseconds
from streamling.core.rows import GS_OP
from streamling.plugin import Epoch, Sink, Written, rows_of
from streamling.spec import SinkSpec, ignored_field, ignored_fields

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


class BlackholeSinkSpec(SinkSpec):
    type: Literal["blackhole"]
    parallelism: PositiveInt | None = None
    """Accepted for the original's pipelines (a warning at start): the upstream plan's tasks discard the rows."""
    batch_size: PositiveInt | None = None
    """Accepted for the original's pipelines (a warning at start): nothing is buffered."""
    batch_flush_interval: Milliseconds | None = None
    """Sources feeding this sink close epochs at least this often."""


class BlackholeSink(Sink[BlackholeSinkSpec]):
    spec_model: ClassVar[type[BlackholeSinkSpec]] = BlackholeSinkSpec

    def warnings(self) -> list[str]:
        return ignored_fields(
            self.label,
            self.spec,
            {
                "parallelism": "the rows are discarded by the Spark tasks that compute them, as many as the input has "
                "partitions; a repartition would only add a shuffle to what is measured",
                "batch_size": "nothing is buffered; each epoch is evaluated and dropped whole",
            },
        )

    def write(self, df: DataFrame, epoch: Epoch) -> int:
        return rows_of(self.stage(df, epoch)())

    def stage(self, df: DataFrame, epoch: Epoch) -> Callable[[], Written | int]:
        """Everything happens now; the rows are counted by operation in the same pass (one observation)."""
        from pyspark.sql import Observation
        from pyspark.sql import functions as F

        # The noop format evaluates every column of every row, unlike count(), which may prune.
        observed = Observation(f"blackhole_{self.name}_{epoch.id}")
        metrics = [F.count(F.lit(1)).alias("rows")]
        if GS_OP in df.columns:
            op = F.col(GS_OP)
            metrics += [F.count(F.when(op == "u", 1)).alias("updates"), F.count(F.when(op == "d", 1)).alias("deletes")]
        df.observe(observed, *metrics).write.format("noop").mode("overwrite").save()
        result = observed.get
        rows = int(result["rows"])
        updates, deletes = int(result.get("updates", 0)), int(result.get("deletes", 0))
        written = Written(rows - updates - deletes, updates, deletes)
        return lambda: written


class MemorySinkSpec(BlackholeSinkSpec):
    """``memory``: the original's sink that kept the rows in a store of its own process, which only its own
    tests read."""

    type: Literal["memory"]  # type: ignore[assignment]
    exclude_gs_op: bool | None = None
    """Whether the stored rows kept ``_gs_op`` (accepted for the original's pipelines; a warning at start)."""


class MemorySink(BlackholeSink):
    """The original's ``memory`` sink: nothing outside a process can read a store inside it, so here the rows
    are discarded as by a blackhole sink (after the same full evaluation), with a warning at start."""

    spec_model: ClassVar[type[BlackholeSinkSpec]] = MemorySinkSpec
    spec: MemorySinkSpec

    def warnings(self) -> list[str]:
        return [
            ignored_field(
                self.label,
                "type",
                "memory",
                "the original kept the rows in a store only its own tests could read; here they are evaluated "
                "and discarded, as by a blackhole sink",
            ),
            *super().warnings(),
            *ignored_fields(self.label, self.spec, {"exclude_gs_op": "the rows are not kept"}),
        ]
