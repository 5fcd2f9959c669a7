"""The columns a Kafka source adds to each record: where it was read. Apart from the node's spec, which Spark's
planner and worker processes need not import (pydantic, the topology)."""

from __future__ import annotations

from pyspark.sql import types as T

METADATA_COLUMNS = T.StructType(
    [
        T.StructField("_partition", T.IntegerType(), False),
        T.StructField("_offset", T.LongType(), False),
        T.StructField("_timestamp", T.TimestampType(), True),
    ]
)
