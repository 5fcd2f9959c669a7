"""The Kafka fields kept from the original, on the real broker and schema registry: `schema_id_overrides`,
`message_max_bytes`, `deduplicate`, a source's `batch_size` and `kafka_source.lag_report_interval_ms`."""

from __future__ import annotations

import json
import re
import uuid

import pytest
from confluent_kafka.schema_registry import Schema

from streamling import run_pipeline
from streamling.errors import StreamlingError
from streamling.kafka.source.operator import KafkaSource
from streamling.kafka.source.reader import KafkaStreamReader, Range
from streamling.kafka.source.spec import KafkaSourceSpec
from tests.integration.collect_sink import COLLECTED
from tests.integration.streaming import Background

pytestmark = pytest.mark.integration

ITEM = {
    "type": "record",
    "name": "Item",
    "fields": [{"name": "id", "type": "long"}, {"name": "label", "type": "string"}],
}
PRICED = {
    "type": "record",
    "name": "Item",
    "fields": [{"name": "id", "type": "long"}, {"name": "price", "type": "double"}],
}


def collected(key: str) -> list[dict]:
    return [row for _, row in COLLECTED.get(key, [])]


@pytest.fixture
def misframed(kafka):
    """A topic whose records are `ITEM`s but framed with the id of an unrelated schema (`PRICED`, registered
    under another subject): what a producer that registered the wrong schema leaves behind."""
    topic = kafka.topic("misframed", partitions=1)
    right = kafka.register(topic, ITEM)
    wrong = kafka.registry.register_schema(f"{topic}-other", Schema(json.dumps(PRICED), "AVRO"))
    records = [{"id": i, "label": f"item {i}"} for i in range(6)]
    kafka.produce_avro(topic, ITEM, records, schema_id=wrong, partition_of=lambda i: 0)
    return topic, right, wrong, records


def test_schema_id_overrides_decode_misframed_records_with_the_named_schema(
    spark, make_settings, write_pipeline, kafka, misframed
) -> None:
    topic, right, wrong, records = misframed
    text = """
        sources:
          src: {{type: kafka, topic: {topic}, ending_offsets: latest{extra}}}
        sinks:
          out: {{type: test.collect, from: src, options: {{key: {key}}}}}
        """
    settings = make_settings(environ=kafka.env, job_mode=True)
    key = uuid.uuid4().hex
    path = write_pipeline(
        text.format(topic=topic, key=key, extra=f", schema_id_overrides: [{{from: {wrong}, to: {right}}}]")
    )
    run_pipeline(path, settings, spark)
    assert sorted(collected(key), key=lambda r: r["id"]) == [{**r, "_gs_op": "i"} for r in records]

    # Without the override the frame's schema cannot read them.
    path = write_pipeline(text.format(topic=topic, key=uuid.uuid4().hex, extra=""), "plain.yaml")
    with pytest.raises(StreamlingError) as info:
        run_pipeline(path, make_settings(environ=kafka.env, job_mode=True, application_id="plain"), spark)
    assert str(info.value).startswith(f"kafka source 'src': message at topic '{topic}' partition 0 offset 0: ")

    # An override to an id the registry does not know stops the run before it reads anything.
    path = write_pipeline(
        text.format(topic=topic, key=uuid.uuid4().hex, extra=f", schema_id_overrides: [{{from: {wrong}, to: 987654}}]"),
        "unknown.yaml",
    )
    with pytest.raises(StreamlingError) as info:
        run_pipeline(path, make_settings(environ=kafka.env, job_mode=True, application_id="unknown"), spark)
    assert str(info.value) == (
        f"kafka source 'src': schema_id_overrides maps schema id {wrong} to 987654, which is not in the Schema Registry"
    )
    assert info.value.user_facing


def test_message_max_bytes_limits_what_the_sink_produces(spark, make_settings, write_pipeline, kafka) -> None:
    topic = f"big_{uuid.uuid4().hex[:10]}"
    text = f"""
        sources:
          src: {{type: generator, rows: 5, primary_key: id}}
        transforms:
          wide:
            type: sql
            primary_key: id
            sql: SELECT id, repeat('x', 3000) AS blob FROM src
        sinks:
          out: {{type: kafka, from: wide, topic: {topic}, message_max_bytes: LIMIT}}
        """
    with pytest.raises(StreamlingError) as info:
        run_pipeline(
            write_pipeline(text.replace("LIMIT", "1000")), make_settings(environ=kafka.env, job_mode=True), spark
        )
    assert re.fullmatch(
        r"kafka sink 'out': the message for key '\d' is 30\d\d bytes, more than the producer's message\.max\.bytes "
        r"\(1000\); raise message_max_bytes",
        str(info.value),
    ), str(info.value)
    settings = make_settings(environ=kafka.env, job_mode=True, application_id="roomy")
    run_pipeline(write_pipeline(text.replace("LIMIT", "5000"), "roomy.yaml"), settings, spark)
    assert len(kafka.read_all(topic, 5, timeout=30)) == 5


