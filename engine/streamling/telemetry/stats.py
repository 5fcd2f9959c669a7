"""The run's live figures, per node and per source: what the admin API shows and the metrics' gauges read.

Everything here changes only when an epoch commits (rows, positions, samples) or when a reporter says so (backlog,
task figures), on the committer and reporter threads; the admin API reads from its own threads. One lock guards
it all, and a condition wakes the API's streams when something changed (`version`).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from streamling.telemetry.nodes import NodeInfo
from streamling.telemetry.tasks import COUNTERS, TaskStats

RATE_WINDOW_SEC = 10.0
"""`rate` is the rows committed over this window, per second."""
HISTORY_SEC = 120.0
SPARKLINE_POINTS = 60
"""The page's sparkline: rows per second, one point per second, for the last minute."""


@dataclass
class NodeStats:
    info: NodeInfo
    rows_total: int = 0
    epochs: int = 0
    last_rows_at: float | None = None
    commits: deque[tuple[float, int]] = field(default_factory=deque)
    """(wall time, rows) of recent commits, for the rate and the sparkline."""
    latency_ms: float | None = None
    """The last latency reported (a source's epoch, a sink's write, a handler's request)."""
    counters: dict[str, int] = field(default_factory=lambda: dict.fromkeys(COUNTERS, 0))
    sample: list[dict[str, Any]] = field(default_factory=list)
    sampled_at: float | None = None


@dataclass
class SourceStats:
    epochs: int = 0
    committed_at: float | None = None
    position: dict[str, Any] = field(default_factory=dict)
    in_flight_since: float | None = None
    """When the epoch being computed or finished started (None between epochs)."""
    event_time_ms: int | None = None
    """The newest committed source timestamp (a Kafka record's, else the epoch's planning time)."""
    epoch_ms: float | None = None
    backlog: dict[str, int] | None = None
    backlog_at: float | None = None
    caught_up: bool = False
    """Its query found no new data on its last look (an idle topic is not a stalled source)."""


