"""The second example plugin (plugins/acme_api): a driver-polled source reading a partner's orders API page by
page, killed with SIGKILL mid-run and restarted, through the `streamling` CLI into real Postgres: the shipped
pipelines/partner_orders.yaml with the API's address and a schema of the test's own.

The API is plugins/acme_api/demo_server.py, a real HTTP server on loopback in this process; it records the
cursor of every request, so the test sees where the resumed run starts. The target table carries a row-level
audit trigger (an append-only log of every insert/update the sink performs): a page applied twice would show
up there.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import uuid
from datetime import datetime
from decimal import Decimal
from pathlib import Path

import pytest

from tests.e2e.cli import sqlite_state, start_cli, wait_for, wait_until_gone, write

REPO = Path(__file__).resolve().parents[2]
ACME = REPO / "plugins" / "acme_api"
ORDERS = 600
PAGE = 20  # page_size in pipelines/partner_orders.yaml


def demo_server():
    """The example's stand-in API (standard library only), imported alone under a private name."""
    spec = importlib.util.spec_from_file_location("acme_api_demo_server_for_e2e", ACME / "demo_server.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def schema(pg_connect):
    name = f"acme_{uuid.uuid4().hex[:10]}"
    with pg_connect() as conn:
        conn.execute(f'CREATE SCHEMA "{name}"')
        conn.execute(
            f'CREATE TABLE "{name}".orders (id bigint PRIMARY KEY, customer text, amount numeric(12,2), '
            "updated_at timestamptz)"
        )
        conn.execute(f'CREATE TABLE "{name}".audit (id bigint, op text)')
        conn.execute(
            f'CREATE FUNCTION "{name}".audit() RETURNS trigger LANGUAGE plpgsql AS $$ '
            f'BEGIN INSERT INTO "{name}".audit VALUES (NEW.id, TG_OP); RETURN NULL; END $$'
        )
        conn.execute(
            f'CREATE TRIGGER audit AFTER INSERT OR UPDATE ON "{name}".orders '
            f'FOR EACH ROW EXECUTE FUNCTION "{name}".audit()'
        )
    yield name
    with pg_connect() as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


def test_polled_source_resumes_from_its_committed_cursor_after_sigkill(
    tmp_path: Path, postgres_env, pg_connect, schema: str
) -> None:
    server = demo_server()
    api = server.OrdersApi(ORDERS).start()
    shipped = (REPO / "pipelines" / "partner_orders.yaml").read_text()
    assert "url: http://127.0.0.1:8765" in shipped and "schema: acme\n" in shipped
    text = shipped.replace("http://127.0.0.1:8765", api.url).replace("schema: acme\n", f"schema: {schema}\n")
    path = write(tmp_path, text)
    env = {**postgres_env, "STREAMLING__PLUGIN__PATH": str(ACME)}
    db = tmp_path / "state.db"

    def cursor() -> int:
        position = sqlite_state(db).get("orders:position", {}).get("position")
        return int(position.removeprefix("o-")) if position else 0

    def rows() -> tuple:
        with pg_connect() as conn:
            return conn.execute(
                f'SELECT count(*), count(DISTINCT id), min(id), max(id) FROM "{schema}".orders'
            ).fetchone()

    try:
        first = start_cli(tmp_path, str(path), env=env)
        wait_for(lambda: cursor() >= 5 * PAGE, first)
        os.killpg(first.pid, signal.SIGKILL)
        first.wait(timeout=30)
        wait_until_gone(tmp_path)
        committed = sqlite_state(db)["orders:position"]["position"]
        asked_before_restart = len(api.cursors)
        assert api.cursors[0] is None  # the first run started from the beginning
        assert cursor() < ORDERS  # really killed mid-run

        second = start_cli(tmp_path, str(path), env=env)
        wait_for(lambda: rows()[0] == ORDERS, second, timeout=180)
        second.send_signal(signal.SIGTERM)
        assert second.wait(timeout=90) == 0, second.stderr.read()
    finally:
        api.shutdown()

    # The resumed run's first request asks for the page after the cursor the state backend held.
    assert api.cursors[asked_before_restart] == committed
    assert sqlite_state(db)["orders:position"]["position"] == f"o-{ORDERS}"
    assert rows() == (ORDERS, ORDERS, 1, ORDERS)
    with pg_connect() as conn:
        audit = conn.execute(f'SELECT count(*), count(DISTINCT id), min(op), max(op) FROM "{schema}".audit').fetchone()
        sample = conn.execute(
            f'SELECT id, customer, amount, updated_at FROM "{schema}".orders WHERE id = 123'
        ).fetchone()
    assert audit == (ORDERS, ORDERS, "INSERT", "INSERT")  # every order applied exactly once
    expected = server.order(123)
    assert sample[:3] == (123, expected["customer"], Decimal(expected["amount"]))
    assert sample[3] == datetime.fromisoformat(expected["updated_at"])