@pytest.mark.parametrize("deduplicate", [True, False])
def test_deduplicate_produces_the_last_row_per_key_of_an_epoch(
    spark, make_settings, write_pipeline, kafka, deduplicate: bool
) -> None:
    """30 changes of 10 keys in one epoch (each key in one partition, in order, as keyed topics keep them)."""
    source_topic = kafka.topic("changes", partitions=2)
    schema = {
        "type": "record",
        "name": "Change",
        "fields": [{"name": "id", "type": "long"}, {"name": "seq", "type": "long"}],
    }
    records = [{"id": i % 10, "seq": i} for i in range(30)]
    ops = [b"c"] * 10 + [b"u"] * 19 + [b"d"]
    kafka.produce_avro(source_topic, schema, records, ops=ops, partition_of=lambda i: records[i]["id"] % 2)
    sink_topic = f"last_{uuid.uuid4().hex[:10]}"
    path = write_pipeline(f"""
        sources:
          src: {{type: kafka, topic: {source_topic}, ending_offsets: latest, primary_key: id}}
        sinks:
          out: {{type: kafka, from: src, topic: {sink_topic}, deduplicate: {str(deduplicate).lower()}}}
        """)
    summary = run_pipeline(path, make_settings(environ=kafka.env, job_mode=True), spark)
    assert summary.sources["src"].epochs == 1
    messages = kafka.read_all(sink_topic, 30 if not deduplicate else 10, timeout=30)
    if deduplicate:
        last = {m["value"]["id"]: (m["value"]["seq"], m["headers"]["dbz.op"]) for m in messages}
        assert len(messages) == 10
        assert last == {i: (20 + i, b"d" if i == 9 else b"u") for i in range(10)}
    else:
        assert sorted(m["value"]["seq"] for m in messages) == list(range(30))


def test_lag_is_logged_every_interval(spark, make_settings, write_pipeline, kafka, caplog) -> None:
    topic = kafka.topic("lag", partitions=2)
    kafka.produce_avro(topic, ITEM, [{"id": i, "label": "x"} for i in range(20)], partition_of=lambda i: i % 2)
    key = uuid.uuid4().hex
    path = write_pipeline(f"""
        sources:
          src: {{type: kafka, topic: {topic}}}
        sinks:
          out: {{type: test.collect, from: src, options: {{key: {key}}}}}
        """)
    caplog.set_level("INFO", logger="streamling.kafka")
    settings = make_settings(environ=kafka.env, **{"kafka_source.lag_report_interval_ms": "200ms"})
    run = Background(path, settings, spark)
    run.wait_until(lambda: len(collected(key)) >= 20)
    kafka.produce_avro(topic, ITEM, [{"id": i, "label": "y"} for i in range(20, 25)], partition_of=lambda i: 0)
    run.wait_until(lambda: len(collected(key)) >= 25)
    caught_up = (
        f"kafka source 'src' lag on topic '{topic}': 0 records after the committed offsets "
        "(partition 0: 0, partition 1: 0)"
    )
    run.wait_until(lambda: caught_up in caplog.messages)
    run.finish()
    lines = [m for m in caplog.messages if m.startswith(f"kafka source 'src' lag on topic '{topic}'")]
    assert len(lines) >= 2


def test_a_source_s_batch_size_is_the_records_per_batch_its_reading_task_hands_on(make_settings, kafka) -> None:
    """The original's Kafka source `batch_size`: a reading task, called in this process, yields batches of exactly
    that many records (the range's last one fewer), with the consumer's poll wait from
    ``kafka_source.consumer_fetch_timeout_sec``; the epoch (the range) is the same whatever the batch size."""
    topic = kafka.topic("batched", partitions=1)
    kafka.produce_avro(topic, ITEM, [{"id": i, "label": f"item {i}"} for i in range(250)], partition_of=lambda i: 0)
    settings = make_settings(environ={**kafka.env, "STREAMLING__KAFKA_SOURCE__CONSUMER_FETCH_TIMEOUT_SEC": "200ms"})
    spec = KafkaSourceSpec.model_validate({"type": "kafka", "topic": topic, "batch_size": 100})
    source = KafkaSource("src", spec, settings)
    reader = KafkaStreamReader(source.reader_options({"0": 0}, None, parallelism=1), source.schema())
    assert reader.fetch_timeout_sec == 0.2
    batches = list(reader.read(Range(0, 0, 250)))
    assert [b.num_rows for b in batches] == [100, 100, 50]
    assert [i for b in batches for i in b.column("id").to_pylist()] == list(range(250))
