"""The InMemory backend: a set on the driver, lost at restart.

Spark's Python workers are other processes (on a cluster, other machines), so they cannot see the
driver's memory. Each time the set has changed, the next lookup ships it as a new broadcast variable,
and the UDF registered for that version closes over it; workers fetch each version once.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark import Broadcast
    from pyspark.sql import SparkSession


@dataclass(frozen=True)
class MemoryLookup:
    """Executor side: the `udf.Lookup` over one broadcast version of the set (None: still empty)."""

    values: Broadcast[frozenset[str]] | None

    def contains(self, values: list[str]) -> set[str]:
        if self.values is None:
            return set()
        present = self.values.value
        return {v for v in values if v in present}


class MemorySet:
    """Driver side. Sources run their epochs on separate threads, hence the lock."""

    def __init__(self) -> None:
        self._values: set[str] = set()
        self._version = 0
        self._published: tuple[int, Broadcast[frozenset[str]] | None] = (0, None)
        self._lock = threading.Lock()

    def add(self, values: Iterable[str]) -> None:
        with self._lock:
            before = len(self._values)
            self._values.update(values)
            if len(self._values) != before:
                self._version += 1

    def snapshot(self, spark: SparkSession) -> tuple[int, MemoryLookup]:
        """The current version and a lookup over it, broadcasting the set if it changed since last time."""
        with self._lock:
            version, broadcast = self._published
            if version != self._version:
                previous = broadcast
                broadcast = spark.sparkContext.broadcast(frozenset(self._values))
                self._published = version, broadcast = self._version, broadcast
                if previous is not None:
                    previous.unpersist()  # executors drop their copy; a query still using it re-fetches it
            return version, MemoryLookup(broadcast)

    def release(self) -> None:
        with self._lock:
            _, broadcast = self._published
            if broadcast is not None:
                broadcast.unpersist()
            self._values.clear()
            self._version = 0
            self._published = (0, None)
