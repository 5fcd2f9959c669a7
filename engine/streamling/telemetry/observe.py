"""Counting (and sampling) every node's rows of an epoch inside the Spark work that computes them.

Each source's and transform's DataFrame of the epoch gets a Spark `Observation`: aggregates computed by the tasks
that run it and merged on the driver when the first action over it finishes, which is exactly once per successful
Spark job, whatever retried. Nothing extra is computed and no rows are collected: the count rides along with the
sinks' own actions. When a node's live sample is due, the same observation also keeps ``N`` of its rows picked at
random (`max_by` over a random number: a bounded heap per task), so the driver never sees more than ``N`` rows per
task. A source whose rows carry a timestamp (Kafka's ``_timestamp``) also reports the newest one, for the commit lag.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import logging
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import DataFrame, Observation
from pyspark.sql import functions as F

log = logging.getLogger("streamling.telemetry")


@dataclass
class EpochFigures:
    """What the observations of one epoch found, per node."""

    rows: dict[str, int] = field(default_factory=dict)
    samples: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    event_time_ms: int | None = None


class EpochTap:
    """One epoch's observations. `observe` wraps each node's DataFrame as `Plan.evaluate` builds it; `figures`,
    called after every sink staged (every action ran), reads what completed."""

    def __init__(self, sample: frozenset[str], sample_size: int, event_time: Mapping[str, str]) -> None:
        self.sample = sample
        self.sample_size = sample_size
        self.event_time = event_time
        self._observed: dict[str, tuple[Observation, list[str]]] = {}

    def observe(self, node: str, frame: DataFrame) -> DataFrame:
        if node in self._observed:  # a node evaluated twice in one epoch keeps its first observation
            return frame
        observation = Observation(f"streamling:{node}:{uuid.uuid4().hex[:12]}")
        metrics = [F.count(F.lit(1)).alias("rows")]
        timestamp = self.event_time.get(node)
        if timestamp is not None and timestamp in frame.columns:
            metrics.append(F.max(F.col(f"`{timestamp}`")).alias("event_time"))
        columns = list(frame.columns)
        pick = None
        if node in self.sample and columns:
            pick = f"__sl_pick_{uuid.uuid4().hex[:8]}"
            frame = frame.withColumn(pick, F.rand())
            row = F.struct(*[F.col(f"`{c.replace('`', '``')}`") for c in columns])
            metrics.append(F.max_by(row, F.col(pick), self.sample_size).alias("sample"))
        observed = frame.observe(observation, *metrics)
        if pick is not None:
            observed = observed.drop(pick)
        self._observed[node] = (observation, columns)
        return observed

    def figures(self) -> EpochFigures:
        out = EpochFigures()
        for node, (observation, columns) in self._observed.items():
            try:
                if not observation._jo.future().isCompleted():  # no action computed this node in this epoch
                    continue
                result = observation.get
            except Exception as exc:  # never fail an epoch over a figure
                log.debug("node '%s': observation not read: %s", node, exc)
                continue
            out.rows[node] = int(result["rows"])
            if "sample" in result:
                out.samples[node] = [_plain_row(row, columns) for row in result["sample"] or []]
            stamp = result.get("event_time")
            if isinstance(stamp, dt.datetime):
                ms = int(stamp.timestamp() * 1000)
                out.event_time_ms = ms if out.event_time_ms is None else max(out.event_time_ms, ms)
        return out


def _plain_row(row: Any, columns: list[str]) -> dict[str, Any]:
    return {name: plain(value) for name, value in zip(columns, row, strict=False)}


def plain(value: Any) -> Any:
    """A Spark value as JSON can carry it: nested rows and maps as objects, times in ISO 8601, decimals as text (no
    precision lost), bytes in base64."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if hasattr(value, "asDict"):
        return {k: plain(v) for k, v in value.asDict(recursive=False).items()}
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(bytes(value)).decode()
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    return str(value)
