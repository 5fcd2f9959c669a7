"""HTTP handler transforms and webhook sinks in real pipelines (`run_pipeline`, generator sources in job
mode) against real HTTP servers on loopback: exact requests, retries, failures, schemas, secrets, and the
webhook's acknowledgement."""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
import uuid
from collections.abc import Callable

import pytest
from pytest_httpserver import HTTPServer
from werkzeug import Request, Response

from streamling import run_pipeline, validate_pipeline
from streamling.errors import StreamlingError
from tests.integration.collect_sink import COLLECTED

SOURCE = """
        sources:
          src: {{type: generator, rows: {rows}, partitions: 1, key_space: 3, delete_every: 4}}
        transforms:
          rows:
            type: sql
            primary_key: id
            sql: SELECT id, id * 10 AS v, concat('n', id) AS name FROM src
"""
# Rows 1..5 of that source: ids repeat modulo 3; the 4th row is a delete, the 5th an update.
ROWS = [
    {"id": 1, "v": 10, "name": "n1", "_gs_op": "i"},
    {"id": 2, "v": 20, "name": "n2", "_gs_op": "i"},
    {"id": 3, "v": 30, "name": "n3", "_gs_op": "i"},
    {"id": 1, "v": 10, "name": "n1", "_gs_op": "d"},
    {"id": 2, "v": 20, "name": "n2", "_gs_op": "u"},
]


@pytest.fixture
def run(spark, make_settings, write_pipeline) -> Callable[..., object]:
    def go(text: str, environ: dict[str, str] | None = None, **settings: object):
        path = write_pipeline(text)
        return run_pipeline(path, make_settings(environ=environ, job_mode=True, **settings), spark)

    return go


def handler_pipeline(url: str, key: str, rows: int = 5, **fields: object) -> str:
    extra = "".join(f"    {name}: {json.dumps(value)}\n" for name, value in fields.items())
    return (
        SOURCE.format(rows=rows)
        + f"""
          h:
            type: handler
            from: rows
            primary_key: id
            url: {url}
"""
        + "\n".join(" " * 8 + line for line in extra.splitlines())
        + f"""
        sinks:
          out: {{type: test.collect, from: h, options: {{key: {key}}}}}
"""
    )


def bodies(server: HTTPServer) -> list[bytes]:
    return sorted(request.get_data() for request, _ in server.log)


def shout(item: dict, version: int) -> dict:
    """What the test service answers per item: the row with its name upper-cased."""
    if version == 1:
        return {"metadata": item["metadata"], "data": {**item["data"], "name": item["data"]["name"].upper()}}
    return {**item, "name": item["name"].upper()}


def shouting_service(version: int) -> Callable[[Request], Response]:
    def answer(request: Request) -> Response:
        doc = json.loads(request.get_data())
        out = [shout(item, version) for item in doc] if isinstance(doc, list) else shout(doc, version)
        return Response(json.dumps(out), content_type="application/json")

    return answer


def encoded(row: dict, version: int) -> bytes:
    if version == 1:
        data = {k: v for k, v in row.items() if k != "_gs_op"}
        return json.dumps({"metadata": {"op": row["_gs_op"]}, "data": data}, separators=(",", ":")).encode()
    return json.dumps(row, separators=(",", ":")).encode()


@pytest.mark.parametrize("version", [0, 1])
@pytest.mark.parametrize("one_row", [False, True])
def test_handler_requests_and_answers(run, server, version: int, one_row: bool) -> None:
    server.expect_request("/h", method="POST").respond_with_handler(shouting_service(version))
    key = uuid.uuid4().hex
    text = handler_pipeline(server.url_for("/h"), key, payload_version=version, one_row_per_request=one_row)
    summary = run(text, external_http_handler__trigger_max_count=2)
    items = [encoded(row, version) for row in ROWS]
    if one_row:
        expected = sorted(items)  # five requests, one object each
    else:  # at most trigger_max_count = 2 rows per request: 2, 2, 1
        expected = sorted(b"[" + b",".join(items[i : i + 2]) + b"]" for i in range(0, 5, 2))
    assert bodies(server) == expected
    assert len(server.log) == (5 if one_row else 3)
    assert all(request.headers["Content-Type"] == "application/json" for request, _ in server.log)
    # The answers replace the rows, in input order, keeping each row's op.
    assert [row for _, row in COLLECTED[key]] == [{**row, "name": row["name"].upper()} for row in ROWS]
    assert summary.sink_ops == {"out": {"inserts": 3, "updates": 1, "deletes": 1, "unchanged": 0}}


