"""Kafka through the CLI: kill -9 mid-stream, restart, and every produced key arrives; a registry outage at start."""

from __future__ import annotations

import json
import os
import signal
import socket
from collections import Counter
from pathlib import Path

import pytest

from tests.e2e.cli import printed_ids, run_cli, sqlite_state, start_cli, wait_for, write
from tests.integration.test_kafka import TX_SCHEMA, tx

pytestmark = pytest.mark.integration


def _committed(db: Path, topic: str) -> int:
    return sum(v["offset"] for k, v in sqlite_state(db).items() if k.startswith(f"src:{topic}:"))


def test_kill_9_mid_stream_then_restart_delivers_every_key(tmp_path: Path, kafka) -> None:
    topic = kafka.topic("kill", partitions=3)
    total = 3000
    kafka.produce_avro(topic, TX_SCHEMA, [tx(i) for i in range(total)], partition_of=lambda i: i % 3)
    path = write(
        tmp_path,
        f"""
        sources:
          src: {{type: kafka, topic: {topic}, record_batch_size: 300}}
        sinks:
          out: {{type: print, from: src}}
        """,
    )
    env = {**kafka.env, "STREAMLING__CHECKPOINT_INTERVAL_SEC": "300ms"}
    db = tmp_path / "state.db"
    first_out = (tmp_path / "first.txt").open("w")
    proc = start_cli(tmp_path, str(path), env=env, stdout=first_out)
    wait_for(lambda: _committed(db, topic) >= 900, proc)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    first_out.close()
    committed_at_kill = _committed(db, topic)
    first = printed_ids((tmp_path / "first.txt").read_text())
    assert len(set(first)) < total  # killed mid-stream

    second_out = (tmp_path / "second.txt").open("w")
    proc = start_cli(tmp_path, str(path), env=env, stdout=second_out)
    wait_for(lambda: _committed(db, topic) == total, proc)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0
    second_out.close()
    second = printed_ids((tmp_path / "second.txt").read_text())
    everything = Counter(first + second)
    assert sorted(everything) == list(range(total))  # every produced key arrived
    # The restart resumed exactly at the committed offsets: only rows printed but not yet committed repeat.
    assert len(second) == total - committed_at_kill
    assert sum(n - 1 for n in everything.values()) == len(first) - committed_at_kill


def _closed_port() -> int:
    """A loopback port nothing listens on: connections to it are refused at once."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_schema_registry_outage_at_start_is_a_failed_run_not_an_invalid_pipeline(tmp_path: Path) -> None:
    """A registry that stays unreachable through `unavailable_timeout_sec` while the pipeline is planned ends the
    run with exit 1 (retriable), in --validate too, where the JSON says the validation could not finish."""
    path = write(
        tmp_path,
        """
        sources:
          src: {type: kafka, topic: orders}
        sinks:
          out: {type: print, from: src}
        """,
    )
    url = f"http://127.0.0.1:{_closed_port()}"
    env = {
        "STREAMLING__KAFKA_SOURCE__SCHEMA_REGISTRY_URL": url,
        "STREAMLING__KAFKA_SOURCE__UNAVAILABLE_TIMEOUT_SEC": "1",
    }
    message = (
        f"kafka source 'src': failed to fetch the Avro schema of subject 'orders-value' from the Schema Registry "
        f"at {url}: [Errno 111] Connection refused"
    )
    run = run_cli(tmp_path, str(path), env=env)
    assert run.returncode == 1, run.stderr
    assert [line for line in run.stderr.splitlines() if line.startswith("Error:")] == [f"Error: {message}"]
    assert run.stderr.count("Schema Registry unreachable") == 1  # waited out once, before the session was there
    assert "Traceback" not in run.stderr
    assert not (tmp_path / "state.db").exists()

    validated = run_cli(tmp_path, str(path), "--validate", env=env)
    assert validated.returncode == 1, validated.stderr
    assert json.loads(validated.stdout) == {"success": False, "is_valid": None, "errors": [message], "warnings": []}
