"""Reading Spark's offset log, the one place that says which source range a micro-batch covers.

Spark writes ``offsets/<batch>`` before running the batch: a version line, a metadata JSON (with the
batch timestamp) and one JSON line per source. The runtime uses it only within a run; the state
backend, not this directory, decides where a restarted pipeline resumes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from pyspark.sql import SparkSession

from streamling.errors import StreamlingError


@dataclass(frozen=True)
class BatchOffsets:
    end: dict[str, Any]
    timestamp_ms: int


def read_batch_offsets(spark: SparkSession, checkpoint_dir: str, batch_id: int) -> BatchOffsets:
    path = f"{checkpoint_dir.rstrip('/')}/offsets/{batch_id}"
    text = _read_text(spark, path)
    lines = [line for line in text.splitlines() if line.strip()]
    if len(lines) < 3 or not lines[0].startswith("v"):
        raise StreamlingError(f"offset log {path} has an unexpected format")
    metadata = json.loads(lines[1])
    return BatchOffsets(end=json.loads(lines[2]), timestamp_ms=int(metadata.get("batchTimestampMs", 0)))


def _read_text(spark: SparkSession, path: str) -> str:
    scheme = urlparse(path).scheme
    if scheme in ("", "file"):
        return Path(urlparse(path).path if scheme else path).read_text(encoding="utf-8")
    jvm = spark.sparkContext._jvm
    hadoop_path = jvm.org.apache.hadoop.fs.Path(path)
    fs = hadoop_path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
    stream = fs.open(hadoop_path)
    try:
        return jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8")
    finally:
        stream.close()
