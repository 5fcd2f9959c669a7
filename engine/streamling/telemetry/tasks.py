"""What Spark tasks report about a node besides its rows: request and batch latencies, retries, dead-lettered and
rejected rows.

Rows are counted by Spark itself (`telemetry/observe.py`); these figures happen inside operator code, often on the
executors (an HTTP request in a ``mapInArrow`` task, a dead letter in the Kafka reader), so they travel back the way
Spark returns task results: one PySpark accumulator per run, merged on the driver as each task finishes. A
`NodeRecorder` is that accumulator plus the node's name; operators carry it in what they ship to the tasks (a write
plan, a reader's class). On the driver the same calls add to it directly. The driver drains what arrived since the
last drain at each epoch commit; these figures are timely, not tied to an epoch (a retried task may report twice).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

COUNTERS = ("retries", "dead_lettered", "rejected", "records_lost")
"""``retries``: attempts repeated after a transient failure (HTTP requests, Postgres writes). ``dead_lettered``: rows
routed to a dead-letter target. ``rejected``: rows a sink's destination refused (dead-lettered by a sink).
``records_lost``: records a Kafka source skipped under ``on_data_loss: skip`` because the broker deleted them."""

MAX_LATENCIES = 10_000
"""Latency values one task keeps per node; beyond, every other value is dropped (a histogram needs no more)."""


@dataclass
class TaskStats:
    """Latencies (ms) and counters per node, merged across tasks; thread-safe (tasks of a worker and the driver's
    accumulator server add concurrently with the drain)."""

    latencies: dict[str, list[float]] = field(default_factory=dict)
    counters: dict[tuple[str, str], int] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def merge(self, other: TaskStats) -> TaskStats:
        with self._lock:
            for node, values in other.latencies.items():
                kept = self.latencies.setdefault(node, [])
                kept.extend(values)
                if len(kept) > MAX_LATENCIES:
                    del kept[::2]
            for key, count in other.counters.items():
                self.counters[key] = self.counters.get(key, 0) + count
        return self

    def drain(self) -> TaskStats:
        """Everything gathered so far, leaving this empty."""
        with self._lock:
            out = TaskStats(self.latencies, self.counters)
            self.latencies, self.counters = {}, {}
        return out

    def __getstate__(self) -> dict[str, Any]:
        with self._lock:
            return {"latencies": self.latencies, "counters": self.counters}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.latencies, self.counters = state["latencies"], state["counters"]
        self._lock = threading.Lock()


class TaskStatsParam:
    """How the accumulator merges (PySpark's ``AccumulatorParam`` protocol, duck-typed so this module needs no
    pyspark import)."""

    def zero(self, value: TaskStats) -> TaskStats:
        return TaskStats()

    def addInPlace(self, value1: TaskStats, value2: TaskStats) -> TaskStats:
        return value1.merge(value2)


class TaskChannel:
    """The run's accumulator (driver side): recorders for nodes, and the drain."""

    def __init__(self, spark_context: Any) -> None:
        self._accumulator = spark_context.accumulator(TaskStats(), TaskStatsParam())

    def recorder(self, node: str) -> NodeRecorder:
        return NodeRecorder(node, self._accumulator)

    def drain(self) -> TaskStats:
        return self._accumulator._value.drain()


@dataclass(frozen=True)
class NodeRecorder:
    """A node's way to report from anywhere (driver or task); picklable. Without an accumulator (telemetry off,
    validation, unit tests) every call does nothing."""

    node: str
    accumulator: Any = None

    @property
    def active(self) -> bool:
        return self.accumulator is not None

    def latency(self, milliseconds: float) -> None:
        if self.accumulator is not None:
            self.accumulator.add(TaskStats(latencies={self.node: [float(milliseconds)]}))

    def latencies(self, milliseconds: list[float]) -> None:
        if self.accumulator is not None and milliseconds:
            self.accumulator.add(TaskStats(latencies={self.node: [float(m) for m in milliseconds]}))

    def count(self, counter: str, n: int = 1) -> None:
        if self.accumulator is not None and n:
            self.accumulator.add(TaskStats(counters={(self.node, counter): int(n)}))


OFF = NodeRecorder("")
"""The recorder of a node nobody listens to."""
