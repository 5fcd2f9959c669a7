"""The columns a Kafka source adds to each record: where it was read. Apart from the node's spec, which Spark's
planner and worker processes need not import (pydantic, the topology)."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import types as T


@functools.cache
def metadata_columns() -> T.StructType:
    from pyspark.sql import types as T

    return T.StructType(
        [
            T.StructField("_partition", T.IntegerType(), False),
            T.StructField("_offset", T.LongType(), False),
            T.StructField("_timestamp", T.TimestampType(), True),
        ]
    )
