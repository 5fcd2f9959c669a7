"""A Kafka broker stopped and restarted, and the Schema Registry away for a while, mid-run: the pipeline waits
and recovers by itself, with no restart, nothing lost and nothing committed past what was written.

Real services only: these tests stop and start this session's own broker and registry (infra/services, as
the Postgres resilience tests restart Postgres). Keys are unique ids, so after a clean stop the table must hold
exactly the produced records, and the state backend's positions must equal the topic's high watermarks.
"""

from __future__ import annotations

import io
import json
import logging
import threading
import time
import uuid

import fastavro
import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

from streamling.kafka.source.operator import KafkaSource
from streamling.kafka.source.reader import KafkaStreamReader, Range
from streamling.kafka.source.spec import KafkaSourceSpec
from streamling.state.sqlite import SqliteStateBackend
from tests.conftest import services
from tests.integration.streaming import Background

pytestmark = pytest.mark.integration

V1 = {
    "type": "record",
    "name": "Event",
    "fields": [{"name": "id", "type": "long"}, {"name": "amount", "type": "double"}],
}
V2 = {**V1, "fields": [*V1["fields"], {"name": "channel", "type": "string", "default": "web"}]}
OUTAGE_SEC = 12.0


@pytest.fixture
def schema(pg_connect):
    name = f"kr_{uuid.uuid4().hex[:10]}"
    yield name
    with pg_connect() as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


@pytest.fixture
def restore_services():
    """Whatever a test stopped is running again afterwards, even when it fails halfway."""
    yield
    services("up", "kafka", "registry")


def _rows(pg_connect, schema: str) -> list[tuple]:
    try:
        with pg_connect() as conn:
            return conn.execute(f'SELECT id, amount, channel FROM "{schema}".events ORDER BY id').fetchall()
    except Exception:  # the table is not created yet
        return []


def _offsets(tmp_path, topic: str) -> dict[int, int]:
    with SqliteStateBackend("local_app_v1", str(tmp_path / "state.db")) as state:
        prefix = f"src:{topic}:"
        return {int(k.removeprefix(prefix)): int(v["offset"]) for k, v in state.items(prefix).items()}


def _high_watermarks(kafka, topic: str) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": kafka.brokers, "group.id": f"hw-{uuid.uuid4().hex}"})
    try:
        return {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)[1] for p in (0, 1)
        }
    finally:
        consumer.close()


def _produce_framed(kafka, topic: str, schema_id: int, records: list[dict]) -> None:
    """Confluent framing by hand: the test's own registry client cannot be asked while the registry is down."""
    parsed = fastavro.parse_schema(V2)
    for record in records:
        out = io.BytesIO()
        fastavro.schemaless_writer(out, parsed, record)
        value = b"\x00" + schema_id.to_bytes(4, "big") + out.getvalue()
        kafka.send(topic, value, key=str(record["id"]).encode(), partition=record["id"] % 2)
    kafka.flush()


def _start(write_pipeline, make_settings, kafka, postgres_env, spark, topic: str, schema: str) -> Background:
    path = write_pipeline(f"""
        sources:
          src: {{type: kafka, topic: {topic}}}
        transforms:
          shaped:
            type: sql
            primary_key: id
            sql: SELECT id, amount, channel FROM src
        sinks:
          out: {{type: postgres, from: shaped, primary_key: id, schema: {schema}, table: events}}
        """)
    settings = make_settings(environ={**kafka.env, **postgres_env})
    return Background(path, settings, spark)


def _still_running(run: Background) -> None:
    assert run.thread.is_alive(), f"pipeline ended during the outage: {run.error!r}"


def test_broker_stopped_and_restarted_mid_run_loses_nothing(
    spark, make_settings, write_pipeline, kafka, postgres_env, pg_connect, schema, tmp_path, restore_services
) -> None:
    topic = kafka.topic("outage", partitions=2)
    kafka.register(topic, V2)
    first = [{"id": i, "amount": i * 1.5, "channel": "app"} for i in range(300)]
    kafka.produce_avro(topic, V2, first, partition_of=lambda i: i % 2)
    run = _start(write_pipeline, make_settings, kafka, postgres_env, spark, topic, schema)
    before = _high_watermarks(kafka, topic)
    run.wait_until(lambda: _offsets(tmp_path, topic) == before)
    assert len(_rows(pg_connect, schema)) == 300

    services("down", "kafka")
    time.sleep(OUTAGE_SEC)
    _still_running(run)
    services("up", "kafka")
    assert _high_watermarks(kafka, topic) == before  # the broker kept its log across the restart

    second = [{"id": i, "amount": i * 1.5, "channel": "app"} for i in range(300, 600)]
    kafka.produce_avro(topic, V2, second, partition_of=lambda i: second[i]["id"] % 2)
    after = _high_watermarks(kafka, topic)
    assert after == {0: before[0] + 150, 1: before[1] + 150}
    run.wait_until(lambda: len(_rows(pg_connect, schema)) == 600, timeout=60)
    run.finish()

    assert _rows(pg_connect, schema) == [(i, i * 1.5, "app") for i in range(600)]
    assert _offsets(tmp_path, topic) == after


