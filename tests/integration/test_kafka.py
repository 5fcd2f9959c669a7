"""Kafka source and sink against a real Kafka-protocol broker and a real schema registry (no mocks)."""

from __future__ import annotations

import json
import threading
import time
import uuid
from concurrent.futures import Future
from datetime import UTC, datetime
from decimal import Decimal

import pytest

from streamling.errors import StreamlingError
from streamling.state.sqlite import SqliteStateBackend
from tests.integration.collect_sink import COLLECTED
from tests.integration.streaming import Background

pytestmark = pytest.mark.integration

TX_SCHEMA = {
    "type": "record",
    "name": "Tx",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "user_id", "type": "string"},
        {"name": "amount", "type": "double"},
        {"name": "price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 20, "scale": 4}},
        {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "note", "type": ["null", "string"], "default": None},
        {"name": "tags", "type": {"type": "array", "items": "string"}, "default": []},
    ],
}

TX_SCHEMA_V2 = {**TX_SCHEMA, "fields": [*TX_SCHEMA["fields"], {"name": "channel", "type": "string", "default": "web"}]}
"""Version 2: one field added, with a default."""


def tx(i: int) -> dict:
    return {
        "id": i,
        "user_id": f"u{i % 7}",
        "amount": i * 1.5,
        "price": Decimal(f"{i}.{i % 10000:04d}"),
        "ts": datetime.fromtimestamp(1_700_000_000 + i, tz=UTC),
        "note": None if i % 2 else f"n{i}",
        "tags": [f"t{i % 3}"],
    }


def settings_for(make_settings, kafka, **extra):
    return make_settings(environ=kafka.env, **extra)


def bounded_collect(write_pipeline, topic: str, key: str):
    """A job reading the topic up to its end now into the collect sink under `key`."""
    return write_pipeline(f"""
        sources:
          src: {{type: kafka, topic: {topic}, ending_offsets: latest}}
        sinks:
          out: {{type: test.collect, from: src, options: {{key: {key}}}}}
        """)


def rows_of(key: str) -> list[dict]:
    return [row for _, row in COLLECTED.get(key, [])]


def state_offsets(tmp_path, source: str, topic: str, app: str = "local_app_v1") -> dict[int, int]:
    with SqliteStateBackend(app, str(tmp_path / "state.db")) as state:
        prefix = f"{source}:{topic}:"
        return {int(k.removeprefix(prefix)): v["offset"] for k, v in state.items(prefix).items()}


def test_avro_records_arrive_typed_with_positions_committed(spark, make_settings, write_pipeline, kafka, tmp_path):
    topic = kafka.topic("avro")
    kafka.produce_avro(topic, TX_SCHEMA, [tx(i) for i in range(100)])
    key = uuid.uuid4().hex
    path = write_pipeline(f"""
        sources:
          src: {{type: kafka, topic: {topic}, primary_key: id}}
        sinks:
          out: {{type: test.collect, from: src, options: {{key: {key}}}}}
        """)
    run = Background(path, settings_for(make_settings, kafka), spark)
    run.wait_until(lambda: len(rows_of(key)) >= 100)
    summary = run.finish()
    rows = sorted(rows_of(key), key=lambda r: r["id"])
    assert [r["id"] for r in rows] == list(range(100))
    assert rows[7] == {**tx(7), "_gs_op": "i"}
    assert rows[8]["price"] == Decimal("8.0008") and rows[8]["note"] == "n8" and rows[8]["tags"] == ["t2"]
    assert state_offsets(tmp_path, "src", topic) == {0: 25, 1: 25, 2: 25, 3: 25}
    assert summary.sources["src"].rows_in == 100


