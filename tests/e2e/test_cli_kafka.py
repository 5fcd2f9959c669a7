"""Kafka through the CLI: kill -9 mid-stream, restart, and every produced key arrives."""

from __future__ import annotations

import os
import signal
from collections import Counter
from pathlib import Path

import pytest

from tests.e2e.cli import printed_ids, sqlite_state, start_cli, wait_for, write
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
