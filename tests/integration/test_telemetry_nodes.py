"""Metrics of every kind of node in one pipeline of two sources and three sinks, on the real broker, registry,
Postgres and loopback HTTP servers: rows per node, identity tags (topic, schema/table, url, language), and what
Spark tasks report — a handler's request latencies and retry, a Kafka source's dead letters, the rows Postgres
rejected, a script's batch latencies — plus consumer lag per partition and commit lag from record timestamps."""

from __future__ import annotations

import io
import json
import uuid
from collections.abc import Iterator

import fastavro
import pytest
from werkzeug import Request, Response

from streamling import run_pipeline
from tests.otlp_receiver import OtlpReceiver

pytestmark = pytest.mark.integration

SCHEMA = {
    "type": "record",
    "name": "Event",
    "fields": [{"name": "id", "type": "long"}, {"name": "name", "type": "string"}],
}


@pytest.fixture
def schema(pg_connect) -> Iterator[str]:
    name = f"t_{uuid.uuid4().hex[:10]}"
    with pg_connect() as conn:
        conn.execute(f'CREATE SCHEMA "{name}"')
        conn.execute(f'CREATE TABLE "{name}".events (id bigint PRIMARY KEY, name varchar(6))')
    yield name
    with pg_connect() as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


def test_every_node_kind_reports_rows_tags_and_task_figures(
    spark, make_settings, write_pipeline, kafka, postgres_env, schema, server
) -> None:
    topic = kafka.topic("events", partitions=2)
    schema_id = kafka.register(topic, SCHEMA)
    parsed = fastavro.parse_schema(SCHEMA)
    for i in range(40):
        out = io.BytesIO()
        fastavro.schemaless_writer(out, parsed, {"id": i, "name": "toolongname" if i in (7, 8) else f"e{i}"})
        value = b"garbage" if i in (3, 30) else b"\x00" + schema_id.to_bytes(4, "big") + out.getvalue()
        kafka.send(topic, value, key=str(i).encode(), headers=[("dbz.op", b"c")], partition=i % 2)
    kafka.flush()

    calls = {"n": 0}

    def answer(request: Request) -> Response:
        calls["n"] += 1
        if calls["n"] == 1:
            return Response("busy", status=503)  # one retry
        return Response(request.get_data(), content_type="application/json")

    server.expect_request("/enrich").respond_with_handler(answer)
    server.expect_request("/hook").respond_with_data("ok")
    receiver = OtlpReceiver("http/protobuf").start()
    path = write_pipeline(f"""
        sources:
          events:
            type: kafka
            topic: {topic}
            ending_offsets: latest
            include_metadata: true
            primary_key: id
            on_error: dead_letter
            dead_letter: {{table: {schema}.dead_source}}
          counter:
            type: generator
            rows: 30
            primary_key: id
        transforms:
          slim:
            type: sql
            primary_key: id
            sql: SELECT id, name, _gs_op FROM events
          enriched:
            type: handler
            from: slim
            url: {server.url_for("/enrich")}
            payload_version: 0
            one_row_per_request: true
            primary_key: id
          doubled:
            type: script
            from: counter
            language: javascript
            primary_key: id
            script: "function process(r) {{ r.amount = r.amount * 2; return r; }}"
        sinks:
          pg:
            type: postgres
            from: enriched
            schema: {schema}
            table: events
            on_error: dead_letter
            dead_letter: {{table: {schema}.dead_sink}}
          hook: {{type: webhook, from: enriched, url: "{server.url_for("/hook")}", batch_size: 10}}
          screen: {{type: blackhole, from: doubled}}
        """)
    settings = make_settings(
        environ={**kafka.env, **postgres_env},
        job_mode=True,
        **{
            "open_telemetry_metrics.ingestion_endpoint": receiver.endpoint,
            "open_telemetry_metrics.batch_interval_secs": 0.3,
            "kafka_source.lag_report_interval_ms": 100,
            "external_http_handler.retry_backoff_sec": 0.01,
        },
    )
    try:
        summary = run_pipeline(path, settings, spark)
    finally:
        receiver.stop()
    assert summary.sink_rows == {"pg": 38, "hook": 38, "screen": 30}

    def total(metric: str, node: str) -> float:
        point = receiver.latest(metric, node)
        assert point is not None, (metric, node)
        return point.value

    expected = {
        "events": 38,
        "slim": 38,
        "enriched": 38,
        "counter": 30,
        "doubled": 30,
        "pg": 38,
        "hook": 38,
        "screen": 30,
    }
    assert {node: total("output_rows_total", node) for node in expected} == expected
    assert total("dead_lettered_rows_total", "events") == 2  # the two undecodable records
    assert total("rejected_rows_total", "pg") == 2 and total("dead_lettered_rows_total", "pg") == 2
    assert total("retries_total", "enriched") == 1
    assert total("output_rows_latency", "enriched") == 39  # one per request: 38 rows, one retried
    assert total("output_rows_latency", "hook") >= 4  # 38 rows in requests of 10
    assert total("output_rows_latency", "doubled") >= 1  # per sandbox batch

    tags = {node: receiver.latest("output_rows_total", node).attributes for node in expected}
    assert tags["events"]["topic"] == topic
    assert (tags["pg"]["schema"], tags["pg"]["table"]) == (schema, "events")
    assert tags["enriched"]["url"] == server.url_for("/enrich")
    assert tags["hook"]["url"] == server.url_for("/hook")
    assert tags["doubled"]["language"] == "javascript"
    assert "topic" not in tags["counter"]

    lags = [p for p in receiver.points() if p.metric == "consumer_lag" and p.attributes["id"] == "events"]
    assert {p.attributes["partition"] for p in lags} == {"0", "1"}
    assert lags and all(p.attributes["topic"] == topic for p in lags)
    assert receiver.latest("commit_lag", "events").value >= 0  # from the records' own timestamps
    with_rows = json.dumps([p.attributes for p in receiver.points()])
    assert "password" not in with_rows.lower()
