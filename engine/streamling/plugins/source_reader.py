"""An `ArrowSource` as a Spark stream reader (`DataSourceStreamReader`).

The engine asks the reader, on the driver, for the latest position and for the partitions of a range, and runs
`read` per partition in Spark tasks (`runtime/reading.py`). Offsets are ``{"position": p}`` with the plugin's JSON
position inside; the runtime commits an epoch's end to the state backend itself, so `commit` does nothing. The
reader carries the node's `PluginRef` (module, class, pickled options), from which each process builds the plugin.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.types import StructType

from streamling.plugins.worker import PluginRef, arrow_schema_of, conform, plugin_errors


class _Range(InputPartition):
    def __init__(self, start: Any, end: Any) -> None:
        self.start = start
        self.end = end


class PluginStreamReader(DataSourceStreamReader):
    def __init__(self, ref: PluginRef, schema: StructType, start: Any, replay_end: Mapping[str, Any] | None) -> None:
        self.ref = ref
        self.expected = arrow_schema_of(schema)
        self.start = start
        self.replay_end = replay_end.get("position") if replay_end is not None else None
        self.replaying = replay_end is not None

    def initialOffset(self) -> dict:
        return {"position": self.start}

    def latestOffset(self, start: dict, limit: Any) -> dict:
        if self.replaying:  # the first epoch repeats one a sink already applied
            self.replaying = False
            return {"position": self.replay_end}
        with plugin_errors(self.ref.label):
            return {"position": self.ref.build().latest_position(start.get("position"))}

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        with plugin_errors(self.ref.label):
            ranges = list(self.ref.build().partitions(start.get("position"), end.get("position")))
        return [_Range(a, b) for a, b in ranges]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, _Range)
        plugin = self.ref.build()
        label = self.ref.label
        with plugin_errors(label):
            batches = iter(plugin.read(partition.start, partition.end))
        while True:
            with plugin_errors(label):
                batch = next(batches, None)
            if batch is None:
                return
            yield from conform(batch, self.expected, label, "read")

    def commit(self, end: dict) -> None:
        """Positions are committed by the runtime to the state backend, not here."""
