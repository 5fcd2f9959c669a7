"""Poison input against the real broker, schema registry and Postgres: a non-Avro payload, an unknown ``dbz.op``
and a string too long for an existing ``varchar(10)`` column. With ``on_error: fail`` the run stops naming the
record (or column and key) and its position stays before it; with ``on_error: dead_letter`` the bad records go
to a Postgres table or a Kafka topic and every good record lands."""

from __future__ import annotations

import io
import json
import time
import uuid
from collections.abc import Iterator

import fastavro
import pytest
from confluent_kafka import Consumer, TopicPartition

from streamling import run_pipeline
from streamling.errors import StreamlingError
from tests.integration.test_kafka import state_offsets

pytestmark = pytest.mark.integration

SCHEMA = {
    "type": "record",
    "name": "Event",
    "fields": [{"name": "id", "type": "long"}, {"name": "name", "type": "string"}],
}
RECORDS = 20
LONG_NAME = "n" * 42
UNKNOWN_SCHEMA_ID = 999_999


@pytest.fixture
def schema(pg_connect) -> Iterator[str]:
    name = f"p_{uuid.uuid4().hex[:10]}"
    with pg_connect() as conn:
        conn.execute(f'CREATE SCHEMA "{name}"')
        conn.execute(f'CREATE TABLE "{name}".events (id bigint PRIMARY KEY, name varchar(10))')
    yield name
    with pg_connect() as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


def produce(kafka, poison: dict[int, str]) -> tuple[str, list[bytes]]:
    """`RECORDS` events at offsets 0…19 of a one-partition topic, record i with id i, except where `poison`
    says: ``non_avro`` (the payload ``hello``), ``unknown_op`` (``dbz.op: z``), ``too_long`` (a 42-char name),
    ``unknown_schema`` (framed with a schema id the registry never issued).
    Returns the topic and the payloads sent."""
    topic = kafka.topic("poison", partitions=1)
    schema_id = kafka.register(topic, SCHEMA)
    parsed = fastavro.parse_schema(SCHEMA)
    values = []
    for i in range(RECORDS):
        kind = poison.get(i)
        out = io.BytesIO()
        fastavro.schemaless_writer(out, parsed, {"id": i, "name": LONG_NAME if kind == "too_long" else f"e{i}"})
        framed_as = UNKNOWN_SCHEMA_ID if kind == "unknown_schema" else schema_id
        value = b"hello" if kind == "non_avro" else b"\x00" + framed_as.to_bytes(4, "big") + out.getvalue()
        op = b"z" if kind == "unknown_op" else b"c"
        values.append(value)
        kafka.send(topic, value, key=str(i).encode(), headers=[("dbz.op", op)], partition=0)
    kafka.flush()
    return topic, values


def pipeline(write_pipeline, topic: str, schema: str, source_extra: str = "", sink_extra: str = ""):
    return write_pipeline(f"""
        sources:
          src: {{type: kafka, topic: {topic}, ending_offsets: latest, record_batch_size: 5{source_extra}}}
        sinks:
          out: {{type: postgres, from: src, primary_key: id, schema: {schema}, table: events{sink_extra}}}
        """)


def ids(pg_connect, schema: str) -> list[int]:
    with pg_connect() as conn:
        return [r[0] for r in conn.execute(f'SELECT id FROM "{schema}".events ORDER BY id').fetchall()]


@pytest.mark.parametrize(
    ("kind", "message"),
    [
        (
            "non_avro",
            "kafka source 'src': message at topic '{topic}' partition 0 offset 7: not Confluent-framed Avro "
            "(first byte 0x68, expected 0x00)",
        ),
        (
            "unknown_schema",
            "kafka source 'src': message at topic '{topic}' partition 0 offset 7: schema id 999999: not in the "
            "Schema Registry",
        ),
        (
            "unknown_op",
            "kafka source 'src': message at topic '{topic}' partition 0 offset 7 has an unknown dbz.op header 'z'; "
            "expected c, r, u or d",
        ),
        (
            "too_long",
            'postgres sink \'out\' (table "{schema}"."events"): column "name" (character varying(10)) cannot hold '
            "a 42-character value (row id=7): value too long for type character varying(10)",
        ),
    ],
)
def test_poison_record_stops_the_run_before_its_position(
    spark, make_settings, write_pipeline, kafka, postgres_env, pg_connect, schema, tmp_path, kind, message
) -> None:
    topic, _ = produce(kafka, {7: kind})
    path = pipeline(write_pipeline, topic, schema)
    with pytest.raises(StreamlingError) as caught:
        run_pipeline(path, make_settings(environ=kafka.env | postgres_env, job_mode=True), spark)
    assert str(caught.value) == message.format(topic=topic, schema=schema)
    committed = state_offsets(tmp_path, "src", topic)[0]
    assert committed == 5  # epochs of 5 records: [0, 5) committed, [5, 10) holds the bad record and failed
    assert ids(pg_connect, schema) == [0, 1, 2, 3, 4]  # the earlier epoch's good rows are there


POISON = {3: "non_avro", 8: "unknown_op", 12: "too_long"}
GOOD = [i for i in range(RECORDS) if i not in POISON]
ERRORS = {
    3: "message at topic '{topic}' partition 0 offset 3: not Confluent-framed Avro (first byte 0x68, expected 0x00)",
    8: "message at topic '{topic}' partition 0 offset 8 has an unknown dbz.op header 'z'; expected c, r, u or d",
    12: 'column "name" (character varying(10)) cannot hold a 42-character value (row id=12): value too long for '
    "type character varying(10)",
    16: "message at topic '{topic}' partition 0 offset 16: schema id 999999: not in the Schema Registry",
}


