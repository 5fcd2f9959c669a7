"""The shipped orders pipelines over real services: `infra/services seed` fills the ClickHouse table and the Kafka
topic once (a second seed changes nothing), then pipelines/orders_hybrid.yaml backfills from ClickHouse and streams
the topic into Postgres, and pipelines/order_totals.yaml aggregates the topic, both through the `streamling` CLI.

The test owns the topic `shop.orders` and the Postgres schema `shop` on the shared services: it deletes both first.
The embedded ClickHouse lives in a temporary path that the seed (its own processes) writes and the hybrid reads
after the seed exited: chdb opens a data path in one process at a time.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from confluent_kafka import Consumer

from tests.e2e.cli import cli_env, sqlite_state, start_cli, wait_for

REPO = Path(__file__).resolve().parents[2]
TOPIC = "shop.orders"


def seed(cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    """`infra/services seed` with the state, checkpoints and ClickHouse data under `cwd` (its runs start in the
    repository root, where relative paths would land)."""
    return subprocess.run(
        [sys.executable, str(REPO / "infra" / "services"), "seed"],
        env=cli_env(cwd, env),
        capture_output=True,
        text=True,
        timeout=300,
    )


def topic_changes(brokers: str) -> dict[bytes, bytes]:
    """The last `dbz.op` per message key (the order id) in the topic."""
    consumer = Consumer(
        {"bootstrap.servers": brokers, "group.id": f"orders-{time.time()}", "auto.offset.reset": "earliest"}
    )
    consumer.subscribe([TOPIC])
    last: dict[bytes, bytes] = {}
    idle = time.time()
    while time.time() - idle < 5:
        message = consumer.poll(0.5)
        if message is None or message.error():
            continue
        idle = time.time()
        last[message.key()] = dict(message.headers() or [])["dbz.op"]
    consumer.close()
    return last


def stop(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=90) == 0, proc.stderr.read()


def test_seed_once_then_hybrid_backfills_and_streams_and_totals_follow_the_topic(
    tmp_path, kafka, postgres_env, pg_connect
) -> None:
    if TOPIC in kafka.admin.list_topics(timeout=10).topics:
        kafka.admin.delete_topics([TOPIC])[TOPIC].result(timeout=30)
    with pg_connect() as conn:
        conn.execute("DROP SCHEMA IF EXISTS shop CASCADE")
    clickhouse = str(tmp_path / "clickhouse")
    chdb = {"STREAMLING__CLICKHOUSE_SOURCE__PATH": clickhouse, "STREAMLING__CLICKHOUSE_SINK__PATH": clickhouse}

    first = seed(tmp_path, chdb)
    assert first.returncode == 0, first.stderr
    wrote = re.search(
        r"seed: wrote (\d+) rows \((\d+) current orders\) into ClickHouse table default.orders_archive", first.stdout
    )
    published = re.search(
        r"seed: published (\d+) orders to Kafka topic shop.orders \(Avro, subject shop.orders-value", first.stdout
    )
    assert wrote and published, first.stdout
    assert int(wrote[1]) == 20000  # ids 1..20000, the latest change of each (the sink keeps one per id and epoch)
    archived = int(wrote[2])
    changes = topic_changes(kafka.brokers)
    # the topic's run committed its position as `./dev run` would: the live stream continues after the seeded orders
    assert sqlite_state(tmp_path / "state.db")["new_orders:generator"]["offset"] == int(published[1])
    assert len(changes) == int(published[1])  # ids 20001.. are new in the first 5000 orders: one record each

    again = seed(tmp_path, chdb)
    assert again.returncode == 0, again.stderr
    assert "ClickHouse table default.orders_archive already holds 20000 rows" in again.stdout, again.stdout
    assert f"Kafka topic shop.orders already holds {published[1]} records; left as is" in again.stdout
    assert "running pipelines/" not in again.stdout
    assert topic_changes(kafka.brokers) == changes

    live_in_topic = sum(1 for op in changes.values() if op != b"d")  # a cancelled order never reaches Postgres
    env = {**kafka.env, **postgres_env, **chdb}

    def count(sql: str) -> int:
        with pg_connect() as conn:
            try:
                return conn.execute(sql).fetchone()[0] or 0
            except Exception:
                return 0

    hybrid = start_cli(tmp_path, str(REPO / "pipelines" / "orders_hybrid.yaml"), env=env)
    try:
        wait_for(lambda: count("SELECT count(*) FROM shop.orders") == archived + live_in_topic, hybrid, timeout=240)
        assert count("SELECT count(*) FROM shop.orders WHERE id <= 20000") == archived
        assert count("SELECT count(*) FROM shop.orders WHERE large <> (amount >= 1000)") == 0
    finally:
        stop(hybrid)
    assert sqlite_state(tmp_path / "state.db").get("orders:__phase__") is not None  # it reached the Kafka phase

    # order_totals: +1 per new order, -1 per cancellation, over the same topic
    expected = sum(1 for op in changes.values() if op == b"c") - sum(1 for op in changes.values() if op == b"d")
    totals = start_cli(tmp_path, str(REPO / "pipelines" / "order_totals.yaml"), env=env)
    try:
        wait_for(lambda: count("SELECT sum(orders) FROM shop.totals_by_customer") == expected, totals, timeout=240)
    finally:
        stop(totals)
