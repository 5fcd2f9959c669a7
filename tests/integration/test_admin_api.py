"""The admin API of a running pipeline, over real HTTP: probes, topology, positions, live rows (JSON and SSE),
Prometheus text, and no secret in any answer. The webhook sink posts to a real loopback HTTP server."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import pytest

from streamling import RunSummary, run_pipeline
from streamling.errors import StreamlingError
from tests.net import ADMIN_HEADERS, assert_guarded, free_port
from tests.waiting import wait_for

SECRET = "Bearer sup3r-s3cret-token"
PASSWORD = "hunter2-pw"


@contextmanager
def running(spark, settings, path) -> Iterator[RunSummary]:
    stop = threading.Event()
    summary = RunSummary()
    errors: list[BaseException] = []

    def target() -> None:
        try:
            run_pipeline(path, settings, spark, stop, summary)
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=target)
    thread.start()
    try:
        yield summary
    finally:
        stop.set()
        thread.join(60)
    assert not thread.is_alive()
    assert not errors, errors


def test_probes_topology_positions_live_rows_and_metrics(spark, make_settings, write_pipeline, server) -> None:
    server.expect_request("/hook").respond_with_data("ok")
    port = free_port()
    url = server.url_for("/hook").replace("http://", f"http://partner:{PASSWORD}@") + "?token=abc123"
    path = write_pipeline(f"""
        sources:
          ticks:
            type: generator
            rows_per_second: 400
            record_batch_size: 100
            primary_key: id
            telemetry: {{labels: {{tier: gold}}}}
        transforms:
          even:
            type: sql
            primary_key: id
            sql: SELECT id, name, amount * 2 AS double_amount, _gs_op FROM ticks WHERE id % 2 = 0
        sinks:
          out: {{type: blackhole, from: even}}
          partner:
            type: webhook
            from: ticks
            url: "{url}"
            headers: {{Authorization: "{SECRET}", X-Trace: visible}}
        """)
    settings = make_settings(
        admin_api_port=port,
        live_data_inspect_enabled=True,
        **{"live_data_inspect.records_per_topology_node": 5, "live_data_inspect.refresh_in_secs": 0.3},
    )
    base = f"http://127.0.0.1:{port}"
    answers: list[str] = []
    with (
        running(spark, settings, path) as summary,
        httpx.Client(base_url=base, timeout=10, headers=ADMIN_HEADERS) as client,
    ):
        wait_for(lambda: client.get("/ready").status_code == 200, what="readiness", ignore=(httpx.HTTPError,))
        assert client.get("/health").json() == {"status": "ok"}

        def flowing():
            doc = client.get("/api/topology").json()
            return doc if all(n["rows_total"] > 0 for n in doc["nodes"]) else None

        topology = wait_for(flowing, what="rows at every node")
        answers.append(json.dumps(topology))
        nodes = {n["name"]: n for n in topology["nodes"]}
        assert list(nodes) == ["ticks", "even", "out", "partner"]
        assert nodes["even"]["inputs"] == ["ticks"] and nodes["even"]["kind"] == "transform"
        assert nodes["ticks"]["tags"] == {
            "id": "ticks",
            "topology_node_type": "source",
            "operator_type": "generator",
            "tier": "gold",
        }
        assert nodes["partner"]["tags"]["url"].endswith("/hook?token=***")
        assert [f["name"] for f in nodes["even"]["schema"]["fields"]] == ["id", "name", "double_amount", "_gs_op"]
        assert nodes["partner"]["spec"]["headers"] == {"Authorization": "***", "X-Trace": "visible"}
        assert nodes["ticks"]["health"] == "flowing" and len(nodes["ticks"]["sparkline"]) == 60

        positions = client.get("/api/positions").json()
        answers.append(json.dumps(positions))
        assert positions["sources"]["ticks"]["epochs"] >= 1
        assert positions["sources"]["ticks"]["position"]

        first = client.get("/api/live", params={"node": "even"}).json()["nodes"]["even"]
        assert 1 <= len(first["rows"]) <= 5
        assert all(set(r) == {"id", "name", "double_amount", "_gs_op"} and r["id"] % 2 == 0 for r in first["rows"])
        later = wait_for(
            lambda: (
                (d := client.get("/api/live", params={"node": "even"}).json()["nodes"]["even"])["sampled_at"]
                > first["sampled_at"]
                and d
            ),
            what="a fresher sample",
        )
        assert later["rows"] != first["rows"]
        everything = client.get("/api/live").json()["nodes"]
        answers.append(json.dumps(everything))
        assert set(everything) == {"ticks", "even", "out", "partner"}
        assert everything["partner"]["rows"] and set(everything["partner"]["rows"][0]) >= {"id", "name"}

        events = []
        with client.stream("GET", "/api/live/stream", params={"node": "ticks"}) as stream:
            assert stream.headers["content-type"].startswith("text/event-stream")
            lines = stream.iter_lines()
            while len(events) < 2:
                line = next(lines)
                if line.startswith("data: "):
                    events.append(json.loads(line[6:]))
        assert [e["node"] for e in events] == ["ticks", "ticks"]
        assert events[1]["sampled_at"] > events[0]["sampled_at"] and events[1]["rows"]

        metrics = client.get("/metrics")
        assert metrics.status_code == 200 and metrics.headers["content-type"].startswith("text/plain")
        answers.append(metrics.text)
        line = next(
            li
            for li in metrics.text.splitlines()
            if li.startswith("streamling_output_rows_total{") and 'id="even"' in li
        )
        assert 'operator_type="sql"' in line and 'topology_node_type="transform"' in line
        assert float(line.rsplit(" ", 1)[1]) > 0

        assert client.get("/api/live", params={"node": "nope"}).status_code == 404
        page = client.get("/")
        assert page.status_code == 200 and "EventSource" in page.text
        assert summary.sink_rows["out"] > 0
    for answer in answers:
        assert SECRET not in answer and "sup3r" not in answer and PASSWORD not in answer and "abc123" not in answer
    with pytest.raises(httpx.ConnectError):  # the run is over: its admin API is gone
        httpx.get(f"{base}/health", timeout=2)


def test_live_inspection_off_and_a_port_in_use(spark, make_settings, write_pipeline) -> None:
    port = free_port()
    stream = write_pipeline(
        """
        sources:
          ticks: {type: generator, rows_per_second: 100, primary_key: id}
        sinks:
          out: {type: blackhole, from: ticks}
        """,
        "stream.yaml",
    )
    with running(spark, make_settings(admin_api_port=port), stream):
        wait_for(
            lambda: httpx.get(f"http://127.0.0.1:{port}/ready").status_code == 200,
            what="readiness",
            ignore=(httpx.HTTPError,),
        )
        off = httpx.get(f"http://127.0.0.1:{port}/api/live", headers=ADMIN_HEADERS)
        assert off.status_code == 404
        assert off.json() == {"error": "live inspection is off: set live_data_inspect_enabled: true"}
        with pytest.raises(StreamlingError, match=rf"admin API: cannot listen on 127.0.0.1:{port} \(admin_api_host"):
            run_pipeline(stream, make_settings(admin_api_port=port, application_id="other"), spark)


def test_the_admin_api_refuses_requests_without_its_token_from_other_hosts_and_origins(
    spark, make_settings, write_pipeline, tmp_path, monkeypatch
) -> None:
    """The same rules as the engine's API; with no admin_api_token set, one is generated into a file only its owner
    reads, and the run's log names the file, never the token."""
    port = free_port()
    monkeypatch.setenv("STREAMLING_HOME", str(tmp_path / "home"))
    stream = write_pipeline(
        """
        sources:
          ticks: {type: generator, rows_per_second: 100, primary_key: id}
        sinks:
          out: {type: blackhole, from: ticks}
        """,
        "guarded.yaml",
    )
    settings = make_settings(admin_api_port=port, admin_api_token=None)
    with running(spark, settings, stream):
        wait_for(
            lambda: httpx.get(f"http://127.0.0.1:{port}/ready").status_code == 200,
            what="readiness",
            ignore=(httpx.HTTPError,),
        )
        token_file = tmp_path / "home" / f"admin-{port}.token"
        assert oct(token_file.stat().st_mode & 0o777) == "0o600"
        assert_guarded(
            f"http://127.0.0.1:{port}", token_file.read_text().strip(), "the admin API", "/ready", "/api/topology"
        )