def test_node_batch_size_overrides_trigger_max_count_and_answers_may_change_ops_and_counts(run, server) -> None:
    def answer(request: Request) -> Response:
        rows = json.loads(request.get_data())
        out = []
        for row in rows:  # drop deletes, turn every other row into two, mark them as updates
            if row["_gs_op"] != "d":
                out += [{"id": row["id"], "v": 0, "_gs_op": "u"}, {"id": row["id"] + 100, "v": 1}]
        return Response(json.dumps(out))

    server.expect_request("/h").respond_with_handler(answer)
    key = uuid.uuid4().hex
    run(handler_pipeline(server.url_for("/h"), key, batch_size=3), external_http_handler__trigger_max_count=2)
    assert sorted(len(json.loads(b)) for b in bodies(server)) == [2, 3]
    assert {row["name"] for _, row in COLLECTED[key]} == {None}  # a nullable column the answers left out
    got = [(row["id"], row["_gs_op"], row["v"]) for _, row in COLLECTED[key]]
    # First request (i, i, i): 6 answers; the second (d, u) answers 2 rows for 2 sent: ops by position.
    assert got == [
        (1, "u", 0),
        (101, "i", 1),
        (2, "u", 0),
        (102, "i", 1),
        (3, "u", 0),
        (103, "i", 1),
        (2, "u", 0),
        (102, "u", 1),
    ]


def test_retries_503_then_429_with_retry_after_then_success(run, server) -> None:
    server.expect_ordered_request("/h").respond_with_data("busy", status=503)
    server.expect_ordered_request("/h").respond_with_data("slow down", status=429, headers={"Retry-After": "1"})
    server.expect_ordered_request("/h").respond_with_handler(shouting_service(0))
    key = uuid.uuid4().hex
    run(handler_pipeline(server.url_for("/h"), key, rows=2), external_http_handler__retry_backoff_sec="10ms")
    assert len(server.log) == 3
    assert bodies(server) == [encoded(ROWS[0], 0).join([b"[", b","]) + encoded(ROWS[1], 0) + b"]"] * 3
    assert [row["name"] for _, row in COLLECTED[key]] == ["N1", "N2"]


def committed(db) -> dict:
    try:
        conn = sqlite3.connect(db)
        rows = conn.execute("SELECT key, data FROM state").fetchall()
    except sqlite3.OperationalError:  # not created yet
        return {}
    return {k: json.loads(v) for k, v in rows}


def test_non_retriable_status_fails_the_pipeline_with_the_exact_message(run, server, tmp_path) -> None:
    server.expect_request("/h").respond_with_data('{"error": "row 1\nis not allowed"}', status=400)
    with pytest.raises(StreamlingError) as info:
        run(handler_pipeline(server.url_for("/h"), "unused"))
    assert str(info.value) == (
        f'HTTP handler POST {server.url_for("/h")}: non-retriable HTTP 400 - {{"error": "row 1 is not allowed"}}'
    )
    assert info.value.user_facing
    sent = bodies(server)
    assert 1 <= len(sent) == len(set(sent)) <= 3  # no request retried; the failure cancels those not yet sent
    assert "src:generator" not in committed(tmp_path / "state.db")


def test_exhausted_retries_fail_with_a_retriable_error_naming_node_and_url(run, server) -> None:
    server.expect_request("/h").respond_with_data("maintenance", status=502)
    with pytest.raises(StreamlingError) as info:
        run(
            handler_pipeline(server.url_for("/h"), "unused", rows=1),
            external_http_handler__max_retries=2,
            external_http_handler__retry_backoff_sec="10ms",
        )
    assert info.value.retriable
    assert str(info.value).startswith(
        f"handler transform 'h': HTTP handler POST {server.url_for('/h')}: retries exhausted after 3 attempts in "
    )
    assert str(info.value).endswith("; last failure: HTTP 502 - maintenance")
    assert len(server.log) == 3


def test_schema_override_drops_changes_and_adds_columns(run, server, spark, make_settings, write_pipeline) -> None:
    def answer(request: Request) -> Response:
        rows = json.loads(request.get_data())
        return Response(json.dumps([{**r, "v": f"#{r['v']}", "score": r["id"] / 2} for r in rows]))

    server.expect_request("/h").respond_with_handler(answer)
    key = uuid.uuid4().hex
    text = handler_pipeline(
        server.url_for("/h"), key, rows=2, schema_override={"name": None, "v": "string", "score": "double"}
    )
    run(text)
    assert [row for _, row in COLLECTED[key]] == [
        {"id": 1, "v": "#10", "score": 0.5, "_gs_op": "i"},
        {"id": 2, "v": "#20", "score": 1.0, "_gs_op": "i"},
    ]
    # The rows sent are the input rows: the override shapes only the output.
    assert json.loads(bodies(server)[0])[0] == ROWS[0]