def test_json_with_declared_schema_projects_columns(spark, make_settings, write_pipeline, kafka):
    topic = kafka.topic("json")
    kafka.produce_json(
        topic,
        [
            {"id": i, "name": f"n{i}", "at": "2025-03-01T10:00:00Z", "ignored": {"x": i}, "amount": i / 4}
            for i in range(40)
        ],
    )
    key = uuid.uuid4().hex
    path = write_pipeline(f"""
        sources:
          src:
            type: kafka
            topic: {topic}
            data_format: json
            schema: {{id: bigint, amount: double, at: timestamp}}
        sinks:
          out: {{type: test.collect, from: src, options: {{key: {key}}}}}
        """)
    run = Background(path, settings_for(make_settings, kafka), spark)
    run.wait_until(lambda: len(rows_of(key)) >= 40)
    run.finish()
    rows = sorted(rows_of(key), key=lambda r: r["id"])
    assert rows[5] == {"id": 5, "amount": 1.25, "at": datetime(2025, 3, 1, 10, tzinfo=UTC), "_gs_op": "i"}


def test_starting_offsets_by_timestamp_and_source_filter(spark, make_settings, write_pipeline, kafka):
    topic = kafka.topic("ts")
    now_ms = int(time.time() * 1000)
    kafka.produce_avro(topic, TX_SCHEMA, [tx(i) for i in range(40)], timestamp_ms=now_ms - 60_000)
    kafka.produce_avro(topic, TX_SCHEMA, [tx(i) for i in range(40, 80)], timestamp_ms=now_ms)
    key = uuid.uuid4().hex
    path = write_pipeline(f"""
        sources:
          src:
            type: kafka
            topic: {topic}
            starting_offsets: {now_ms - 30_000}
            filter: amount >= 90 AND user_id <> 'u0'
            include_metadata: true
        sinks:
          out: {{type: test.collect, from: src, options: {{key: {key}}}}}
        """)
    expected = [i for i in range(40, 80) if i * 1.5 >= 90 and i % 7 != 0]
    run = Background(path, settings_for(make_settings, kafka), spark)
    run.wait_until(lambda: len(rows_of(key)) >= len(expected))
    time.sleep(1)  # nothing else may arrive
    run.finish()
    rows = rows_of(key)
    assert sorted(r["id"] for r in rows) == expected
    assert all(r["_timestamp"] == datetime.fromtimestamp(now_ms / 1000, tz=UTC) for r in rows)
    assert {r["_partition"] for r in rows} == {0, 1, 2, 3}
    assert all(r["_offset"] >= 10 for r in rows)  # the first 10 per partition were older


def test_dbz_op_header_mapping(spark, make_settings, write_pipeline, kafka):
    topic = kafka.topic("ops")
    ops = [b"c", b"r", b"u", b"d", None]
    kafka.produce_avro(topic, TX_SCHEMA, [tx(i) for i in range(5)], ops=ops, partition_of=lambda i: 0)
    key = uuid.uuid4().hex
    path = write_pipeline(f"""
        sources:
          src: {{type: kafka, topic: {topic}}}
        sinks:
          out: {{type: test.collect, from: src, options: {{key: {key}}}}}
        """)
    run = Background(path, settings_for(make_settings, kafka), spark)
    run.wait_until(lambda: len(rows_of(key)) >= 5)
    run.finish()
    assert [(r["id"], r["_gs_op"]) for r in sorted(rows_of(key), key=lambda r: r["id"])] == [
        (0, "i"), (1, "i"), (2, "u"), (3, "d"), (4, "i"),
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (
            {"value": b"not avro at all", "headers": [("dbz.op", b"c")]},
            "kafka source 'src': message at topic '{topic}' partition 2 offset 3: not Confluent-framed Avro "
            "(first byte 0x6e, expected 0x00)",
        ),
        (
            {"value": "VALID", "headers": [("dbz.op", b"x")]},
            "kafka source 'src': message at topic '{topic}' partition 2 offset 3 has an unknown dbz.op header 'x'; "
            "expected c, r, u or d",
        ),
        (
            {"value": None, "headers": None},
            "kafka source 'src': message at topic '{topic}' partition 2 offset 3 has an empty payload (tombstone); "
            "Avro records are required",
        ),
    ],
)
def test_bad_input_stops_pipeline_without_committing_it(
    spark, make_settings, write_pipeline, kafka, tmp_path, bad, message
):
    topic = kafka.topic("bad", partitions=3)
    schema_id = kafka.register(topic, TX_SCHEMA)
    kafka.produce_avro(topic, TX_SCHEMA, [tx(i) for i in range(9)], schema_id=schema_id, partition_of=lambda i: i % 3)
    value = bad["value"]
    if value == "VALID":
        import io

        import fastavro

        out = io.BytesIO()
        fastavro.schemaless_writer(out, fastavro.parse_schema(TX_SCHEMA), tx(99))
        value = b"\x00" + schema_id.to_bytes(4, "big") + out.getvalue()
    kafka.send(topic, value, headers=bad["headers"], partition=2)
    kafka.produce_avro(
        topic, TX_SCHEMA, [tx(i) for i in range(100, 103)], schema_id=schema_id, partition_of=lambda i: 2
    )
    path = write_pipeline(f"""
        sources:
          src: {{type: kafka, topic: {topic}}}
        sinks:
          out: {{type: blackhole, from: src}}
        """)
    with pytest.raises(StreamlingError) as info:
        from streamling import run_pipeline

        run_pipeline(path, settings_for(make_settings, kafka), spark)
    assert str(info.value) == message.format(topic=topic)
    assert state_offsets(tmp_path, "src", topic).get(2, 0) <= 3  # never committed past the bad record


