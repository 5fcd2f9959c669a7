"""The per-node metrics, exported with the OpenTelemetry SDK: to a collector over OTLP (http/protobuf, http/json or
grpc) and, when the admin API is on, as Prometheus text at ``/metrics``.

Instruments (every series tagged with the node's tags and the global tags):

- ``output_rows_total`` (cumulative counter), ``output_rows_delta`` (counter, delta temporality), ``output_rows_rate``
  (gauge, rows/s over the last 10 s) and ``output_rows_latency`` (histogram, ms: a source's epoch, a sink's write, a
  handler's or webhook's request, a script's batch) for every node;
- ``epoch_duration`` (histogram, ms), ``commit_lag`` (gauge, ms: now minus the newest committed source timestamp) and
  ``consumer_lag`` (gauge, records, per ``partition``) for sources;
- ``dead_lettered_rows_total``, ``rejected_rows_total`` and ``retries_total`` (cumulative counters) for every node.

Rows are added when their epoch commits (see `RunTelemetry`). A collector that is down or slow only delays the SDK's
export thread; the first failed export logs one warning and the first successful one after it one line.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from opentelemetry.metrics import Observation
from opentelemetry.sdk.metrics import Counter, Histogram, MeterProvider
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    MetricExporter,
    MetricExportResult,
    MetricReader,
    MetricsData,
    PeriodicExportingMetricReader,
)
from opentelemetry.sdk.resources import Resource

from streamling.config.model import OpenTelemetryMetricsSettings
from streamling.telemetry.stats import RunStats

log = logging.getLogger("streamling.telemetry")

OUTPUT_ROWS_TOTAL = "output_rows_total"
OUTPUT_ROWS_DELTA = "output_rows_delta"
OUTPUT_ROWS_RATE = "output_rows_rate"
OUTPUT_ROWS_LATENCY = "output_rows_latency"
EPOCH_DURATION = "epoch_duration"
COMMIT_LAG = "commit_lag"
CONSUMER_LAG = "consumer_lag"
RESTARTS = "restarts"
COUNTER_METRICS = {
    "dead_lettered": "dead_lettered_rows_total",
    "rejected": "rejected_rows_total",
    "retries": "retries_total",
    "records_lost": "records_lost_total",
}
LATENCY_BUCKETS_MS = (1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000)
EXPORTER_LOGGERS = ("opentelemetry.exporter", "opentelemetry.sdk.metrics._internal.export")
"""The SDK's own loggers, which would log every failed export; the watcher says it once per outage instead."""


class ExportWatch(MetricExporter):
    """Wraps an exporter: one WARNING when exports start failing, one INFO when they work again."""

    def __init__(self, inner: MetricExporter, where: str) -> None:
        super().__init__(
            preferred_temporality=inner._preferred_temporality, preferred_aggregation=inner._preferred_aggregation
        )
        self.inner = inner
        self.where = where
        self.failures = 0
        self.exports = 0
        self.last_reason = ""
        self.down = False

    def export(self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: Any) -> MetricExportResult:
        try:
            result = self.inner.export(metrics_data, timeout_millis=timeout_millis, **kwargs)
        except Exception as exc:  # a broken exporter must not end the SDK's thread
            self.last_reason = str(exc) or type(exc).__name__
            result = MetricExportResult.FAILURE
        if result is MetricExportResult.SUCCESS:
            self.exports += 1
            if self.down:
                self.down = False
                log.info("Metrics export to %s works again (%d failed exports)", self.where, self.failures)
            return result
        self.failures += 1
        if not self.down:
            self.down = True
            reason = f": {self.last_reason}" if self.last_reason else ""
            log.warning(
                "Metrics export to %s failed%s; the pipeline goes on and every export retries (no further warnings "
                "until it works again)",
                self.where,
                reason,
            )
        return result

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return self.inner.force_flush(timeout_millis)

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        self.inner.shutdown(timeout_millis=timeout_millis, **kwargs)


class _Quiet(logging.Handler):
    """Takes the SDK exporters' messages out of the logs (their loggers stop propagating while a run exports),
    keeping the last one as the reason of an outage."""

    def __init__(self, watch: ExportWatch) -> None:
        super().__init__(logging.WARNING)
        self.watch = watch

    def emit(self, record: logging.LogRecord) -> None:
        self.watch.last_reason = record.getMessage().splitlines()[0][:300]

    def attach(self) -> None:
        for name in EXPORTER_LOGGERS:
            logger = logging.getLogger(name)
            logger.addHandler(self)
            logger.propagate = False

    def detach(self) -> None:
        for name in EXPORTER_LOGGERS:
            logger = logging.getLogger(name)
            logger.removeHandler(self)
            logger.propagate = not logger.handlers