class RunStats:
    def __init__(self, pipeline: str, nodes: Mapping[str, NodeInfo], sample_size: int = 15) -> None:
        self.pipeline = pipeline
        self.sample_size = sample_size
        self.nodes = {name: NodeStats(info) for name, info in nodes.items()}
        self.sources = {name: SourceStats() for name, info in nodes.items() if info.kind == "source"}
        self.started_at = time.time()
        self.running_since: float | None = None
        """When every source's query had started (the lease taken, the operators initialised)."""
        self.first_commit_at: float | None = None
        self.stopping = False
        self.failure: str | None = None
        self.restarts = 0
        """Times the run restarted from its last committed epochs (`runtime/restarts.py`)."""
        self.last_error: str | None = None
        """What the last restart was for."""
        self.version = 0
        self._changed = threading.Condition()

    # -- writers (runtime threads) --

    def _bump(self) -> None:
        """Under `_changed`: something a reader may show changed."""
        self.version += 1
        self._changed.notify_all()

    def started(self) -> None:
        with self._changed:
            self.running_since = time.time()
            self._bump()

    def epoch_started(self, source: str) -> None:
        with self._changed:
            self.sources[source].in_flight_since = time.time()
            self.sources[source].caught_up = False

    def epoch_committed(
        self,
        source: str,
        position: Mapping[str, Any],
        rows: Mapping[str, int],
        samples: Mapping[str, list[dict[str, Any]]],
        event_time_ms: int | None,
        epoch_ms: float,
    ) -> None:
        now = time.time()
        with self._changed:
            stats = self.sources[source]
            stats.epochs += 1
            stats.committed_at = now
            stats.position = dict(position)
            stats.in_flight_since = None
            stats.epoch_ms = epoch_ms
            if event_time_ms is not None and (stats.event_time_ms is None or event_time_ms > stats.event_time_ms):
                stats.event_time_ms = event_time_ms
            self.first_commit_at = self.first_commit_at or now
            for name, count in rows.items():
                node = self.nodes[name]
                node.rows_total += count
                node.epochs += 1
                if count:
                    node.last_rows_at = now
                node.commits.append((now, count))
                while node.commits and node.commits[0][0] < now - HISTORY_SEC:
                    node.commits.popleft()
            for name, rows_seen in samples.items():
                node = self.nodes[name]
                node.sample = (
                    (rows_seen + node.sample)[: self.sample_size] if len(rows_seen) < self.sample_size else rows_seen
                )
                node.sampled_at = now
            self._bump()

    def latency(self, node: str, milliseconds: float) -> None:
        with self._changed:
            self.nodes[node].latency_ms = milliseconds

    def tasks(self, stats: TaskStats) -> None:
        with self._changed:
            for node, values in stats.latencies.items():
                if node in self.nodes and values:
                    self.nodes[node].latency_ms = values[-1]
            for (node, counter), count in stats.counters.items():
                if node in self.nodes:
                    self.nodes[node].counters[counter] = self.nodes[node].counters.get(counter, 0) + count

    def backlog(self, source: str, per_partition: Mapping[str, int] | None) -> None:
        with self._changed:
            stats = self.sources[source]
            stats.backlog = None if per_partition is None else {str(k): int(v) for k, v in per_partition.items()}
            stats.backlog_at = time.time()

    def caught_up(self, source: str, idle: bool) -> None:
        with self._changed:
            self.sources[source].caught_up = idle

    def restarted(self, error: str) -> None:
        with self._changed:
            self.restarts += 1
            self.last_error = error
            for stats in self.sources.values():
                stats.in_flight_since = None
            self._bump()

    def stop(self, failure: str | None = None) -> None:
        with self._changed:
            self.stopping = True
            self.failure = failure
            self._bump()

    # -- readers (admin API, gauges) --

    def wait(self, version: int, timeout: float) -> int:
        """Block until something changed after `version` (or `timeout`); the new version."""
        with self._changed:
            self._changed.wait_for(lambda: self.version != version, timeout)
            return self.version

    def rate(self, node: str, now: float | None = None) -> float:
        """Rows per second committed over the last `RATE_WINDOW_SEC` (or since the run started, when shorter)."""
        now = time.time() if now is None else now
        with self._changed:
            commits = list(self.nodes[node].commits)
        window = min(RATE_WINDOW_SEC, max(now - self.started_at, 1e-3))
        return sum(rows for at, rows in commits if at > now - window) / window

    def sparkline(self, node: str, now: float | None = None) -> list[float]:
        """Rows committed in each of the last `SPARKLINE_POINTS` seconds, oldest first."""
        now = time.time() if now is None else now
        points = [0.0] * SPARKLINE_POINTS
        with self._changed:
            commits = list(self.nodes[node].commits)
        for at, rows in commits:
            age = int(now - at)
            if 0 <= age < SPARKLINE_POINTS:
                points[SPARKLINE_POINTS - 1 - age] += rows
        return points

    def stalled(self, limit_sec: float, now: float | None = None) -> dict[str, str]:
        """Sources stalled past `limit_sec`, with why: an epoch in flight that long, or records waiting (a known
        backlog) with nothing committed for that long."""
        now = time.time() if now is None else now
        out: dict[str, str] = {}
        with self._changed:
            for name, source in self.sources.items():
                if source.in_flight_since is not None and now - source.in_flight_since > limit_sec:
                    out[name] = f"an epoch has been in flight for {now - source.in_flight_since:.0f}s"
                    continue
                waiting = sum((source.backlog or {}).values())
                since = source.committed_at or self.running_since or self.started_at
                if waiting and not source.caught_up and now - since > limit_sec:
                    out[name] = f"{waiting} records waiting and nothing committed for {now - since:.0f}s"
        return out

    def ready(self) -> bool:
        """Ready once the first epoch committed, or every source started and found nothing to read."""
        with self._changed:
            if self.stopping or self.running_since is None:
                return False
            return self.first_commit_at is not None or all(s.caught_up for s in self.sources.values())