def test_health_reports_a_stalled_source_and_recovers(spark, make_settings, write_pipeline, server) -> None:
    """A handler whose service stops answering holds the epoch in flight: past source_stall_timeout_sec the liveness
    probe fails naming the source; once the service answers again, the epoch commits and the probe is healthy."""
    import json as jsonlib

    from werkzeug import Request, Response

    gate = threading.Event()
    gate.set()

    def answer(request: Request) -> Response:
        gate.wait(60)
        return Response(jsonlib.dumps(jsonlib.loads(request.get_data())), content_type="application/json")

    server.expect_request("/slow").respond_with_handler(answer)
    port = free_port()
    path = write_pipeline(f"""
        sources:
          ticks: {{type: generator, rows_per_second: 50, record_batch_size: 20, primary_key: id}}
        transforms:
          looked_up:
            type: handler
            from: ticks
            url: {server.url_for("/slow")}
            one_row_per_request: true
            primary_key: id
        sinks:
          out: {{type: blackhole, from: looked_up}}
        """)
    settings = make_settings(admin_api_port=port, source_stall_timeout_sec=1.5)
    base = f"http://127.0.0.1:{port}"
    try:
        with running(spark, settings, path), httpx.Client(base_url=base, timeout=10, headers=ADMIN_HEADERS) as client:
            wait_for(lambda: client.get("/ready").status_code == 200, what="readiness", ignore=(httpx.HTTPError,))
            assert client.get("/health").json() == {"status": "ok"}
            gate.clear()  # the service hangs: the next epoch cannot finish
            stalled = wait_for(lambda: (r := client.get("/health")).status_code == 503 and r.json(), what="a stall")
            assert stalled["status"] == "stalled"
            assert stalled["stalled"]["ticks"].startswith("an epoch has been in flight for ")
            topology = {n["name"]: n["health"] for n in client.get("/api/topology").json()["nodes"]}
            assert topology == {"ticks": "stalled", "looked_up": "stalled", "out": "stalled"}
            gate.set()
            wait_for(lambda: client.get("/health").status_code == 200, what="recovery")
    finally:
        gate.set()