def otlp_exporter(settings: OpenTelemetryMetricsSettings, endpoint: str) -> MetricExporter:
    """The official OTLP exporter for the protocol; counters other than ``output_rows_delta`` are observable
    (cumulative), so DELTA for synchronous counters applies to that one alone."""
    temporality = {Counter: AggregationTemporality.DELTA, Histogram: AggregationTemporality.CUMULATIVE}
    timeout = settings.export_timeout_secs
    if settings.endpoint_protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter as Grpc

        return Grpc(
            endpoint=endpoint,
            insecure=endpoint.startswith("http://"),
            timeout=timeout,
            preferred_temporality=temporality,
        )
    if settings.endpoint_protocol == "http/json":
        from opentelemetry.exporter.otlp.json.http.metric_exporter import OTLPMetricExporter as Json

        return Json(endpoint=endpoint, timeout=timeout, preferred_temporality=temporality)
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter as Protobuf

    return Protobuf(endpoint=endpoint, timeout=timeout, preferred_temporality=temporality)


class NodeMetrics:
    """The instruments on one MeterProvider, recorded per node."""

    def __init__(
        self,
        provider: MeterProvider,
        stats: RunStats,
        attributes: Mapping[str, Mapping[str, str]],
        denied: Callable[[str], bool],
        with_delta: bool,
        global_tags: Mapping[str, str],
    ) -> None:
        self.provider = provider
        self.stats = stats
        self.attributes = attributes
        meter = provider.get_meter("streamling")
        self.denied = denied
        sources = [name for name, info in attributes.items() if info["topology_node_type"] == "source"]

        def observable(
            kind: Callable[..., Any], name: str, read: Callable[[], Iterable[Observation]], **kw: Any
        ) -> None:
            if not denied(name):
                kind(name, callbacks=[lambda _options: list(read())], **kw)

        observable(
            meter.create_observable_counter,
            OUTPUT_ROWS_TOTAL,
            lambda: (Observation(n.rows_total, attributes[k]) for k, n in stats.nodes.items()),
            unit="{row}",
            description="Rows a node put out, since the process started (committed epochs)",
        )
        observable(
            meter.create_observable_gauge,
            OUTPUT_ROWS_RATE,
            lambda: (Observation(stats.rate(k), attributes[k]) for k in stats.nodes),
            unit="{row}/s",
            description="Rows per second a node put out over the last 10 seconds",
        )
        observable(
            meter.create_observable_gauge,
            COMMIT_LAG,
            lambda: self._commit_lag(sources),
            unit="ms",
            description="Now minus the newest committed source timestamp",
        )
        observable(
            meter.create_observable_gauge,
            CONSUMER_LAG,
            lambda: self._consumer_lag(sources),
            unit="{record}",
            description="Records after the committed position, per partition",
        )
        pipeline = {**global_tags, "pipeline": stats.pipeline}
        observable(
            meter.create_observable_counter,
            RESTARTS,
            lambda: [Observation(stats.restarts, pipeline)],
            unit="{restart}",
            description="Times the run restarted from its last committed epochs after a failure not the user's own",
        )
        for counter, metric in COUNTER_METRICS.items():
            observable(
                meter.create_observable_counter,
                metric,
                lambda counter=counter: (
                    Observation(n.counters.get(counter, 0), attributes[k]) for k, n in stats.nodes.items()
                ),
                unit="{row}" if counter != "retries" else "{retry}",
            )
        self.delta = (
            meter.create_counter(
                OUTPUT_ROWS_DELTA, unit="{row}", description="Rows a node put out since the last export"
            )
            if with_delta and not denied(OUTPUT_ROWS_DELTA)
            else None
        )
        self.latency = (
            None
            if denied(OUTPUT_ROWS_LATENCY)
            else meter.create_histogram(
                OUTPUT_ROWS_LATENCY,
                unit="ms",
                description="A source's epoch, a sink's write, a handler's or webhook's request, a script's batch",
                explicit_bucket_boundaries_advisory=LATENCY_BUCKETS_MS,
            )
        )
        self.epoch = (
            None
            if denied(EPOCH_DURATION)
            else meter.create_histogram(
                EPOCH_DURATION,
                unit="ms",
                description="A source's epoch from its start to its commit",
                explicit_bucket_boundaries_advisory=LATENCY_BUCKETS_MS,
            )
        )

    def _commit_lag(self, sources: list[str]) -> Iterable[Observation]:
        now_ms = time.time() * 1000
        for name in sources:
            stamp = self.stats.sources[name].event_time_ms
            if stamp is not None:
                yield Observation(max(0.0, now_ms - stamp), self.attributes[name])

    def _consumer_lag(self, sources: list[str]) -> Iterable[Observation]:
        for name in sources:
            for partition, lag in (self.stats.sources[name].backlog or {}).items():
                yield Observation(lag, {**self.attributes[name], "partition": str(partition)})

    def rows(self, node: str, count: int) -> None:
        if self.delta is not None:
            self.delta.add(count, self.attributes[node])

    def latencies(self, node: str, values: Iterable[float]) -> None:
        if self.latency is not None:
            for value in values:
                self.latency.record(value, self.attributes[node])

    def epoch_duration(self, source: str, milliseconds: float) -> None:
        if self.epoch is not None:
            self.epoch.record(milliseconds, self.attributes[source])


