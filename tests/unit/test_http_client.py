"""The shared HTTP client against real loopback servers (no Spark): concurrency bounded by buffer_size with
answers in input order, one session per process, retries with Retry-After, and the failure messages."""

from __future__ import annotations

import json
import re
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

import pyarrow as pa
import pytest
from pytest_httpserver import HTTPServer
from werkzeug import Request, Response

from streamling.core.retry import RetryPolicy
from streamling.errors import StreamlingError
from streamling.http.client import Delivered, Endpoint, Skipped, exchange, session
from streamling.http.payloads import PayloadFormat

ONE_ROW = PayloadFormat(version=0, rows_per_request=1, one_row=True)


def endpoint(url: str, **changes: object) -> Endpoint:
    fields: dict = {
        "label": "handler transform 'h'",
        "what": "HTTP handler",
        "url": url,
        "headers": (("Content-Type", "application/json"),),
        "secrets": (),
        "timeout_sec": 10.0,
        "buffer_size": 3,
        "retry": RetryPolicy(max_retries=5, retry_timeout_sec=30, backoff_sec=0.01, backoff_max_sec=0.05),
    }
    fields.update(changes)
    return Endpoint(**fields)


def rows(n: int) -> list[pa.RecordBatch]:
    return [pa.RecordBatch.from_pydict({"id": list(range(n)), "_gs_op": ["i"] * n})]


def run(ep: Endpoint, n: int, fmt: PayloadFormat = ONE_ROW) -> list:
    return [answer for _, answer in exchange(iter(rows(n)), ep, fmt)]


def test_requests_run_concurrently_up_to_buffer_size_and_answers_keep_input_order(server: HTTPServer) -> None:
    lock = threading.Lock()
    state = {"in_flight": 0, "max": 0}
    full = threading.Event()

    def handler(request: Request) -> Response:
        body = json.loads(request.get_data())
        with lock:
            state["in_flight"] += 1
            state["max"] = max(state["max"], state["in_flight"])
            if state["in_flight"] >= 3:
                full.set()
        full.wait(5)  # the first requests wait until three are in flight at once (never more than 5 s)
        time.sleep(0.01 * (body["id"] % 3))  # answers come back out of order
        with lock:
            state["in_flight"] -= 1
        return Response(json.dumps({"echo": body["id"]}), content_type="application/json")

    server.expect_request("/h", method="POST").respond_with_handler(handler)
    answers = run(endpoint(server.url_for("/h"), buffer_size=3), 12)
    assert [json.loads(a.body)["echo"] for a in answers] == list(range(12))
    assert state["max"] == 3
    assert len(server.log) == 12


class _KeepAlive(BaseHTTPRequestHandler):
    """HTTP/1.1 with keep-alive (werkzeug's test server closes every connection); records client ports."""

    protocol_version = "HTTP/1.1"
    ports: ClassVar[list[int]] = []

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        self.ports.append(self.client_address[1])
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *args: object) -> None:
        pass


def test_one_session_per_process_reused_across_exchanges_with_keep_alive() -> None:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _KeepAlive)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{httpd.server_port}/h"
        first = session()
        run(endpoint(url, buffer_size=1), 3)
        run(endpoint(url, buffer_size=1), 3)
        assert session() is first
        assert len(_KeepAlive.ports) == 6
        assert len(set(_KeepAlive.ports)) == 1  # one connection, kept alive across requests and exchanges
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_retries_503_then_429_honouring_retry_after(server: HTTPServer) -> None:
    server.expect_ordered_request("/h").respond_with_data("busy", status=503)
    server.expect_ordered_request("/h").respond_with_data("slow down", status=429, headers={"Retry-After": "1"})
    server.expect_ordered_request("/h").respond_with_data('{"ok": true}')
    started = time.monotonic()
    answers = run(endpoint(server.url_for("/h")), 1)
    waited = time.monotonic() - started
    assert answers == [Delivered(b'{"ok": true}')]
    assert len(server.log) == 3
    assert waited >= 0.9  # Retry-After: 1 was honoured (a lower bound, not a speed check)


