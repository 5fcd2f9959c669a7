"""Reading an epoch: a source's Spark stream reader, hosted by the engine instead of by Structured Streaming.

Every streaming source is a PySpark `DataSourceStreamReader` (Spark's own contract: `latestOffset`, `partitions`,
`read`). Structured Streaming hosts each such reader in a process of its own per query
(``pyspark/sql/streaming/python_streaming_source_runner.py``), which the JVM starts and then waits for to connect
back for a hard-coded 10 s (`PythonWorkerFactory.createSimpleWorker` in Spark 4.3: ``Selector.select(10000)``;
``spark.python.authenticate.socketTimeout`` does not apply). A runner imports pyspark before it connects, so on
two cores several queries starting together, or a busy machine, ended runs with ``Python worker failed to connect
back`` (`CANNOT_OPEN_SOCKET … .sock: No such file or directory`: the JVM had given up and removed the socket).
Every query also kept that process alive, asked it for the latest offset at every trigger over a socket, and
wrote an offset and a commit log per epoch that the engine only read back.

The engine calls the reader itself: `latestOffset` and `partitions` are plain calls on the driver, in the
source's own thread (`runtime/queries.SourceQuery`), and an epoch's rows are read by Spark tasks, one per input
partition, in Python workers forked by the workers' daemon: ``spark.range(n, numPartitions=n).mapInArrow(read)``.
Each task unpickles the reader as it was before the driver used it (as Spark's planner pickles a fresh reader for
its tasks) and calls `read` on its partition. Spark's task scheduling, placement and failure handling stay; what
goes is the process per query, its connect-back and the logs. The state backend was already the only record of
positions (`ARCHITECTURE.md`, *Where positions live*).
"""

from __future__ import annotations

import functools
import json
import threading
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from pyspark import cloudpickle
from pyspark.sql.streaming.datasource import ReadAllAvailable

from streamling.errors import StreamlingError
from streamling.spark.locality import PlacedIds
from streamling.types import arrow_map

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
    from pyspark.sql.types import StructType

    from streamling.operators import Source

READ_ALL = ReadAllAvailable()
"""The limit Spark passes when a reader declares no default read limit; the readers pace themselves (`Pacer`)."""


class ReaderEpochs:
    """A source's stream reader on the driver, offering epochs the way a driver-read source does (`next_epoch`)."""

    def __init__(
        self,
        source: Source[Any],
        spark: SparkSession,
        start: Mapping[str, Any],
        replay_end: Mapping[str, Any] | None,
        poll_sec: float,
    ) -> None:
        self.source = source
        self.schema: StructType = source.schema()
        self.reader: DataSourceStreamReader = source.stream_reader(spark, start, replay_end)
        self._for_tasks = cloudpickle.dumps(self.reader)  # before the driver opens anything in it
        self._poll_sec = poll_sec
        self._wake = threading.Event()
        self._ids: dict[int, DataFrame] = {}
        """``spark.range(n, numPartitions=n)`` per task count, analysed once: an epoch's frame is one more node."""
        self._placed = PlacedIds()
        """On a cluster: task indexes whose tasks prefer one executor per input partition (`spark/locality.py`)."""

    def next_epoch(
        self, spark: SparkSession, start: Mapping[str, Any], replay_end: Mapping[str, Any] | None = None
    ) -> tuple[DataFrame | None, dict[str, Any]] | None:
        """The next epoch after `start` and its end; ``(None, start)`` when none is due yet (after waiting one
        poll interval, or less when woken); None once a bounded source is exhausted. The reader was given
        `replay_end` when it was made, and its first `latestOffset` answers it."""
        if self.source.is_exhausted(start):
            return None
        begin = plain(start)
        end = plain(self.reader.latestOffset(dict(begin), READ_ALL))
        if end == begin:
            self._wake.wait(self._poll_sec)
            self._wake.clear()
            return None, dict(begin)
        return self.frame(spark, begin, end), end

    def frame(self, spark: SparkSession, start: Mapping[str, Any], end: Mapping[str, Any]) -> DataFrame:
        """The rows from `start` to `end`, read by one Spark task per input partition of the reader."""
        from streamling.runtime.plan import empty_frame

        partitions = list(self.reader.partitions(dict(start), dict(end)))
        if not partitions:
            return empty_frame(spark, self.schema)
        read = functools.partial(read_partitions, self._for_tasks, cloudpickle.dumps(partitions))
        n = len(partitions)
        ids = None
        keys = [getattr(p, "locality_key", None) for p in partitions]
        if not spark.sparkContext.master.startswith("local") and None not in keys:
            ids = self._placed.frame(spark, keys)  # type: ignore[arg-type]
        if ids is None:
            ids = self._ids.get(n)
            if ids is None or ids.sparkSession is not spark:
                ids = self._ids[n] = spark.range(0, n, 1, n)
        return arrow_map(ids, read, self.schema)

    def wake(self) -> None:
        """Cut a wait for new data short (a stop was asked)."""
        self._wake.set()

    def close(self) -> None:
        """Release what the reader opened on the driver (the Kafka reader's metadata consumer)."""
        self.reader.stop()


def read_partitions(reader: bytes, partitions: bytes, ids: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """In a Spark task: read the input partitions whose indexes the task was given (one, by construction)."""
    import pickle

    import pyarrow as pa

    stream_reader = pickle.loads(reader)
    planned: list[InputPartition] = pickle.loads(partitions)
    for batch in ids:
        for index in batch.column(0).to_pylist():
            for out in stream_reader.read(planned[index]):
                if not isinstance(out, pa.RecordBatch):
                    raise StreamlingError(
                        f"{type(stream_reader).__name__}.read yielded {type(out).__name__}; the engine's readers "
                        "yield pyarrow.RecordBatch"
                    )
                yield out


def plain(position: Mapping[str, Any]) -> dict[str, Any]:
    """A position as it travels through JSON (tuples become lists), as Spark's offset log made it: what the state
    backend stores and what the reader is asked with next."""
    return json.loads(json.dumps(position))
