"""Telemetry pieces that need no Spark: the settings as the original wrote them, node tags and what the admin API may
show of a spec, the live figures (rate, sparkline, stalls, readiness, samples), the task figures' merge, the event
stream's parsing, and the Prometheus rendering of the instruments."""

from __future__ import annotations

import pickle
import tempfile
import threading
from pathlib import Path

import pytest

from streamling.config import load_settings
from streamling.errors import StreamlingError
from streamling.telemetry.follow import events
from streamling.telemetry.nodes import NodeInfo, public_spec
from streamling.telemetry.stats import RunStats
from streamling.telemetry.tasks import NodeRecorder, TaskStats, TaskStatsParam

EMPTY_CONFIG = Path(tempfile.mkdtemp()) / "empty.yaml"
EMPTY_CONFIG.write_text("{}\n")


def settings(**environ: str):
    return load_settings(config=str(EMPTY_CONFIG), environ=environ)


def test_the_originals_settings_and_the_standard_variables() -> None:
    s = settings(
        STREAMLING__OPEN_TELEMETRY_METRICS__INGESTION_ENDPOINT="http://localhost:4318/v1/metrics",
        STREAMLING__OPEN_TELEMETRY_METRICS__ENDPOINT_PROTOCOL="HTTP/JSON",
        STREAMLING__OPEN_TELEMETRY_METRICS__BATCH_INTERVAL_SECS="15",
        STREAMLING__OPEN_TELEMETRY_METRICS__GLOBAL_TAGS="environment:production, image_tag:v1.0.0",
        STREAMLING__OPEN_TELEMETRY_METRICS__METRIC_DENY_LIST="_delta$,^output_rows_rate$",
    )
    metrics = s.open_telemetry_metrics
    assert metrics.endpoint == "http://localhost:4318/v1/metrics" and metrics.endpoint_protocol == "http/json"
    assert metrics.batch_interval_secs == 15.0
    assert metrics.global_tags == {"environment": "production", "image_tag": "v1.0.0"}
    assert metrics.metric_deny_list == ["_delta$", "^output_rows_rate$"]
    assert s.telemetry_enabled and s.admin_api_url is None

    overridden = settings(
        STREAMLING__OPEN_TELEMETRY_METRICS__INGESTION_ENDPOINT="http://a:4318/v1/metrics",
        OTEL_EXPORTER_OTLP_METRICS_ENDPOINT="http://b:4317",
        OTEL_EXPORTER_OTLP_PROTOCOL="grpc",
    )
    assert overridden.open_telemetry_metrics.endpoint == "http://b:4317"
    assert overridden.open_telemetry_metrics.endpoint_protocol == "grpc"
    base = settings(OTEL_EXPORTER_OTLP_ENDPOINT="http://c:4318")
    assert base.open_telemetry_metrics.endpoint == "http://c:4318/v1/metrics"


def test_export_is_off_by_default_and_for_anything_but_a_url() -> None:
    default = settings()
    assert default.open_telemetry_metrics.ingestion_endpoint == "none"
    assert default.open_telemetry_metrics.endpoint is None and not default.telemetry_enabled
    assert default.startup_warnings() == []
    typo = settings(STREAMLING__OPEN_TELEMETRY_METRICS__INGESTION_ENDPOINT="localhost:4318")
    assert typo.open_telemetry_metrics.endpoint is None
    assert typo.startup_warnings() == [
        "open_telemetry_metrics.ingestion_endpoint = 'localhost:4318' is not an http(s) URL: metrics are not exported "
        "(write it as http://host:port/v1/metrics, or grpc's http://host:4317)"
    ]
    assert settings(STREAMLING__ADMIN_API_PORT="0").telemetry_enabled is False
    assert settings(STREAMLING__LIVE_DATA_INSPECT_ENABLED="true").startup_warnings() == [
        "setting live_data_inspect_enabled = true has no effect without admin_api_port: the live rows are served by "
        "the admin API"
    ]


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("GLOBAL_TAGS", "env:prod,broken", "'broken' is not key:value (write \"k1:v1,k2:v2\")"),
        ("GLOBAL_TAGS", "id:x", "tag 'id' is reserved"),
        ("GLOBAL_TAGS", "team-name:x", "tag 'team-name' must match ^[a-zA-Z_][a-zA-Z0-9_]*$"),
        ("METRIC_DENY_LIST", "ok,(broken", "'(broken' is not a regular expression"),
        ("ENDPOINT_PROTOCOL", "udp", "Input should be 'http/protobuf', 'http/json' or 'grpc'"),
        ("BATCH_INTERVAL_SECS", "0", "must be greater than 0"),
    ],
)
def test_bad_telemetry_settings_name_the_setting_and_value(name: str, value: str, message: str) -> None:
    with pytest.raises(StreamlingError) as info:
        settings(**{f"STREAMLING__OPEN_TELEMETRY_METRICS__{name}": value})
    assert f"open_telemetry_metrics.{name.lower()} = {value!r}" in info.value.message
    assert message in info.value.message


