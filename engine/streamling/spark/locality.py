"""Where an epoch's read tasks prefer to run on a cluster: each input partition on the same executor every epoch.

A Kafka reading task reuses the consumer its Python worker holds for the source (`kafka/source/reader.py`,
`_reader_consumer`): its connections, its metadata and librdkafka's fetch position for the partition it read last
epoch. `spark.range` gives no placement, so on a cluster with several executors a partition wandered between them
and each move paid a cold fetch. Here the epoch's task indexes are a parallel collection whose slices carry a
preferred executor (``executor_<host>_<id>``, Spark's `ExecutorCacheTaskLocation`, the level Spark's own Kafka
source asks for). A partition's key is a group (the topic) and an ordinal (the partition number), and its executor
is the live executors' ``(crc32(group) + ordinal) % count``-th by id: consecutive partitions spread evenly over the
executors whichever of them have data this epoch, and a partition keeps its executor while the set of executors
stays the same. When an executor is lost or added, partitions are dealt again. Spark still runs a task elsewhere
once ``spark.locality.wait`` (3 s) passes with its executor busy, and at once when it is gone.

Only sources whose partitions name a key are placed (Kafka's); others (a generator, files) keep nothing warm between
epochs and are read unplaced, without locality waits. Local masters have one executor, the driver: nothing to
prefer, and none of this runs.
"""

from __future__ import annotations

import logging
import zlib
from collections.abc import Sequence
from typing import TYPE_CHECKING

from py4j.protocol import Py4JError

from streamling.errors import first_line

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger("streamling.spark")
Executor = tuple[str, str]
"""An executor's (id, host)."""
Key = tuple[str, int]
"""An input partition's (group, ordinal): a Kafka range's (topic, partition)."""


def choose(keys: Sequence[Key], executors: Sequence[Executor]) -> list[Executor]:
    """Each key's executor: `executors` (sorted by id) dealt round the ordinals, from an offset per group."""
    ordered = sorted(executors, key=lambda e: (len(e[0]), e[0]))
    return [ordered[(zlib.crc32(group.encode()) + ordinal) % len(ordered)] for group, ordinal in keys]


def live_executors(spark: SparkSession) -> list[Executor]:
    """The active executors the driver's status store lists, without the driver itself. (Not through `SparkEnv`:
    py4j's reflection over its methods loads classes this Spark's jars do not carry.)"""
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    listed = spark.sparkContext._jsc.sc().statusStore().executorList(True)
    found = []
    for summary in jvm.scala.jdk.javaapi.CollectionConverters.asJava(listed):
        executor = summary.id()
        if executor != "driver":
            found.append((executor, summary.hostPort().rsplit(":", 1)[0]))
    return sorted(found)


class PlacedIds:
    """Per source: the task-index frame whose slices prefer the executors `choose` picks, rebuilt only when the
    partitions' keys or the live executors change."""

    def __init__(self) -> None:
        self._made: tuple[tuple[Key, ...], tuple[Executor, ...], DataFrame] | None = None

    def frame(self, spark: SparkSession, keys: Sequence[Key]) -> DataFrame | None:
        """A one-column frame of ``0 .. len(keys)-1``, one row per slice, each placed; None when no executor is
        known yet (or this Spark cannot say), and the caller reads unplaced."""
        try:
            executors = tuple(live_executors(spark))
            if not executors:
                return None
            made = self._made
            if made is not None and made[0] == tuple(keys) and made[1] == executors and made[2].sparkSession is spark:
                return made[2]
            placed = _placed_frame(spark, choose(keys, executors))
        except Py4JError as exc:  # another Spark version's internals: read unplaced, as before
            log.debug("read tasks are not placed: %s", first_line(exc))
            return None
        self._made = (tuple(keys), executors, placed)
        return placed


def _placed_frame(spark: SparkSession, chosen: Sequence[Executor]) -> DataFrame:
    from pyspark.sql.classic.dataframe import DataFrame as ClassicDataFrame
    from pyspark.sql.types import IntegerType, StructField, StructType

    context = spark.sparkContext
    jvm, gateway = context._jvm, context._gateway
    assert jvm is not None and gateway is not None
    scala = jvm.scala.jdk.javaapi.CollectionConverters
    slices = jvm.java.util.ArrayList()
    for index, (executor, host) in enumerate(chosen):
        values = gateway.new_array(jvm.java.lang.Object, 1)
        values[0] = index
        where = jvm.java.util.ArrayList()
        where.add(f"executor_{host}_{executor}")
        slices.add(jvm.scala.Tuple2(jvm.org.apache.spark.sql.RowFactory.create(values), scala.asScala(where).toSeq()))
    row_tag = jvm.scala.reflect.ClassTag.apply(jvm.java.lang.Class.forName("org.apache.spark.sql.Row"))
    rdd = context._jsc.sc().makeRDD(scala.asScala(slices).toSeq(), row_tag)
    schema = spark._jsparkSession.parseDataType(StructType([StructField("id", IntegerType(), False)]).json())
    return ClassicDataFrame(spark._jsparkSession.createDataFrame(rdd, schema), spark)