def test_a_response_that_does_not_fit_the_schema_names_node_field_and_value(run, server) -> None:
    server.expect_request("/h").respond_with_data(json.dumps({"id": 1, "v": "ten" * 40}))
    with pytest.raises(StreamlingError) as info:
        run(handler_pipeline(server.url_for("/h"), "unused", rows=1, one_row_per_request=True))
    assert str(info.value) == (
        f"handler transform 'h': the response of POST {server.url_for('/h')} does not fit the output schema: "
        f"field 'v' (bigint): \"{('ten' * 40)[:78]}… does not fit (expected a number)"
    )


def test_secret_header_is_sent_but_never_shown(
    run, server, caplog, capfd, spark, make_settings, write_pipeline
) -> None:
    secret = "s3cr3t-Value-42"
    env = {"STREAMLING__HTTP_SECRET_HEADER__PARTNER": "X-Api-Key", "STREAMLING__HTTP_SECRET_VALUE__PARTNER": secret}

    def answer(request: Request) -> Response:
        row = json.loads(request.get_data())
        if row["id"] == 3:
            return Response(f"key {request.headers['X-Api-Key']} may not send row 3", status=403)
        return Response(json.dumps(row))

    server.expect_request("/h", headers={"X-Api-Key": secret}).respond_with_handler(answer)
    text = handler_pipeline(server.url_for("/h"), "unused", one_row_per_request=True, secret_name="Partner")
    caplog.set_level(logging.DEBUG)
    with pytest.raises(StreamlingError) as info:
        run(text, environ=env)
    assert (
        str(info.value)
        == f"HTTP handler POST {server.url_for('/h')}: non-retriable HTTP 403 - key *** may not send row 3"
    )
    assert server.log and all(request.headers["X-Api-Key"] == secret for request, _ in server.log)
    report = validate_pipeline(write_pipeline(text, "again.yaml"), make_settings(environ=env), spark)
    assert report.is_valid
    captured = capfd.readouterr()
    for shown in (str(info.value), caplog.text, captured.out, captured.err, report.to_json()):
        assert secret not in shown
    assert "non-retriable HTTP 403 - key ***" in caplog.text  # the task's failure as logged on the driver


def test_validation_errors(spark, make_settings, write_pipeline, server) -> None:
    url = server.url_for("/h")

    def errors(**fields: object) -> list[str]:
        path = write_pipeline(handler_pipeline(url, "unused", **fields), f"{uuid.uuid4().hex}.yaml")
        return validate_pipeline(path, make_settings(), spark).errors

    assert errors(payload_version=2) == [
        "transform 'h' (type 'handler'): field 'payload_version': Input should be 0 or 1 (got 2)"
    ]
    assert errors(schema_override={"v": "money"}) == [
        "transform 'h' (type 'handler'): field 'schema_override': column 'v': unknown column type 'money'; use one "
        "of: bigint, int, smallint, tinyint, double, float, string, boolean, binary, date, timestamp, decimal(p,s) "
        "(got {'v': 'money'})"
    ]
    assert errors(secret_name="nope") == [
        "handler transform 'h': secret 'nope' is not configured; set STREAMLING__HTTP_SECRET_HEADER__NOPE (the "
        "header name) and STREAMLING__HTTP_SECRET_VALUE__NOPE (its value)"
    ]
    assert errors(schema_override={"colour": None}) == [
        "handler transform 'h': schema_override drops 'colour', which is not in the input; available columns: "
        "id, v, name"
    ]
    assert errors(schema_override={"id": None}) == [
        "Primary key validation failed for node 'h': columns [\"id\"] not found in schema. Available columns: "
        '["v", "name", "_gs_op"]'
    ]
    webhook = webhook_pipeline(url, secret_name="Hooks")
    assert validate_pipeline(write_pipeline(webhook, "hook.yaml"), make_settings(), spark).errors == [
        "webhook sink 'w': secret 'Hooks' is not configured; set STREAMLING__HTTP_SECRET_HEADER__HOOKS (the header "
        "name) and STREAMLING__HTTP_SECRET_VALUE__HOOKS (its value)"
    ]
    missing_key = handler_pipeline(url, "unused").replace(
        "            primary_key: id\n            url", "            url"
    )
    assert validate_pipeline(write_pipeline(missing_key, "nokey.yaml"), make_settings(), spark).errors == [
        "transform 'h' (type 'handler'): missing required field 'primary_key'"
    ]


def test_handler_output_read_by_two_sinks_is_requested_once(run, server) -> None:
    server.expect_request("/h").respond_with_handler(shouting_service(0))
    a, b = uuid.uuid4().hex, uuid.uuid4().hex
    text = handler_pipeline(server.url_for("/h"), a, one_row_per_request=True) + (
        f"          again: {{type: test.collect, from: h, options: {{key: {b}}}}}\n"
    )
    summary = run(text)
    assert len(server.log) == 5
    assert COLLECTED[a] == COLLECTED[b]
    assert summary.sink_rows == {"out": 5, "again": 5}