def test_admin_url_names_this_host_when_listening_everywhere() -> None:
    import socket

    assert settings(STREAMLING__ADMIN_API_PORT="3000").admin_api_url == "http://127.0.0.1:3000/"
    wide = settings(STREAMLING__ADMIN_API_PORT="3000", STREAMLING__ADMIN_API_HOST="0.0.0.0")
    assert wide.admin_api_url == f"http://{socket.gethostname()}:3000/"


def test_a_spec_as_the_admin_api_shows_it_hides_every_secret() -> None:
    spec = {
        "type": "webhook",
        "url": "https://user:pa55@hooks.example.com/x?token=abc&sig=def",
        "headers": {"Authorization": "Bearer abc", "X-Api-Key": "k", "X-Trace": "t"},
        "secret_name": "partner",
        "options": {"api_key": "k2", "password": "p", "region": "eu", "nested": [{"token": "t2"}]},
        "primary_key": ["id"],
    }
    shown = public_spec(spec)
    assert shown == {
        "type": "webhook",
        "url": "https://***@hooks.example.com/x?token=***&sig=***",
        "headers": {"Authorization": "***", "X-Api-Key": "***", "X-Trace": "t"},
        "secret_name": "partner",
        "options": {"api_key": "***", "password": "***", "region": "eu", "nested": [{"token": "***"}]},
        "primary_key": ["id"],
    }


def info(name: str, kind: str, inputs: tuple[str, ...] = ()) -> NodeInfo:
    return NodeInfo(name, kind, "x", inputs, {"id": name})


def stats() -> RunStats:
    return RunStats("p", {"s": info("s", "source"), "t": info("t", "transform", ("s",))}, sample_size=3)


def test_rate_and_sparkline_come_from_committed_epochs() -> None:
    run = stats()
    run.started_at = 1000.0
    for at, rows in [(1001.2, 100), (1005.5, 50), (1009.9, 30)]:
        run.nodes["s"].commits.append((at, rows))
    assert run.rate("s", now=1010.0) == pytest.approx(180 / 10)
    assert run.rate("s", now=1014.0) == pytest.approx(80 / 10)  # the first commit left the 10 s window
    line = run.sparkline("s", now=1010.0)
    assert len(line) == 60 and line[-1] == 30 and line[-5] == 50 and line[-9] == 100 and sum(line) == 180


def test_readiness_and_stalls() -> None:
    run = stats()
    assert not run.ready()  # not started
    run.started()
    assert not run.ready()
    run.caught_up("s", True)
    assert run.ready()  # started and found nothing to read
    run.epoch_started("s")
    assert not run.ready()
    run.sources["s"].in_flight_since = 100.0
    assert run.stalled(60, now=170.0) == {"s": "an epoch has been in flight for 70s"}
    run.epoch_committed("s", {"0": 5}, {"s": 5, "t": 2}, {}, None, 12.0)
    assert run.ready() and run.stalled(60) == {}
    run.backlog("s", {"0": 40, "1": 2})
    committed = run.sources["s"].committed_at
    assert run.stalled(60, now=committed + 61) == {"s": "42 records waiting and nothing committed for 61s"}
    run.backlog("s", {"0": 0})
    assert run.stalled(60, now=committed + 61) == {}
    run.stop()
    assert not run.ready()


def test_samples_keep_the_latest_rows() -> None:
    run = stats()
    run.epoch_committed("s", {}, {"s": 3}, {"s": [{"i": 1}, {"i": 2}, {"i": 3}]}, None, 1.0)
    run.epoch_committed("s", {}, {"s": 1}, {"s": [{"i": 4}]}, None, 1.0)
    assert run.nodes["s"].sample == [{"i": 4}, {"i": 1}, {"i": 2}]  # fewer new rows than kept: the newest first
    run.epoch_committed("s", {}, {"s": 9}, {"s": [{"i": 7}, {"i": 8}, {"i": 9}]}, None, 1.0)
    assert run.nodes["s"].sample == [{"i": 7}, {"i": 8}, {"i": 9}]
    assert run.nodes["s"].rows_total == 13 and run.nodes["t"].rows_total == 0


def test_waiters_wake_when_an_epoch_commits() -> None:
    run = stats()
    version = run.version
    threading.Timer(0.05, lambda: run.epoch_committed("s", {}, {"s": 1}, {}, None, 1.0)).start()
    assert run.wait(version, timeout=5) == version + 1


