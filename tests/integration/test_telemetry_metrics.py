"""OpenTelemetry metrics from a real run to a real OTLP receiver (tests/otlp_receiver.py decodes what arrives with the
official opentelemetry-proto messages), over each protocol: exact per-node counts, every tag, labels included."""

from __future__ import annotations

import time

import pytest

from streamling import RunSummary, run_pipeline
from tests.otlp_receiver import CUMULATIVE, DELTA, OtlpReceiver
from tests.waiting import wait_for

PIPELINE = """
    sources:
      orders:
        type: generator
        rows: 1000
        record_batch_size: 300
        key_space: 1000
        primary_key: id
        telemetry: {labels: {tier: critical, dataset: app.orders}}
    transforms:
      big:
        type: sql
        primary_key: id
        sql: SELECT id, amount, _gs_op FROM orders WHERE id % 4 = 0
        telemetry: {labels: {team: payments}}
      small:
        type: sql
        primary_key: id
        sql: SELECT id, name, _gs_op FROM orders WHERE id <= 100
    sinks:
      big_out: {type: blackhole, from: big}
      small_out: {type: print, from: small, telemetry: {labels: {team: debug}}}
    """


@pytest.mark.parametrize("protocol", ["http/protobuf", "http/json", "grpc"])
def test_exact_counts_and_tags_reach_an_otlp_receiver(spark, make_settings, write_pipeline, capfd, protocol) -> None:
    receiver = OtlpReceiver(protocol).start()
    try:
        settings = make_settings(
            job_mode=True,
            application_id="metrics_app",
            **{
                "open_telemetry_metrics.ingestion_endpoint": receiver.endpoint,
                "open_telemetry_metrics.endpoint_protocol": protocol,
                "open_telemetry_metrics.batch_interval_secs": 0.5,
                "open_telemetry_metrics.global_tags": "environment:test,image_tag:v1",
            },
        )
        summary = run_pipeline(write_pipeline(PIPELINE), settings, spark)
    finally:
        receiver.stop()
    assert summary.sink_rows == {"big_out": 250, "small_out": 100}
    expected = {"orders": 1000, "big": 250, "small": 100, "big_out": 250, "small_out": 100}

    # cumulative totals: the last export (at shutdown) has every node's exact count
    for node, rows in expected.items():
        total = receiver.latest("output_rows_total", node)
        assert total is not None, node
        assert (total.kind, total.temporality, total.value) == ("sum", CUMULATIVE, rows), node
    # delta: the points of every export add up to the same counts
    for node, rows in expected.items():
        deltas = [p for p in receiver.points() if p.metric == "output_rows_delta" and p.attributes["id"] == node]
        assert {p.temporality for p in deltas} == {DELTA}
        assert sum(p.value for p in deltas) == rows, node

    total = receiver.latest("output_rows_total", "orders")
    assert total.attributes == {
        "id": "orders",
        "topology_node_type": "source",
        "operator_type": "generator",
        "tier": "critical",
        "dataset": "app.orders",
        "environment": "test",
        "image_tag": "v1",
    }
    assert receiver.latest("output_rows_total", "big").attributes == {
        "id": "big",
        "topology_node_type": "transform",
        "operator_type": "sql",
        "team": "payments",
        "environment": "test",
        "image_tag": "v1",
    }
    assert receiver.latest("output_rows_total", "small_out").attributes["team"] == "debug"
    assert total.resource["service.name"] == "streamling"
    assert total.resource["service.instance.id"] == "metrics_app"

    latency = receiver.latest("output_rows_latency", "big_out")
    assert latency is not None and latency.kind == "histogram" and latency.unit == "ms" and latency.value >= 1
    assert receiver.latest("output_rows_latency", "orders").value >= 1  # one per source batch
    assert receiver.latest("epoch_duration", "orders").value >= 1
    assert receiver.latest("output_rows_rate", "orders").kind == "gauge"
    assert receiver.latest("commit_lag", "orders").value >= 0
    if protocol == "http/json":
        assert set(receiver.content_types) == {"application/json"}
    elif protocol == "http/protobuf":
        assert set(receiver.content_types) == {"application/x-protobuf"}
    assert "Metrics export" not in capfd.readouterr().err  # no outage


def test_deny_list_keeps_matching_metrics_out(spark, make_settings, write_pipeline) -> None:
    receiver = OtlpReceiver("http/protobuf").start()
    try:
        settings = make_settings(
            job_mode=True,
            **{
                "open_telemetry_metrics.ingestion_endpoint": receiver.endpoint,
                "open_telemetry_metrics.batch_interval_secs": 0.5,
                "open_telemetry_metrics.metric_deny_list": "_delta$,^output_rows_(rate|latency)$",
            },
        )
        run_pipeline(write_pipeline(PIPELINE), settings, spark)
    finally:
        receiver.stop()
    names = {p.metric for p in receiver.points()}
    assert "output_rows_total" in names and "epoch_duration" in names
    assert not names & {"output_rows_delta", "output_rows_rate", "output_rows_latency"}