def test_schema_evolution_added_field_reads_all_rows(spark, make_settings, write_pipeline, kafka):
    topic = kafka.topic("evo")
    kafka.produce_avro(topic, TX_SCHEMA, [tx(i) for i in range(10)])
    kafka.produce_avro(topic, TX_SCHEMA_V2, [{**tx(i), "channel": "app"} for i in range(10, 20)])
    key = uuid.uuid4().hex
    path = write_pipeline(f"""
        sources:
          src: {{type: kafka, topic: {topic}}}
        sinks:
          out: {{type: test.collect, from: src, options: {{key: {key}}}}}
        """)
    run = Background(path, settings_for(make_settings, kafka), spark)
    run.wait_until(lambda: len(rows_of(key)) >= 20)
    run.finish()
    channels = {r["id"]: r["channel"] for r in rows_of(key)}
    assert channels == {**{i: "web" for i in range(10)}, **{i: "app" for i in range(10, 20)}}


@pytest.mark.parametrize("validate", [True, False])
def test_writer_schema_newer_than_reader(spark, make_settings, write_pipeline, kafka, validate):
    topic = kafka.topic("ahead", partitions=1)
    kafka.produce_avro(topic, TX_SCHEMA, [tx(i) for i in range(5)], partition_of=lambda i: 0)
    key = uuid.uuid4().hex
    path = write_pipeline(f"""
        sources:
          src: {{type: kafka, topic: {topic}, validate_writer_schema_ordering: {str(validate).lower()}}}
        sinks:
          out: {{type: test.collect, from: src, options: {{key: {key}}}}}
        """)
    run = Background(path, settings_for(make_settings, kafka), spark)
    run.wait_until(lambda: len(rows_of(key)) >= 5)
    v2_id = kafka.register(topic, TX_SCHEMA_V2)
    kafka.produce_avro(
        topic,
        TX_SCHEMA_V2,
        [{**tx(i), "channel": "app"} for i in range(5, 8)],
        schema_id=v2_id,
        partition_of=lambda i: 0,
    )
    if validate:
        error = run.failure()
        assert str(error) == (
            f"kafka source 'src': message at topic '{topic}' partition 0 offset 5 was written with schema id {v2_id} "
            f"(version 2 of subject '{topic}-value'), newer than the reader schema (version 1) captured at start; "
            "restart the pipeline to read with the new schema, or set validate_writer_schema_ordering: false"
        )
    else:
        run.wait_until(lambda: len(rows_of(key)) >= 8)
        run.finish()
        assert "channel" not in rows_of(key)[-1]  # read with the reader schema captured at start