def test_a_source_with_nothing_to_read_is_ready_and_healthy(spark, make_settings, write_pipeline, kafka) -> None:
    """An empty topic: its stream is ready and caught up once Spark looked and found nothing, and an idle source is
    not a stalled one. A record produced then flows, and /api/positions shows it committed."""
    topic = kafka.topic("idle", partitions=2)
    schema = {"type": "record", "name": "E", "fields": [{"name": "id", "type": "long"}]}
    kafka.register(topic, schema)
    port = free_port()
    path = write_pipeline(f"""
        sources:
          quiet: {{type: kafka, topic: {topic}, primary_key: id}}
        sinks:
          out: {{type: blackhole, from: quiet}}
        """)
    settings = make_settings(environ=kafka.env, admin_api_port=port, source_stall_timeout_sec=1)
    with (
        running(spark, settings, path),
        httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10, headers=ADMIN_HEADERS) as client,
    ):
        wait_for(lambda: client.get("/ready").status_code == 200, what="readiness", ignore=(httpx.HTTPError,))
        positions = wait_for(
            lambda: (q := client.get("/api/positions").json()["sources"]["quiet"])["caught_up"] and q,
            what="Spark finding nothing to read",
        )
        assert positions["position"] == {"0": 0, "1": 0}
        epochs = positions["epochs"]  # Spark may commit one empty first epoch
        time.sleep(1.5)  # longer than the stall limit, with nothing to read
        assert client.get("/health").json() == {"status": "ok"}
        kafka.produce_avro(topic, schema, [{"id": 7}])
        committed = wait_for(
            lambda: (q := client.get("/api/positions").json()["sources"]["quiet"])["epochs"] > epochs and q,
            what="the record's epoch",
        )
        assert sum(committed["position"].values()) == 1
        out = next(n for n in client.get("/api/topology").json()["nodes"] if n["name"] == "out")
        assert out["rows_total"] == 1


def test_live_rows_of_nodes_whose_first_column_is_a_map_or_a_constant(spark, make_settings, write_pipeline) -> None:
    """The sample hashes a node's first plain columns: a map first (maps cannot be hashed), a column with one value,
    and rows that repeat (three distinct rows: a partial share may let none in, and the next samples let more in)
    still give live rows."""
    port = free_port()
    path = write_pipeline("""
        sources:
          ticks: {type: generator, rows_per_second: 400, record_batch_size: 100, primary_key: id}
        transforms:
          mapped:
            type: sql
            primary_key: id
            sql: SELECT str_to_map(concat('name:', name)) AS tags, id, _gs_op FROM ticks
          constant:
            type: sql
            primary_key: id
            sql: SELECT 'same' AS kind, id, _gs_op FROM ticks
          repeated:
            type: sql
            primary_key: bucket
            sql: SELECT 'same' AS kind, id % 3 AS bucket, _gs_op FROM ticks
        sinks:
          a: {type: blackhole, from: mapped}
          b: {type: blackhole, from: constant}
          c: {type: blackhole, from: repeated}
        """)
    settings = make_settings(
        admin_api_port=port,
        live_data_inspect_enabled=True,
        **{"live_data_inspect.records_per_topology_node": 3, "live_data_inspect.refresh_in_secs": 0.2},
    )
    with (
        running(spark, settings, path),
        httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10, headers=ADMIN_HEADERS) as client,
    ):

        def sampled() -> dict | None:
            nodes = client.get("/api/live").json()["nodes"]
            epochs = {n["name"]: n["epochs"] for n in client.get("/api/topology").json()["nodes"]}
            enough = epochs["ticks"] >= 4 and all(
                len(nodes[n]["rows"]) == 3 for n in ("mapped", "constant", "repeated")
            )
            return nodes if enough else None

        nodes = wait_for(sampled, what="three live rows at each node", ignore=(httpx.HTTPError,))
    assert all(set(r["tags"]) == {"name"} for r in nodes["mapped"]["rows"])
    assert all(r["kind"] == "same" for r in nodes["constant"]["rows"])
    assert {r["bucket"] for r in nodes["repeated"]["rows"]} <= {0, 1, 2}