def test_schema_registry_away_at_start_and_mid_run_loses_nothing(
    spark, make_settings, write_pipeline, kafka, postgres_env, pg_connect, schema, tmp_path, restore_services, caplog
) -> None:
    topic = kafka.topic("registry", partitions=2)
    kafka.produce_avro(topic, V1, [{"id": i, "amount": i * 1.5} for i in range(100)], partition_of=lambda i: i % 2)
    kafka.register(topic, V2)  # a compatible evolution; the reader schema captured at start
    # The mid-run records' schema: one the engine has not seen (the reader schema's own id needs no registry), under
    # another subject, as a record-name strategy would register it; it encodes like V2.
    unseen = {**V2, "fields": [*V1["fields"], {"name": "channel", "type": "string", "default": "mobile"}]}
    unseen_id = kafka.registry.register_schema(f"{topic}-mirror-value", Schema(json.dumps(unseen), "AVRO"))

    # Away at start: the pipeline waits for the reader schema instead of failing.
    services("down", "registry")
    caplog.set_level(logging.INFO, logger="streamling.kafka")
    run = _start(write_pipeline, make_settings, kafka, postgres_env, spark, topic, schema)
    try:
        time.sleep(OUTAGE_SEC)  # longer than the registry client's own few retries
        _still_running(run)
        assert _rows(pg_connect, schema) == []
        services("up", "registry")
        run.wait_until(lambda: len(_rows(pg_connect, schema)) == 100, timeout=60)
        waited = [r.getMessage() for r in caplog.records if "Schema Registry" in r.getMessage()]
        assert len(waited) == 2, waited
        assert waited[0].startswith("kafka source 'src': Schema Registry unreachable (")
        assert waited[0].endswith("), waiting up to 300 s")
        assert waited[1].startswith("kafka source 'src': Schema Registry reachable again after ")
        before = _high_watermarks(kafka, topic)
        run.wait_until(lambda: _offsets(tmp_path, topic) == before)

        # Away mid-run, when records written with a schema id the engine has not seen yet arrive.
        services("down", "registry")
        second = [{"id": i, "amount": i * 1.5, "channel": "app"} for i in range(100, 160)]
        _produce_framed(kafka, topic, unseen_id, second)
        time.sleep(OUTAGE_SEC)
        _still_running(run)
        assert _offsets(tmp_path, topic) == before  # nothing committed past the records it could not decode
        assert len(_rows(pg_connect, schema)) == 100
        services("up", "registry")
        fresh = SchemaRegistryClient({"url": kafka.registry_url})
        assert json.loads(fresh.get_schema(unseen_id).schema_str) == unseen  # kept across the restart

        run.wait_until(lambda: len(_rows(pg_connect, schema)) == 160, timeout=60)
        run.finish()
    finally:  # a failed assertion must not leave the query running in the shared session
        run.stop.set()
        run.thread.join(60)
    expected = [(i, i * 1.5, "web") for i in range(100)] + [(i, i * 1.5, "app") for i in range(100, 160)]
    assert _rows(pg_connect, schema) == expected
    assert _offsets(tmp_path, topic) == _high_watermarks(kafka, topic) == {0: before[0] + 30, 1: before[1] + 30}


def test_executor_read_waits_for_the_broker(make_settings, kafka, restore_services, caplog) -> None:
    """The executor side on its own, called in this process (no Spark in between, so its log lines can be
    read): a planned range is read while the broker is down. The stall watchdog is shortened to 10 s
    (``kafka_source.stall_watchdog_timeout_sec``) so that the 12 s outage would fail the read if it were taken
    for a stall."""
    topic = kafka.topic("reader", partitions=2)
    records = [{"id": i, "amount": 1.0, "channel": "app"} for i in range(150)]
    kafka.produce_avro(topic, V2, records, partition_of=lambda i: 0)
    settings = make_settings(environ={**kafka.env, "STREAMLING__KAFKA_SOURCE__STALL_WATCHDOG_TIMEOUT_SEC": "10"})
    source = KafkaSource("src", KafkaSourceSpec.model_validate({"type": "kafka", "topic": topic}), settings)
    reader = KafkaStreamReader(source.reader_options({"0": 0, "1": 0}, None, parallelism=1), source.schema())
    batches, failure = [], []

    def read() -> None:
        try:
            batches.extend(reader.read(Range(0, 0, 150)))
        except BaseException as exc:
            failure.append(exc)

    with caplog.at_level(logging.INFO, logger="streamling.kafka"):
        services("down", "kafka")
        thread = threading.Thread(target=read, daemon=True)
        thread.start()
        time.sleep(OUTAGE_SEC)
        assert thread.is_alive() and not failure, failure
        services("up", "kafka")
        thread.join(60)
    assert not thread.is_alive() and not failure, failure
    assert [i for batch in batches for i in batch.column("id").to_pylist()] == list(range(150))
    waited = [r.getMessage() for r in caplog.records if r.name == "streamling.kafka"]
    where = f"kafka source 'src' (topic '{topic}' partition 0)"
    assert len(waited) == 2, waited
    assert waited[0].startswith(f"{where}: broker unreachable (cannot read metadata of topic '{topic}': ")
    assert waited[0].endswith("), waiting up to 300 s")
    assert waited[1].startswith(f"{where}: broker reachable again after ")