def test_dead_letter_table_takes_bad_records_and_a_rerun_adds_no_duplicates(
    spark, make_settings, write_pipeline, kafka, postgres_env, pg_connect, schema, tmp_path
) -> None:
    topic, values = produce(kafka, POISON | {16: "unknown_schema"})
    target = f", on_error: dead_letter, dead_letter: {{table: {schema}.dead}}"
    path = pipeline(write_pipeline, topic, schema, target, target)
    env = kafka.env | postgres_env
    run_pipeline(path, make_settings(environ=env, job_mode=True), spark)
    assert ids(pg_connect, schema) == [i for i in GOOD if i != 16]
    assert state_offsets(tmp_path, "src", topic) == {0: RECORDS}  # committed past the dead letters
    expected = [
        ("src", f"{topic}:0:3", ERRORS[3].format(topic=topic), topic, 0, 3, b"3", b"hello", [["dbz.op", "c"]], None),
        ("src", f"{topic}:0:8", ERRORS[8].format(topic=topic), topic, 0, 8, b"8", values[8], [["dbz.op", "z"]], None),
        (
            "src",
            f"{topic}:0:16",
            ERRORS[16].format(topic=topic),
            topic,
            0,
            16,
            b"16",
            values[16],
            [["dbz.op", "c"]],
            None,
        ),
        ("out", "row:", ERRORS[12], None, None, None, None, None, None, {"id": 12}),
    ]
    assert _dead(pg_connect, schema) == expected
    with pg_connect() as conn:
        (row,) = conn.execute(f'SELECT row_json, failed_at IS NOT NULL FROM "{schema}".dead WHERE node = %s', ("out",))
    assert row == ({"id": 12, "name": LONG_NAME, "_gs_op": "i"}, True)

    # The same records again (a fresh state backend replays the topic): no second copy of any dead letter.
    again = make_settings(environ=env, job_mode=True, **{"state_backend.sqlite.database_path": str(tmp_path / "2.db")})
    run_pipeline(path, again, spark)
    assert _dead(pg_connect, schema) == expected
    assert ids(pg_connect, schema) == [i for i in GOOD if i != 16]


def test_dead_letter_topic_takes_bad_records_with_their_error(
    spark, make_settings, write_pipeline, kafka, postgres_env, pg_connect, schema, tmp_path
) -> None:
    topic, values = produce(kafka, POISON)
    dlq = f"dlq_{uuid.uuid4().hex[:10]}"
    target = f", on_error: dead_letter, dead_letter: {{topic: {dlq}}}"
    path = pipeline(write_pipeline, topic, schema, target, target + ", parallelism: 2")  # the sink writes in tasks
    run_pipeline(path, make_settings(environ=kafka.env | postgres_env, job_mode=True), spark)
    assert ids(pg_connect, schema) == GOOD
    assert state_offsets(tmp_path, "src", topic) == {0: RECORDS}
    letters = _consume(kafka.brokers, dlq, 3)
    by_node = sorted(letters, key=lambda m: (m["headers"]["streamling.node"], m["headers"].get("streamling.offset")))
    assert [(m["key"], m["headers"]["streamling.error"]) for m in by_node] == [
        (b'{"id": 12}', ERRORS[12]),
        (b"3", ERRORS[3].format(topic=topic)),
        (b"8", ERRORS[8].format(topic=topic)),
    ]
    source_letter = by_node[1]
    assert source_letter["value"] == values[3] == b"hello"
    assert {k: v for k, v in source_letter["headers"].items() if k != "streamling.failed_at"} == {
        "dbz.op": "c",
        "streamling.application_id": "local_app_v1",
        "streamling.node": "src",
        "streamling.error": ERRORS[3].format(topic=topic),
        "streamling.topic": topic,
        "streamling.partition": "0",
        "streamling.offset": "3",
    }
    assert json.loads(by_node[0]["value"]) == {"id": 12, "name": LONG_NAME, "_gs_op": "i"}


def _dead(pg_connect, schema: str) -> list[tuple]:
    """The dead-letter table, bytes as bytes; a sink row's record id (a content hash) as just its prefix."""
    with pg_connect() as conn:
        rows = conn.execute(
            f'SELECT node, record_id, error, topic, "partition", "offset", key, value, headers, primary_key '
            f'FROM "{schema}".dead ORDER BY node DESC, "offset"'
        ).fetchall()
    out = []
    for node, record_id, error, topic, partition, offset, key, value, headers, primary_key in rows:
        record_id = record_id if node == "src" else record_id[:4]
        key, value = (None if v is None else bytes(v) for v in (key, value))
        out.append((node, record_id, error, topic, partition, offset, key, value, headers, primary_key))
    return out


def _consume(brokers: str, topic: str, expected: int, timeout: float = 60) -> list[dict]:
    consumer = Consumer({"bootstrap.servers": brokers, "group.id": uuid.uuid4().hex, "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    out: list[dict] = []
    deadline = time.time() + timeout
    while len(out) < expected and time.time() < deadline:
        for m in consumer.consume(100, timeout=1.0):
            if m.error() is None:
                headers = {k: v.decode() for k, v in m.headers() or []}
                out.append({"key": m.key(), "value": m.value(), "headers": headers})
    consumer.close()
    return out