def test_a_restart_in_the_same_process_reads_with_the_newer_reader_schema(spark, make_settings, write_pipeline, kafka):
    """The writer-schema error says to restart; on a warm engine (`streamling serve`, one process and one Schema
    Registry client for every run) the restarted run must still capture the subject's latest version, not the
    one an earlier run fetched."""
    from streamling import run_pipeline

    topic = kafka.topic("relatest", partitions=1)
    kafka.produce_avro(topic, TX_SCHEMA, [tx(i) for i in range(5)], partition_of=lambda i: 0)
    key = uuid.uuid4().hex
    path = bounded_collect(write_pipeline, topic, key)
    settings = settings_for(make_settings, kafka, job_mode=True)
    run_pipeline(path, settings, spark)
    assert [r["id"] for r in rows_of(key)] == list(range(5)) and "channel" not in rows_of(key)[0]

    kafka.produce_avro(
        topic, TX_SCHEMA_V2, [{**tx(i), "channel": "app"} for i in range(5, 8)], partition_of=lambda i: 0
    )
    run_pipeline(path, settings, spark)  # resumes at offset 5, from the state backend

    assert [(r["id"], r["channel"]) for r in rows_of(key)[5:]] == [(5, "app"), (6, "app"), (7, "app")]


def test_restart_resumes_from_state_and_state_beats_group(spark, make_settings, write_pipeline, kafka, tmp_path):
    from confluent_kafka import Consumer, TopicPartition

    topic = kafka.topic("resume", partitions=2)
    group = f"g{uuid.uuid4().hex[:6]}"
    kafka.produce_avro(topic, TX_SCHEMA, [tx(i) for i in range(20)], partition_of=lambda i: i % 2)
    key1, key2, key3 = (uuid.uuid4().hex for _ in range(3))
    text = """
        sources:
          src: {{type: kafka, topic: {topic}}}
        sinks:
          out: {{type: test.collect, from: src, options: {{key: {key}}}}}
        """
    settings = make_settings(environ={**kafka.env, "STREAMLING__KAFKA_SOURCE__CONSUMER_GROUP_ID": group})
    run = Background(write_pipeline(text.format(topic=topic, key=key1)), settings, spark)
    run.wait_until(lambda: len(rows_of(key1)) >= 20)
    run.finish()
    assert state_offsets(tmp_path, "src", topic) == {0: 10, 1: 10}
    committed = Consumer({"bootstrap.servers": kafka.brokers, "group.id": f"{group}-src"}).committed(
        [TopicPartition(topic, 0), TopicPartition(topic, 1)], timeout=10
    )
    assert [tp.offset for tp in committed] == [10, 10]  # the group follows the state backend

    # Rewind the group: the state backend still wins.
    rewind = Consumer({"bootstrap.servers": kafka.brokers, "group.id": f"{group}-src"})
    rewind.commit(offsets=[TopicPartition(topic, 0, 0), TopicPartition(topic, 1, 0)], asynchronous=False)
    rewind.close()
    kafka.produce_avro(topic, TX_SCHEMA, [tx(i) for i in range(20, 30)], partition_of=lambda i: i % 2)
    run = Background(write_pipeline(text.format(topic=topic, key=key2)), settings, spark)
    run.wait_until(lambda: len(rows_of(key2)) >= 10)
    time.sleep(1)
    run.finish()
    assert sorted(r["id"] for r in rows_of(key2)) == list(range(20, 30))  # no gap, no replay

    # Without state, the group's offsets are used.
    fresh = make_settings(
        environ={**kafka.env, "STREAMLING__KAFKA_SOURCE__CONSUMER_GROUP_ID": group}, application_id="other_app"
    )
    rewind = Consumer({"bootstrap.servers": kafka.brokers, "group.id": f"{group}-src"})
    rewind.commit(offsets=[TopicPartition(topic, 0, 12), TopicPartition(topic, 1, 12)], asynchronous=False)
    rewind.close()
    run = Background(write_pipeline(text.format(topic=topic, key=key3)), fresh, spark)
    run.wait_until(lambda: len(rows_of(key3)) >= 6)
    time.sleep(1)
    run.finish()
    assert sorted(r["id"] for r in rows_of(key3)) == [24, 25, 26, 27, 28, 29]