def webhook_pipeline(url: str, rows: int = 5, **fields: object) -> str:
    extra = "".join(f"            {name}: {json.dumps(value)}\n" for name, value in fields.items())
    return (
        SOURCE.format(rows=rows)
        + f"""
        sinks:
          w:
            type: webhook
            from: rows
            url: {url}
"""
        + extra
    )


def test_webhook_delivers_every_row_and_reports_operations(run, server) -> None:
    server.expect_request("/w").respond_with_data("ignored, not JSON")
    summary = run(webhook_pipeline(server.url_for("/w"), payload_version=1, batch_size=2))
    items = [encoded(row, 1) for row in ROWS]
    assert bodies(server) == sorted(b"[" + b",".join(items[i : i + 2]) + b"]" for i in range(0, 5, 2))
    assert summary.sink_ops == {"w": {"inserts": 3, "updates": 1, "deletes": 1, "unchanged": 0}}


def test_webhook_skip_on_error_logs_counts_and_continues(run, server, caplog) -> None:
    def answer(request: Request) -> Response:
        row = json.loads(request.get_data())
        return Response("no thanks", status=400) if row["id"] == 2 else Response("")

    server.expect_request("/w").respond_with_handler(answer)
    caplog.set_level(logging.INFO, logger="streamling")
    summary = run(webhook_pipeline(server.url_for("/w"), one_row_per_request=True, skip_on_error=True))
    assert len(server.log) == 5  # the failed ones were not retried
    assert summary.sink_rows == {"w": 5}
    assert (
        "webhook sink 'w': epoch 1 of src: skipped 2 of 5 requests (2 of 5 rows) after delivery failures; the "
        f"first: webhook POST {server.url_for('/w')}: non-retriable HTTP 400 - no thanks"
    ) in caplog.text


def test_webhook_without_skip_on_error_fails_on_a_client_error(run, server) -> None:
    server.expect_request("/w").respond_with_data("gone", status=410)
    with pytest.raises(StreamlingError) as info:
        run(webhook_pipeline(server.url_for("/w")))
    assert str(info.value) == f"webhook POST {server.url_for('/w')}: non-retriable HTTP 410 - gone"


def test_webhook_epoch_commits_only_after_every_request_finished(run, server, tmp_path) -> None:
    arrived, release = threading.Event(), threading.Event()

    def slow(request: Request) -> Response:
        arrived.set()
        release.wait(120)
        return Response("")

    server.expect_request("/w").respond_with_handler(slow)
    outcome: list[object] = []
    runner = threading.Thread(target=lambda: outcome.append(run(webhook_pipeline(server.url_for("/w"), rows=3))))
    runner.start()
    try:
        assert arrived.wait(180), "the webhook was never called"
        runner.join(2)  # give a wrong implementation the chance to commit early
        assert runner.is_alive()
        assert "src:generator" not in committed(tmp_path / "state.db")
    finally:
        release.set()
        runner.join(180)
    assert committed(tmp_path / "state.db")["src:generator"]["offset"] == 3
    assert outcome[0].sink_rows == {"w": 3}


def requests_by_id(server: HTTPServer) -> list[set[int]]:
    """The ids each request carried (payload version 0, batched)."""
    return [{item["id"] for item in json.loads(request.get_data())} for request, _ in server.log]


@pytest.mark.parametrize("node", ["handler", "webhook"])
def test_parallelism_spreads_the_requests_over_key_hashed_tasks(run, server, node: str) -> None:
    """One input partition holds every row; with `parallelism: 4` the rows are hashed by key into four tasks, each
    sending its own request (batch_size is larger than the epoch), and no key is split between two of them."""
    server.expect_request("/p").respond_with_handler(shouting_service(0))
    key = uuid.uuid4().hex
    fields = {"batch_size": 1000, "parallelism": 4}
    source = SOURCE.format(rows=60).replace("key_space: 3", "key_space: 12")
    if node == "handler":
        text = handler_pipeline(server.url_for("/p"), key, **fields).replace(SOURCE.format(rows=5), source)
    else:
        text = webhook_pipeline(server.url_for("/p"), **fields).replace(SOURCE.format(rows=5), source)
    run(text)
    carried = requests_by_id(server)
    assert 2 <= len(carried) <= 4
    assert sorted(i for ids in carried for i in ids) == list(range(1, 13))  # each key in exactly one request
    assert sum(len(json.loads(request.get_data())) for request, _ in server.log) == 60
    if node == "handler":
        assert len(COLLECTED[key]) == 60
