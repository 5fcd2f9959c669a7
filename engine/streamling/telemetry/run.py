"""One run's telemetry: what the runtime tells it, and where that goes.

The runtime calls `tap` when an epoch starts (the observations that count and sample each node's rows),
`epoch_committed` after the epoch's positions are in the state backend, and `backlog` when a source learns its lag.
Only committed epochs count: an epoch that fails before its commit adds nothing, and its replay after a restart is
counted once, when it commits. What arrives goes to the live figures (`RunStats`, which the admin API serves), to the
metric export (`Metrics`) and, drained at each commit, the figures Spark tasks reported (`TaskChannel`).

Off (no collector, no admin API) nothing is observed and nothing is exported: the Spark plans are untouched.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from streamling.config import Settings
from streamling.telemetry.nodes import NodeInfo, node_infos
from streamling.telemetry.stats import RunStats
from streamling.telemetry.tasks import OFF, NodeRecorder, TaskChannel

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from streamling.operators import Epoch
    from streamling.runtime.plan import Plan
    from streamling.telemetry.admin import AdminServer
    from streamling.telemetry.metrics import Metrics
    from streamling.telemetry.observe import EpochFigures, EpochTap

log = logging.getLogger("streamling.telemetry")
SAMPLE_OVERDRAW = 8
STARVED_BOOST = 64
EVENT_TIME_COLUMN = "_timestamp"
"""A source column of this name (a Kafka source's record timestamp) is the source timestamp the commit lag uses."""


class RunTelemetry:
    def __init__(self, settings: Settings, plan: Plan, spark: SparkSession | None = None) -> None:
        self.settings = settings
        self.plan = plan
        self.enabled = settings.telemetry_enabled
        self.nodes: dict[str, NodeInfo] = node_infos(plan)
        inspect = settings.live_data_inspect
        self.stats = RunStats(plan.pipeline.name, self.nodes, inspect.records_per_topology_node)
        self.sample_every = (
            inspect.refresh_in_secs if settings.live_data_inspect_enabled and settings.admin_api_port else None
        )
        self._sampled: dict[str, float] = {}
        self._boost: dict[str, float] = {}
        """Per node, how much more of its rows compete than the overdraw asks for: multiplied by `STARVED_BOOST` each
        time a sample comes back empty although rows passed (rows repeat, so few distinct hashes exist), kept after."""
        self._sample_lock = threading.Lock()
        self.event_time = {
            name: EVENT_TIME_COLUMN
            for name, info in self.nodes.items()
            if info.kind == "source"
            and any(f.get("name") == EVENT_TIME_COLUMN for f in (info.schema or {}).get("fields", []))
        }
        self.metrics: Metrics | None = None
        self.tasks: TaskChannel | None = None
        self.admin: AdminServer | None = None
        if not self.enabled:
            return
        prometheus = bool(settings.admin_api_port) and settings.prometheus_metrics_enabled
        if settings.open_telemetry_metrics.endpoint is not None or prometheus:
            from streamling.telemetry.metrics import Metrics

            self.metrics = Metrics(settings.open_telemetry_metrics, settings.application_id, self.stats, prometheus)
        if spark is not None:
            self.tasks = TaskChannel(spark.sparkContext)

    # -- lifecycle --

    def open(self) -> None:
        """Start the admin API (before the lease: a second run's health endpoint answers while it waits)."""
        if self.settings.admin_api_port:
            from streamling.telemetry.admin import AdminServer

            self.admin = AdminServer(self, self.settings.admin_api_host, self.settings.admin_api_port)
            self.admin.start()

    def running(self, positions: Mapping[str, Mapping[str, Any]]) -> None:
        """Every source's query started; `positions` are where each starts."""
        for source, position in positions.items():
            self.stats.sources[source].position = dict(position)
        self.stats.started()

    def close(self, failure: str | None = None) -> None:
        self.stats.stop(failure)
        self._drain_tasks()
        if self.metrics is not None:
            self.metrics.shutdown()
        if self.admin is not None:
            self.admin.stop()

    @property
    def url(self) -> str | None:
        """The admin page's address, once it listens."""
        return self.admin.url if self.admin is not None else None

    # -- what operators and the runtime report --

    def recorder(self, node: str) -> NodeRecorder:
        return self.tasks.recorder(node) if self.tasks is not None else OFF

    def tap(self, source: str, epoch_rows: int | None = None) -> EpochTap | None:
        """The observations for one epoch of `source` (`epoch_rows`: its rows, when its positions tell), or None when
        telemetry is off. Sampling happens for the nodes whose live rows are older than
        ``live_data_inspect.refresh_in_secs``."""
        if not self.enabled:
            return None
        from streamling.telemetry.observe import EpochTap

        size = self.settings.live_data_inspect.records_per_topology_node
        due: dict[str, float] = {}
        if self.sample_every is not None:
            now = time.monotonic()
            with self._sample_lock:
                for name in [source, *self.plan.downstream[source]]:
                    if self.nodes[name].kind != "sink" and now - self._sampled.get(name, -1e18) >= self.sample_every:
                        due[name] = self._share(name, size, epoch_rows, name == source)
                        self._sampled[name] = now
        self.stats.epoch_started(source)
        if due:
            log.debug("epoch of %s samples %s", source, ", ".join(f"'{n}' (share {s:.2g})" for n, s in due.items()))
        return EpochTap(due, size, self.event_time)

    def _share(self, node: str, size: int, epoch_rows: int | None, is_source: bool) -> float:
        """The share of a node's rows that compete for its sample: about `SAMPLE_OVERDRAW` times the rows kept, going
        by the rows expected — the source's rows in this epoch (`epoch_rows`, when its positions tell) for the source,
        the node's last committed epoch's for the others (before one, the source's). Every row competes when nothing
        tells; more after an empty sample although rows passed (fewer rows than expected, say behind a filter, or rows
        that repeat): every row competing would build a struct per row, several percent of a fast pipeline's time,
        while a larger share costs only the rows it lets in. Called under the sample lock."""
        commits = self.stats.nodes[node].commits
        expected = commits[-1][1] if commits and not is_source else epoch_rows
        if not expected:
            return 1.0
        return min(1.0, SAMPLE_OVERDRAW * size / expected * self._boost.get(node, 1.0))

    def epoch_committed(
        self,
        epoch: Epoch,
        figures: EpochFigures | None,
        sink_rows: Mapping[str, int],
        latencies: Mapping[str, float],
        duration_ms: float,
    ) -> None:
        """`epoch` is in the state backend: count its rows (a sink's are what it wrote; every other node's, what
        its observation counted), its latencies (a source's epoch, each sink's write) and its duration. Without
        telemetry (no figures: nothing was observed) the source's progress and the sinks' rows are still kept: the
        engine's `GET /runs` shows them."""
        source = epoch.source
        if figures is None:
            sinks = {n: int(sink_rows.get(n, 0)) for n in self.plan.downstream[source] if self.nodes[n].kind == "sink"}
            self.stats.epoch_committed(source, epoch.end, sinks, {}, epoch.timestamp_ms, duration_ms)
            return
        rows: dict[str, int] = {}
        samples = dict(figures.samples)
        for name in [source, *self.plan.downstream[source]]:
            info = self.nodes[name]
            if info.kind == "sink":
                rows[name] = int(sink_rows.get(name, 0))
                if info.inputs and info.inputs[0] in figures.samples:
                    samples[name] = figures.samples[info.inputs[0]]
            else:
                rows[name] = figures.rows.get(name, 0)
        for name, sampled in figures.samples.items():
            if rows.get(name) and not sampled:
                with self._sample_lock:
                    self._boost[name] = self._boost.get(name, 1.0) * STARVED_BOOST
                log.debug(
                    "node '%s': no row sampled among %d; %gx more rows compete from now",
                    name,
                    rows[name],
                    self._boost[name],
                )
        event_ms = figures.event_time_ms if figures.event_time_ms is not None else epoch.timestamp_ms
        self.stats.epoch_committed(source, epoch.end, rows, samples, event_ms, duration_ms)
        for name, milliseconds in latencies.items():
            self.stats.latency(name, milliseconds)
        if self.metrics is not None:
            for name, count in rows.items():
                self.metrics.rows(name, count)
            for name, milliseconds in latencies.items():
                self.metrics.latencies(name, [milliseconds])
            self.metrics.epoch_duration(source, duration_ms)
        self._drain_tasks()

    def _drain_tasks(self) -> None:
        if self.tasks is None:
            return
        drained = self.tasks.drain()
        if not (drained.latencies or drained.counters):
            return
        self.stats.tasks(drained)
        if self.metrics is not None:
            for node, values in drained.latencies.items():
                if node in self.nodes:
                    self.metrics.latencies(node, values)

    def backlog(self, source: str, per_partition: Mapping[Any, int] | None) -> None:
        if source in self.stats.sources:
            self.stats.backlog(source, per_partition)

    def restarted(self, error: str) -> None:
        """The run restarts from its last committed epochs after `error` (the ``restarts`` metric counts it)."""
        self.stats.restarted(error)

    def caught_up(self, source: str, idle: bool) -> None:
        if source in self.stats.sources:
            self.stats.caught_up(source, idle)
