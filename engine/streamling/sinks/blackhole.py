"""The blackhole sink: runs the whole upstream plan and discards the rows. For throughput tests."""

from __future__ import annotations

from typing import Literal

from pyspark.sql import DataFrame, Observation
from pyspark.sql import functions as F

from streamling.operators import Epoch, Sink
from streamling.plugins.registry import operator
from streamling.topology.spec import SinkSpec


class BlackholeSinkSpec(SinkSpec):
    type: Literal["blackhole"]


@operator("blackhole", BlackholeSinkSpec)
class BlackholeSink(Sink[BlackholeSinkSpec]):
    def write(self, df: DataFrame, epoch: Epoch) -> int:
        # The noop format evaluates every column of every row, unlike count(), which may prune.
        observed = Observation(f"blackhole_{self.name}_{epoch.id}")
        df.observe(observed, F.count(F.lit(1)).alias("rows")).write.format("noop").mode("overwrite").save()
        return int(observed.get["rows"])
