"""Start Spark's Python workers while the driver still prepares the pipeline.

A pipeline's first epoch waits for the workers' daemon (`worker_daemon`), a Python process importing pyspark,
pyarrow and the engine's readers, and for its first forked worker. A one-row Arrow job in the background, right
after the session starts, brings both up while the driver validates the pipeline, plans it and opens its
sources, so the first read forks from a daemon already running (measured with Spark's Python data sources, whose
planners this also started: a second source's first read 2.7 s -> 0.2 s).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING

from pyspark.sql import SparkSession

from streamling.types import arrow_map

if TYPE_CHECKING:
    import pyarrow as pa

log = logging.getLogger("streamling.spark")


def _same(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    yield from batches


def warm_up(spark: SparkSession) -> threading.Thread:
    """Run the one-row job on a daemon thread; a failure only costs the head start, so it is logged at debug."""

    def run() -> None:
        try:
            arrow_map(spark.range(0, 1, 1, 1), _same, "id long").collect()
        except Exception as exc:  # a session stopped meanwhile, say
            log.debug("Spark's Python workers were not warmed up: %s", exc)

    thread = threading.Thread(target=run, name="streamling-warm-up", daemon=True)
    thread.start()
    return thread