def test_non_retriable_status_fails_with_the_exact_message(server: HTTPServer) -> None:
    body = "bad row\n" + "x" * 300 + " s3cr3t"
    server.expect_request("/h").respond_with_data(body, status=400)
    ep = endpoint(server.url_for("/h"), secrets=("s3cr3t",))
    with pytest.raises(StreamlingError) as info:
        run(ep, 1)
    assert info.value.user_facing
    assert str(info.value) == (
        f"HTTP handler POST {server.url_for('/h')}: non-retriable HTTP 400 - bad row " + "x" * 191 + "…"
    )
    server.clear()
    server.expect_request("/h").respond_with_data("wrong key s3cr3t", status=401)
    with pytest.raises(StreamlingError) as info:
        run(ep, 1)
    assert str(info.value).endswith("non-retriable HTTP 401 - wrong key ***")


def test_exhausted_retries_are_a_retriable_error_naming_node_and_url(server: HTTPServer) -> None:
    server.expect_request("/h").respond_with_data("down for maintenance", status=503)
    ep = endpoint(server.url_for("/h?token=abc"), retry=RetryPolicy(2, 30, 0.01, 0.02))
    with pytest.raises(StreamlingError) as info:
        run(ep, 1)
    assert info.value.retriable
    message = str(info.value)
    assert message.startswith(
        f"handler transform 'h': HTTP handler POST {server.url_for('/h')}?token=***: retries exhausted after 3 attempts in "
    )
    assert message.endswith("s; last failure: HTTP 503 - down for maintenance")
    assert len(server.log) == 3


def test_timeouts_and_refused_connections_are_retried(server: HTTPServer) -> None:
    def slow(request: Request) -> Response:
        time.sleep(1.0)
        return Response("{}")

    server.expect_request("/slow").respond_with_handler(slow)
    ep = endpoint(server.url_for("/slow"), timeout_sec=0.2, retry=RetryPolicy(1, 30, 0.01, 0.02))
    with pytest.raises(StreamlingError) as info:
        run(ep, 1)
    assert "retries exhausted after 2 attempts" in str(info.value)
    assert str(info.value).endswith("last failure: timed out after 0.2s (TimeoutError)")
    # the time counts from the first attempt (made before the retry loop), so both timeouts are in it
    assert float(re.search(r"attempts in ([0-9.]+)s", str(info.value)).group(1)) >= 0.4

    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(StreamlingError) as info:
        run(endpoint(f"http://127.0.0.1:{port}/h", retry=RetryPolicy(1, 30, 0.01, 0.02)), 1)
    assert "last failure: ConnectError: " in str(info.value)


def test_skip_on_error_hands_back_skipped_requests(server: HTTPServer) -> None:
    def handler(request: Request) -> Response:
        row = json.loads(request.get_data())
        return Response("no", status=400) if row["id"] % 2 else Response("")

    server.expect_request("/w").respond_with_handler(handler)
    ep = endpoint(server.url_for("/w"), what="webhook", skip_on_error=True)
    answers = run(ep, 4)
    assert answers[0] == Delivered(b"")
    assert answers[1] == Skipped(f"webhook POST {server.url_for('/w')}: non-retriable HTTP 400 - no")
    assert [type(a).__name__ for a in answers] == ["Delivered", "Skipped", "Delivered", "Skipped"]


def test_batched_requests_are_capped_by_rows_per_request(server: HTTPServer) -> None:
    server.expect_request("/b").respond_with_data("[]")
    fmt = PayloadFormat(version=0, rows_per_request=2, one_row=False)
    run(endpoint(server.url_for("/b")), 5, fmt)
    sizes = sorted(len(json.loads(request.get_data())) for request, _ in server.log)
    assert sizes == [1, 2, 2]


def test_operator_timeout_fails_a_task_whose_requests_outlast_it(server: HTTPServer) -> None:
    """external_http_handler.operator_timeout_sec bounds a task's whole exchange, not one request (each request
    here answers well within timeout_sec)."""

    def slow(request: Request) -> Response:
        time.sleep(0.3)
        return Response("{}", content_type="application/json")

    server.expect_request("/h", method="POST").respond_with_handler(slow)
    ep = endpoint(server.url_for("/h"), buffer_size=1, operator_timeout_sec=0.5)
    started = time.monotonic()
    with pytest.raises(StreamlingError) as caught:
        run(ep, 6)
    assert caught.value.retriable
    assert caught.value.message.startswith(
        "handler transform 'h': the requests of one Spark task took longer than "
        "external_http_handler.operator_timeout_sec (0.5s); "
    )
    assert caught.value.message.endswith(f"were still unanswered (HTTP handler POST {server.url_for('/h')})")
    assert time.monotonic() - started < 1.5
    assert len(run(endpoint(server.url_for("/h"), buffer_size=3, operator_timeout_sec=5), 6)) == 6
