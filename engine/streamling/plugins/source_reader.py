"""An `ArrowSource` as a Spark Python Data Source streaming reader.

Spark asks the reader (in a Python worker next to the driver) for the initial and the latest offset and for
the partitions of a range, then runs `read` per partition on the executors. Offsets are ``{"position": p}``
with the plugin's JSON position inside; the runtime reads the batch's end from Spark's offset log and
commits it to the state backend itself, so `commit` does nothing. Each node gets a Data Source class of its
own (Spark registers sources by class and name) carrying its `PluginRef` and schema, so no option of the
query holds the plugin's options.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any, ClassVar

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.types import StructType

from streamling.errors import StreamlingError
from streamling.plugins.adapters import PluginRef, arrow_schema_of, conform, plugin_errors


class _Range(InputPartition):
    def __init__(self, start: Any, end: Any) -> None:
        self.start = start
        self.end = end


class PluginStreamReader(DataSourceStreamReader):
    def __init__(self, ref: PluginRef, schema: StructType, options: dict[str, str]) -> None:
        self.ref = ref
        self.expected = arrow_schema_of(schema)
        self.start = json.loads(options["start"])
        replay = json.loads(options.get("replay_end") or "null")
        self.replay_end = replay.get("position") if isinstance(replay, dict) else None
        self.replaying = replay is not None

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


class PluginDataSource(DataSource):
    """Subclassed per node by `data_source_for`; the subclass is pickled by value with its class attributes."""

    ref: ClassVar[PluginRef]
    spark_schema: ClassVar[str]
    source_name: ClassVar[str]

    @classmethod
    def name(cls) -> str:
        return cls.source_name

    def schema(self) -> StructType:
        return StructType.fromJson(json.loads(self.spark_schema))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return PluginStreamReader(self.ref, self.schema(), dict(self.options))


def data_source_for(ref: PluginRef, schema: StructType) -> type[DataSource]:
    if not ref.plugin_id:
        raise StreamlingError(f"{ref.label}: no plugin id")
    name = "streamling_plugin_" + re.sub(r"\W", "_", f"{ref.application_id}_{ref.node}_{ref.plugin_id}")
    return type(
        f"PluginDataSource_{re.sub(r'[^A-Za-z0-9_]', '_', ref.node)}",
        (PluginDataSource,),
        {"ref": ref, "spark_schema": json.dumps(schema.jsonValue()), "source_name": name, "__module__": __name__},
    )
