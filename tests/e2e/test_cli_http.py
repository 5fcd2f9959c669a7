"""The CLI as a black box with an HTTP handler and a webhook carrying a secret header: everything the process
tree prints — driver logs at debug, the JVM, Spark's Python workers — is captured and grepped for the secret."""

from __future__ import annotations

import json
from pathlib import Path

from pytest_httpserver import HTTPServer
from werkzeug import Request, Response

from tests.e2e.cli import run_cli, write

SECRET = "Zs3cr3t-token-9"
ENV = {
    "STREAMLING__JOB_MODE": "true",
    "STREAMLING__LOG_LEVEL": "debug",
    "STREAMLING__HTTP_SECRET_HEADER__PARTNER": "Authorization",
    "STREAMLING__HTTP_SECRET_VALUE__PARTNER": SECRET,
}


def refusing_row_3(request: Request) -> Response:
    """Answers rows with the right key; refuses row 3, quoting the key it got (as careless services do)."""
    if request.headers.get("Authorization") != SECRET:
        return Response("no key", status=401)
    row = json.loads(request.get_data())
    if row["id"] == 3:
        return Response(f"key {request.headers['Authorization']} may not send row 3", status=403)
    return Response(json.dumps(row), content_type="application/json")


def test_handler_failure_and_webhook_skips_never_print_the_secret(tmp_path: Path, server: HTTPServer) -> None:
    server.expect_request("/h", method="POST").respond_with_handler(refusing_row_3)
    url = server.url_for("/h")
    handler = write(
        tmp_path,
        f"""
        sources:
          src: {{type: generator, rows: 6}}
        transforms:
          enrich:
            type: handler
            from: src
            primary_key: id
            url: {url}
            secret_name: partner
            one_row_per_request: true
        sinks:
          out: {{type: blackhole, from: enrich}}
        """,
    )
    validated = run_cli(tmp_path, str(handler), "--validate", env=ENV)
    assert json.loads(validated.stdout)["is_valid"] is True, validated.stdout
    failed = run_cli(tmp_path, str(handler), env=ENV)
    assert failed.returncode == 1, failed.stderr
    assert f"Error: HTTP handler POST {url}: non-retriable HTTP 403 - key *** may not send row 3" in failed.stderr

    webhook = write(
        tmp_path,
        f"""
        sources:
          src: {{type: generator, rows: 6}}
        sinks:
          notify:
            type: webhook
            from: src
            url: {url}
            secret_name: partner
            one_row_per_request: true
            skip_on_error: true
        """,
        "webhook.yaml",
    )
    delivered = run_cli(tmp_path, str(webhook), env=ENV)
    assert delivered.returncode == 0, delivered.stderr
    assert "webhook sink 'notify': epoch 1 of src: skipped 1 of 6 requests (1 of 6 rows)" in delivered.stderr
    # The executor's own warning (a Python worker's stderr) is in the captured output too.
    assert "webhook sink 'notify': skipped a request of 1 rows: webhook POST" in delivered.stderr
    assert all(request.headers["Authorization"] == SECRET for request, _ in server.log)
    for output in (validated, failed, delivered):
        assert SECRET not in output.stdout + output.stderr