def test_kafka_sql_kafka_round_trip_with_headers(spark, make_settings, write_pipeline, kafka, caplog):
    source_topic = kafka.topic("in")
    sink_topic = f"out_{uuid.uuid4().hex[:10]}"
    ops = [b"c", b"u", b"d", b"r"] * 10
    kafka.produce_avro(source_topic, TX_SCHEMA, [tx(i) for i in range(40)], ops=ops)
    path = write_pipeline(f"""
        sources:
          src: {{type: kafka, topic: {source_topic}}}
        transforms:
          big:
            type: sql
            primary_key: id
            sql: SELECT id, upper(user_id) AS user_id, price, amount * 2 AS doubled FROM src WHERE id >= 8
        sinks:
          out: {{type: kafka, from: big, topic: {sink_topic}, topic_partitions: 3, compression: gzip}}
        """)
    run = Background(path, settings_for(make_settings, kafka), spark)
    messages: list[dict] = []

    def all_arrived() -> bool:  # read_all reads the topic from the start: replace, never accumulate
        messages[:] = kafka.read_all(sink_topic, 32, timeout=2)
        return len(messages) >= 32

    run.wait_until(all_arrived)
    run.finish()
    by_id = {int(m["key"]): m for m in messages}
    assert sorted(by_id) == list(range(8, 40))
    assert {m["partition"] for m in messages} <= {0, 1, 2}
    m = by_id[10]
    assert m["headers"] == {"dbz.op": b"d"}
    assert by_id[9]["headers"] == {"dbz.op": b"u"} and by_id[11]["headers"] == {"dbz.op": b"c"}
    assert m["value"] == {"id": 10, "user_id": "U3", "price": Decimal("10.0010"), "doubled": 30.0}
    latest = kafka.registry.get_latest_version(f"{sink_topic}-value")
    assert latest.schema_id == m["schema_id"]
    assert "_gs_op" not in latest.schema.schema_str
    # The key goes into the record's doc, where a Kafka source reading this topic finds it.
    assert json.loads(json.loads(latest.schema.schema_str)["doc"]) == {"primaryKeys": ["id"]}

    # A second run reuses the topic.
    caplog.set_level("INFO", logger="streamling.kafka")
    run = Background(path, make_settings(environ=kafka.env, application_id="second"), spark)
    time.sleep(3)
    run.finish()
    assert f"kafka sink 'out': topic '{sink_topic}' already exists, skipping creation" in caplog.text


def test_kafka_sink_requires_a_primary_key(spark, make_settings, write_pipeline, kafka):
    from streamling.api import plan_pipeline

    path = write_pipeline("""
        sources:
          src: {type: generator, rows: 10}
        sinks:
          out: {type: kafka, from: src, topic: never_created}
          keyed: {type: kafka, from: src, topic: never_created2, primary_key: id}
        """)
    _, report = plan_pipeline(path, settings_for(make_settings, kafka), spark)
    assert report.errors == ["kafka sink 'out' requires a primary key"]


class _SessionStarting(Future):
    """The CLI's session future (`start_session`), which also tells when planning first waits for it."""

    def __init__(self) -> None:
        super().__init__()
        self.waited_for = threading.Event()

    def result(self, timeout: float | None = None):
        self.waited_for.set()
        return super().result(timeout)