def test_task_figures_merge_across_tasks_and_drain_once() -> None:
    param = TaskStatsParam()
    driver = param.zero(TaskStats())
    task = pickle.loads(pickle.dumps(TaskStats(latencies={"h": [1.5]}, counters={("h", "retries"): 2})))
    param.addInPlace(driver, task)
    param.addInPlace(
        driver, TaskStats(latencies={"h": [2.5]}, counters={("h", "retries"): 1, ("k", "dead_lettered"): 4})
    )
    drained = driver.drain()
    assert drained.latencies == {"h": [1.5, 2.5]}
    assert drained.counters == {("h", "retries"): 3, ("k", "dead_lettered"): 4}
    assert driver.drain().latencies == {} and driver.drain().counters == {}
    silent = NodeRecorder("n")
    silent.latency(3.0)  # no accumulator: nothing happens, nothing fails
    silent.count("retries")
    assert not silent.active


def test_the_event_stream_parser() -> None:
    lines = [": keep-alive", "", "event: rows", 'data: {"node": "a"}', "", "data: x", "data: y", "", "event: rows"]
    assert list(events(iter(lines))) == [("rows", '{"node": "a"}'), ("message", "x\ny")]


def test_prometheus_text_uses_the_streamling_namespace_and_every_tag() -> None:
    from streamling.config.model import OpenTelemetryMetricsSettings
    from streamling.telemetry.metrics import Metrics

    run = RunStats(
        "p",
        {
            "s": NodeInfo(
                "s",
                "source",
                "kafka",
                (),
                {
                    "id": "s",
                    "topology_node_type": "source",
                    "operator_type": "kafka",
                    "topic": "orders",
                    "tier": "critical",
                },
            )
        },
    )
    run.epoch_committed("s", {"0": 10}, {"s": 10}, {}, None, 5.0)
    metrics = Metrics(OpenTelemetryMetricsSettings(global_tags={"environment": "test"}), "app", run, prometheus=True)
    try:
        metrics.rows("s", 10)
        text = metrics.prometheus_text().decode()
    finally:
        metrics.shutdown()
    line = next(li for li in text.splitlines() if li.startswith("streamling_output_rows_total{"))
    for tag in ('id="s"', 'topic="orders"', 'tier="critical"', 'environment="test"', 'operator_type="kafka"'):
        assert tag in line, line
    assert line.endswith(" 10.0")
    assert "streamling_output_rows_delta" not in text  # Prometheus has no delta temporality


def test_every_kind_of_node_gets_its_identity_tags(tmp_path) -> None:
    """Tags from a real plan, without Spark: a plugin's `type`, a hybrid's `table` and `topic`, Postgres `schema` and
    `table`, a webhook's `url` without its credentials, a script's `language`, and the labels."""
    from streamling.runtime.plan import Plan
    from streamling.telemetry.nodes import node_infos
    from streamling.topology.pipeline import load_pipeline

    plugin = Path(__file__).resolve().parents[2] / "plugins" / "basic_plugin"
    config = tmp_path / "config.yaml"
    config.write_text("{}\n")
    s = load_settings(config=str(config), environ={"STREAMLING__PLUGIN__PATH": str(plugin)})
    text = """
sources:
  rnd:
    type: basic_plugin.random_source
    options: {max_rows: "10"}
    telemetry: {labels: {team: growth}}
  both:
    type: hybrid
    primary_key: id
    bounded_sources: [{source_type: clickhouse, table_name: db.a}, {source_type: clickhouse, table_name: db.b}]
    unbounded_source: {source_type: kafka, topic: live}
transforms:
  js:
    type: script
    from: rnd
    language: javascript
    primary_key: id
    script: "function process(r) { return r; }"
sinks:
  pg: {type: postgres, from: js, schema: shop, table: orders}
  hook: {type: webhook, from: both, url: "https://u:secret@h.example/x?k=v"}
"""
    pipeline, report = load_pipeline(text, name="p", settings=s)
    assert pipeline is not None, report.errors
    tags = {name: dict(info.tags) for name, info in node_infos(Plan(pipeline, s)).items()}
    assert tags["rnd"] == {
        "id": "rnd",
        "topology_node_type": "source",
        "operator_type": "basic_plugin.random_source",
        "type": "basic_plugin.random_source",
        "team": "growth",
    }
    assert (tags["both"]["table"], tags["both"]["topic"]) == ("db.a,db.b", "live")
    assert tags["js"]["language"] == "javascript"
    assert (tags["pg"]["schema"], tags["pg"]["table"]) == ("shop", "orders")
    assert tags["hook"]["url"] == "https://***@h.example/x?k=***"
