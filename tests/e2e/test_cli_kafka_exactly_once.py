"""The Kafka sink with ``exactly_once: true`` through the CLI, killed with SIGKILL inside its transaction, after
its transaction committed but before the state backend did, and after both; a ``read_committed`` consumer then
sees every record exactly once, while a ``read_uncommitted`` one also sees what the killed transaction produced."""

from __future__ import annotations

import json
import time
import uuid

from confluent_kafka import Consumer, TopicPartition

from tests.e2e.cli import run_cli, sqlite_state, write


def _values(kafka, topic: str, isolation: str) -> list[int]:
    consumer = Consumer(
        {
            "bootstrap.servers": kafka.brokers,
            "group.id": f"check-{uuid.uuid4().hex}",
            "isolation.level": isolation,
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
        }
    )
    partitions = sorted(consumer.list_topics(topic, timeout=10).topics[topic].partitions)
    consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
    ids: list[int] = []
    ended: set[int] = set()
    deadline = time.monotonic() + 60
    while len(ended) < len(partitions) and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is None:
            continue
        if message.error():
            ended.add(message.partition())
            continue
        ids.append(json.loads(message.value())["id"])
    consumer.close()
    return ids


def test_a_read_committed_consumer_sees_every_record_once_across_crashes_at_every_point(tmp_path, kafka) -> None:
    topic = f"eo_{uuid.uuid4().hex[:8]}"
    pipeline = write(
        tmp_path,
        f"""
        sources:
          src: {{type: generator, rows: 600, record_batch_size: 100, primary_key: id}}
        sinks:
          out: {{type: kafka, from: src, topic: {topic}, data_format: json, exactly_once: true}}
        """,
    )
    env = {**kafka.env, "STREAMLING__JOB_MODE": "true"}
    runs = []
    for point in ("during_write:2", "after_write:3", "after_commit:4"):
        crashed = run_cli(tmp_path, str(pipeline), env={**env, "STREAMLING_CRASH_AT": point})
        assert crashed.returncode == -9, crashed.stderr
        runs.append(crashed.stderr)
    done = run_cli(tmp_path, str(pipeline), env=env)
    assert done.returncode == 0, done.stderr
    # Epoch 3 committed in Kafka, not in the state backend: the next run replays it, and the sink skips it.
    assert "kafka sink 'out': epoch 3 of src was committed before; skipped" in runs[2], runs[2]
    assert sqlite_state(tmp_path / "state.db")["src:generator"]["offset"] == 600
    committed = _values(kafka, topic, "read_committed")
    assert sorted(committed) == list(range(1, 601)), (len(committed), len(set(committed)))
    assert len(_values(kafka, topic, "read_uncommitted")) > 600  # the killed transaction's records, aborted