def test_planning_looks_a_sources_schema_up_before_it_waits_for_the_session(
    spark, make_settings, write_pipeline, kafka
):
    """While the CLI's JVM starts, the registry is asked for the reader schema (`Operator.prefetch`): a version
    registered after planning began to wait for the session is not the one the run reads with."""
    from streamling.api import plan_pipeline

    topic = kafka.topic("prefetch", partitions=1)
    kafka.register(topic, TX_SCHEMA)
    path = write_pipeline(f"""
        sources:
          src: {{type: kafka, topic: {topic}}}
        sinks:
          out: {{type: print, from: src}}
        """)
    starting = _SessionStarting()
    planned: dict[str, object] = {}
    thread = threading.Thread(
        target=lambda: planned.update(result=plan_pipeline(path, settings_for(make_settings, kafka), starting))
    )
    thread.start()
    try:
        assert starting.waited_for.wait(60)
        kafka.register(topic, TX_SCHEMA_V2)
    finally:
        starting.set_result(spark)
        thread.join(60)
    plan, report = planned["result"]
    assert report.errors == []
    assert plan.schemas["src"].fieldNames() == [*(f["name"] for f in TX_SCHEMA["fields"]), "_gs_op"]
    assert plan.source("src").reader_schema()[1] == 1


def test_ending_offsets_latest_makes_a_bounded_job(spark, make_settings, write_pipeline, kafka, tmp_path):
    from streamling import run_pipeline

    topic = kafka.topic("bounded", partitions=2)
    kafka.produce_avro(topic, TX_SCHEMA, [tx(i) for i in range(50)], partition_of=lambda i: i % 2)
    key = uuid.uuid4().hex
    path = write_pipeline(f"""
        sources:
          src: {{type: kafka, topic: {topic}, ending_offsets: latest, record_batch_size: 20}}
        sinks:
          out: {{type: test.collect, from: src, options: {{key: {key}}}}}
        """)
    summary = run_pipeline(path, settings_for(make_settings, kafka, job_mode=True), spark)  # returns on its own
    assert sorted(r["id"] for r in rows_of(key)) == list(range(50))
    assert summary.sources["src"].epochs == 3  # 20 + 20 + 10
    assert state_offsets(tmp_path, "src", topic) == {0: 25, 1: 25}


def test_a_runs_small_first_epoch_is_taken_from_one_partition_and_later_epochs_from_one_per_task(
    spark, make_settings, write_pipeline, kafka, tmp_path
):
    """The first epoch (at most 10,000 rows, here `record_batch_size`) is read by one task, not one per partition."""
    from streamling import run_pipeline

    topic = kafka.topic("packed", partitions=4)
    kafka.produce_avro(topic, TX_SCHEMA, [tx(i) for i in range(1200)], partition_of=lambda i: i % 4)
    key = uuid.uuid4().hex
    path = write_pipeline(f"""
        sources:
          src: {{type: kafka, topic: {topic}, ending_offsets: latest, include_metadata: true, record_batch_size: 200}}
        sinks:
          out: {{type: test.collect, from: src, options: {{key: {key}}}}}
        """)
    run_pipeline(path, settings_for(make_settings, kafka, job_mode=True), spark)
    by_epoch: dict[int, list[tuple[int, int]]] = {}
    for epoch, row in COLLECTED[key]:
        by_epoch.setdefault(epoch, []).append((row["_partition"], row["_offset"]))
    assert sorted(by_epoch[1]) == [(0, offset) for offset in range(200)]
    # Then from as many partitions as an epoch has read tasks (the session's 2 cores), most pending first: 100 are
    # left in partition 0 and 300 in each other one, so partitions 1 and 2 each give 100, from where they start.
    assert sorted(by_epoch[2]) == [(p, offset) for p in (1, 2) for offset in range(100)]
    # Next most pending: partition 3 (300), then 1 and 2 (200 each; the lower number first), shared 300:200.
    assert sorted(by_epoch[3]) == [(1, o) for o in range(100, 180)] + [(3, o) for o in range(120)]
    assert sorted(r["id"] for _, r in COLLECTED[key]) == list(range(1200))
    assert state_offsets(tmp_path, "src", topic) == {0: 300, 1: 300, 2: 300, 3: 300}