def test_a_receiver_that_is_down_does_not_slow_the_pipeline(spark, make_settings, write_pipeline, caplog) -> None:
    """The receiver is killed while the stream runs: epochs keep committing at the same pace, and the outage is one
    warning, not one per export."""
    receiver = OtlpReceiver("http/protobuf").start()
    pipeline = write_pipeline("""
        sources:
          ticks: {type: generator, rows_per_second: 1000, record_batch_size: 500}
        sinks:
          out: {type: blackhole, from: ticks}
        """)
    settings = make_settings(
        **{
            "open_telemetry_metrics.ingestion_endpoint": receiver.endpoint,
            "open_telemetry_metrics.batch_interval_secs": 0.2,
            "open_telemetry_metrics.export_timeout_secs": 2,
        }
    )
    import threading

    stop = threading.Event()
    summary = RunSummary()
    thread = threading.Thread(target=run_pipeline, args=(pipeline, settings, spark, stop, summary))
    caplog.set_level("INFO", logger="streamling.telemetry")
    thread.start()
    try:
        wait_for(lambda: summary.sink_rows.get("out", 0) > 2000, 90, "rows before the outage")
        wait_for(lambda: receiver.latest("output_rows_total", "ticks"), 30, "a first export")
        before = summary.sink_rows["out"]
        started = time.monotonic()
        time.sleep(4)  # a measured window (the generator is rate-limited, so this is its pace)
        rate_up = (summary.sink_rows["out"] - before) / (time.monotonic() - started)
        receiver.stop()
        before = summary.sink_rows["out"]
        started = time.monotonic()
        time.sleep(6)  # the same pace with every export failing
        rate_down = (summary.sink_rows["out"] - before) / (time.monotonic() - started)
    finally:
        stop.set()
        thread.join(60)
    assert not thread.is_alive()
    assert rate_down > 0.7 * rate_up, (rate_up, rate_down)
    warnings = [r for r in caplog.records if r.name == "streamling.telemetry" and "Metrics export" in r.message]
    assert len(warnings) == 1, [r.message for r in warnings]
    assert warnings[0].levelname == "WARNING" and receiver.endpoint in warnings[0].message


def test_an_epoch_that_fails_counts_nothing_and_its_replay_counts_once(
    spark, make_settings, write_pipeline, server
) -> None:
    """Run 1 fails in epoch 2 (the webhook refuses a row with a non-retriable 400) after that epoch's rows were read
    and transformed; run 2 replays epoch 2 and goes on. Across both runs every node counts each row exactly once."""
    import json

    from werkzeug import Request, Response

    from streamling.errors import StreamlingError

    refusing = {"on": True}

    def answer(request: Request) -> Response:
        ids = [row["id"] for row in json.loads(request.get_data())]
        if refusing["on"] and 150 in ids:
            return Response("row 150 refused", status=400)
        return Response("ok")

    server.expect_request("/hook").respond_with_handler(answer)
    path = write_pipeline(f"""
        sources:
          numbers: {{type: generator, rows: 300, record_batch_size: 100, primary_key: id}}
        transforms:
          odd:
            type: sql
            primary_key: id
            sql: SELECT id, name, _gs_op FROM numbers WHERE id % 2 = 1 OR id = 150
        sinks:
          hook: {{type: webhook, from: odd, url: "{server.url_for("/hook")}", batch_size: 10}}
        """)
    totals: list[dict[str, float]] = []
    for run in (1, 2):
        receiver = OtlpReceiver("http/protobuf").start()
        settings = make_settings(
            job_mode=True,
            **{
                "open_telemetry_metrics.ingestion_endpoint": receiver.endpoint,
                "open_telemetry_metrics.batch_interval_secs": 0.3,
            },
        )
        try:
            if run == 1:
                with pytest.raises(StreamlingError, match="non-retriable HTTP 400 - row 150 refused"):
                    run_pipeline(path, settings, spark)
                refusing["on"] = False
            else:
                run_pipeline(path, settings, spark)
        finally:
            receiver.stop()
        totals.append({n: receiver.latest("output_rows_total", n).value for n in ("numbers", "odd", "hook")})
    assert totals[0] == {"numbers": 100, "odd": 50, "hook": 50}  # epoch 1 only: epoch 2 failed before its commit
    assert totals[1] == {"numbers": 200, "odd": 101, "hook": 101}  # epochs 2 and 3, epoch 2 once
