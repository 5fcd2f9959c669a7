"""The columns a Kafka source adds to each record: where it was read. Apart from the node's spec, which Spark's
planner and worker processes need not import (pydantic, the topology)."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import types as T


METADATA_NAMES = ("_partition", "_offset", "_timestamp")
"""The columns every Kafka source row carries besides its payload's, by name (what the workers need of them)."""


@functools.cache
def metadata_columns() -> T.StructType:
    from pyspark.sql import types as T

    partition, offset, timestamp = METADATA_NAMES
    return T.StructType(
        [
            T.StructField(partition, T.IntegerType(), False),
            T.StructField(offset, T.LongType(), False),
            T.StructField(timestamp, T.TimestampType(), True),
        ]
    )