def test_partitions_added_while_running_are_read_from_starting_offsets(
    spark, make_settings, write_pipeline, kafka, tmp_path
):
    from confluent_kafka.admin import NewPartitions

    topic = kafka.topic("grow", partitions=1)
    kafka.produce_avro(topic, TX_SCHEMA, [tx(i) for i in range(5)], partition_of=lambda i: 0)
    key = uuid.uuid4().hex
    path = write_pipeline(f"""
        sources:
          src: {{type: kafka, topic: {topic}}}
        sinks:
          out: {{type: test.collect, from: src, options: {{key: {key}}}}}
        """)
    run = Background(path, settings_for(make_settings, kafka), spark)
    run.wait_until(lambda: len(rows_of(key)) >= 5)
    kafka.admin.create_partitions([NewPartitions(topic, 3)])[topic].result(timeout=30)
    deadline = time.time() + 30
    while len(kafka.producer.list_topics(topic, timeout=10).topics[topic].partitions) < 3 and time.time() < deadline:
        time.sleep(0.2)  # the test's producer learns about the new partitions
    kafka.produce_avro(topic, TX_SCHEMA, [tx(i) for i in range(5, 15)], partition_of=lambda i: 1 + i % 2)
    run.wait_until(lambda: len(rows_of(key)) >= 15, timeout=60)  # partitions are re-listed every 10 s
    run.finish()
    assert sorted(r["id"] for r in rows_of(key)) == list(range(15))
    assert state_offsets(tmp_path, "src", topic) == {0: 5, 1: 5, 2: 5}


# How the original Streamling's Kafka sink registers a value schema: a union of null and the record, every field
# nullable, the primary key in the record's doc.
ORIGINAL_SINK_SCHEMA = [
    "null",
    {
        "type": "record",
        "name": "orders_out",
        "doc": '{"primaryKeys": ["id"]}',
        "fields": [
            {"name": "id", "type": ["null", "long"], "default": None},
            {"name": "name", "type": ["null", "string"], "default": None},
            {
                "name": "price",
                "type": ["null", {"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 2}],
                "default": None,
            },
        ],
    },
]


def test_a_topic_written_by_the_original_sink_reads_unchanged(spark, make_settings, write_pipeline, kafka, tmp_path):
    """A value schema whose root is ``["null", {record}]`` reads as that record's columns, keyed by the doc's
    primary key. A value holding the union's null branch then stops the pipeline naming it, as a tombstone does."""
    from streamling import run_pipeline
    from streamling.api import validate_pipeline

    topic = kafka.topic("original", partitions=2)
    records = [{"id": i, "name": f"n{i}" if i % 3 else None, "price": Decimal(f"{i}.25")} for i in range(6)]
    kafka.produce_avro(topic, ORIGINAL_SINK_SCHEMA, records, partition_of=lambda i: i % 2)
    key = uuid.uuid4().hex
    path = bounded_collect(write_pipeline, topic, key)
    settings = settings_for(make_settings, kafka, job_mode=True)
    report = validate_pipeline(path, settings, spark)
    assert report.errors == []
    assert report.warnings == [
        f"kafka source 'src': no primary_key given; using [\"id\"] declared in the doc of the Avro schema of subject "
        f"'{topic}-value'"
    ]
    run_pipeline(path, settings, spark)
    assert sorted(rows_of(key), key=lambda r: r["id"]) == [{**r, "_gs_op": "i"} for r in records]
    assert state_offsets(tmp_path, "src", topic) == {0: 3, 1: 3}

    kafka.produce_avro(topic, ORIGINAL_SINK_SCHEMA, [None], partition_of=lambda i: 1)
    with pytest.raises(StreamlingError) as info:
        run_pipeline(path, settings, spark)
    assert str(info.value) == (
        f"kafka source 'src': message at topic '{topic}' partition 1 offset 3 holds an Avro null (the null branch "
        "of the root union), like a tombstone; Avro records are required"
    )
    assert state_offsets(tmp_path, "src", topic) == {0: 3, 1: 3}
