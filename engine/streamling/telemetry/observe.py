"""Counting (and sampling) every node's rows of an epoch inside the Spark work that computes them.

Each source's and transform's DataFrame of the epoch gets a Spark `Observation`: aggregates computed by the tasks
that run it and merged on the driver when the first action over it finishes, which is exactly once per successful
Spark job, whatever retried. Nothing extra is computed and no rows are collected: the count rides along with the
sinks' own actions. When a node's live sample is due, the same observation also keeps ``N`` of its rows (`max_by`
over a salted hash: a bounded heap per task, fed only by the few rows whose hash passes a cheap test), so the driver
never sees more than ``N`` rows per task. A source whose rows carry a timestamp (Kafka's
``_timestamp``) also reports the newest one, for the commit lag.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import logging
import math
import random
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import Column, DataFrame, Observation
from pyspark.sql import functions as F
from pyspark.sql import types as T

log = logging.getLogger("streamling.telemetry")
SHARE_BITS = 30
HASHED_COLUMNS = 4
"""The columns a row's sampling hash covers: enough that a low-cardinality first column (a status, a country) still
leaves rows distinct, few enough to stay cheap (the hash is evaluated for every row of a sampled epoch)."""
SALT = random.getrandbits(31)
"""One per process: Spark compiles the code of each distinct expression once, and a new literal every epoch would cost
a compilation every epoch. Which rows are picked changes with the rows themselves."""


@dataclass
class EpochFigures:
    """What the observations of one epoch found, per node."""

    rows: dict[str, int] = field(default_factory=dict)
    samples: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    event_time_ms: int | None = None


class EpochTap:
    """One epoch's observations. `observe` wraps each node's DataFrame as `Plan.evaluate` builds it; `figures`,
    called after every sink staged (every action ran), reads what completed."""

    def __init__(self, sample: Mapping[str, float], sample_size: int, event_time: Mapping[str, str]) -> None:
        self.sample = sample
        """Per node to sample in this epoch, the share of its rows that may enter the sample at all (so that only a
        few dozen rows per epoch are ever copied into a struct)."""
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
        share = self.sample.get(node)
        if share is not None and columns:
            metrics.append(self._sample(frame.schema, share).alias("sample"))
        self._observed[node] = (observation, columns)
        return frame.observe(observation, *metrics)

    def _sample(self, schema: T.StructType, share: float) -> Column:
        """`max_by(row, h, N)` over a salted hash `h` of the first few plain columns (maps cannot be hashed): inside
        the observation, with no column added (an extra projection would copy every row twice). Below share 1, only
        rows whose hash falls in the first `share` of its range compete; the others give max_by a NULL ordering,
        which it skips before it looks at the row (so their struct is never built)."""
        quoted = {f.name: F.col(f"`{f.name.replace('`', '``')}`") for f in schema.fields}
        plain = [quoted[f.name] for f in schema.fields if isinstance(f.dataType, T.AtomicType)][:HASHED_COLUMNS]
        row, hashed = F.struct(*quoted.values()), F.xxhash64(*plain, F.lit(SALT))
        if share >= 1:
            return F.max_by(row, hashed, self.sample_size)
        halvings = min(SHARE_BITS, math.ceil(-math.log2(share)))  # rounded up to a power of two (see SALT)
        below = F.lit(-(1 << 63) + (1 << (64 - halvings)))  # hashes are uniform over the signed 64-bit range
        return F.max_by(row, F.when(hashed < below, hashed), self.sample_size)

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