class Metrics:
    """The run's metric export: an OTLP provider when an endpoint is set, a Prometheus one when the admin API
    serves ``/metrics``. Both read the same `RunStats`; recording goes to each."""

    def __init__(
        self, settings: OpenTelemetryMetricsSettings, application_id: str, stats: RunStats, prometheus: bool
    ) -> None:
        self.settings = settings
        patterns = [re.compile(p) for p in settings.metric_deny_list]
        denied = lambda name: any(p.search(name) for p in patterns)  # noqa: E731
        attributes = {name: {**settings.global_tags, **dict(node.info.tags)} for name, node in stats.nodes.items()}
        resource = Resource.create({"service.name": "streamling", "service.instance.id": application_id})
        self.watch: ExportWatch | None = None
        self._quiet: _Quiet | None = None
        self.sets: list[NodeMetrics] = []
        self.registry: Any = None
        endpoint = settings.endpoint
        if endpoint is not None:
            self.watch = ExportWatch(otlp_exporter(settings, endpoint), f"{endpoint} ({settings.endpoint_protocol})")
            self._quiet = _Quiet(self.watch)
            self._quiet.attach()
            reader = PeriodicExportingMetricReader(
                self.watch,
                export_interval_millis=settings.batch_interval_secs * 1000,
                export_timeout_millis=settings.export_timeout_secs * 1000,
            )
            self.sets.append(
                NodeMetrics(_provider(reader, resource), stats, attributes, denied, True, settings.global_tags)
            )
        if prometheus:
            from opentelemetry.exporter.prometheus import PrometheusMetricReader
            from prometheus_client import CollectorRegistry

            self.registry = CollectorRegistry()
            reader = PrometheusMetricReader(prefix="streamling", registry=self.registry)
            # Prometheus has no delta temporality: the scrape shows output_rows_total and the rest.
            self.sets.append(
                NodeMetrics(_provider(reader, resource), stats, attributes, denied, False, settings.global_tags)
            )

    def rows(self, node: str, count: int) -> None:
        for metrics in self.sets:
            metrics.rows(node, count)

    def latencies(self, node: str, values: Iterable[float]) -> None:
        for metrics in self.sets:
            metrics.latencies(node, values)

    def epoch_duration(self, source: str, milliseconds: float) -> None:
        for metrics in self.sets:
            metrics.epoch_duration(source, milliseconds)

    def prometheus_text(self) -> bytes:
        from prometheus_client import generate_latest

        return generate_latest(self.registry) if self.registry is not None else b""

    def shutdown(self) -> None:
        """Export what is left (bounded by the export timeout, or a second when the collector is already known to be
        down: the run's end waits for no absent collector), then stop the SDK's threads."""
        down = self.watch is not None and self.watch.down
        timeout_ms = 1000 if down else self.settings.export_timeout_secs * 1000
        for metrics in self.sets:
            try:
                metrics.provider.shutdown(timeout_millis=timeout_ms)
            except Exception as exc:  # the run is over either way
                log.debug("metrics shutdown: %s", exc)
        if self._quiet is not None:
            self._quiet.detach()


def _provider(reader: MetricReader, resource: Resource) -> MeterProvider:
    return MeterProvider(metric_readers=[reader], resource=resource, shutdown_on_exit=False)
