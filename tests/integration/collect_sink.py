"""A sink for tests, registered through the public operator registry exactly as a plugin would be:
it keeps every row it receives, per epoch, in memory."""

from __future__ import annotations

from typing import Literal

import pyarrow as pa

from streamling.operators import DriverSink, Epoch
from streamling.plugins import operator
from streamling.spec import PluginOptions, SinkSpec

COLLECTED: dict[str, list[tuple[int, dict]]] = {}
FLUSHED: dict[str, list[int]] = {}


class CollectSpec(SinkSpec, PluginOptions):
    type: Literal["test.collect"]


@operator("test.collect", CollectSpec)
class CollectSink(DriverSink[CollectSpec]):
    def write_batch(self, batch: pa.RecordBatch, epoch: Epoch) -> None:
        rows = COLLECTED.setdefault(self.spec.options.get("key", self.name), [])
        rows.extend((epoch.id, row) for row in batch.to_pylist())

    def flush_epoch(self, epoch: Epoch) -> None:
        FLUSHED.setdefault(self.spec.options.get("key", self.name), []).append(epoch.id)
