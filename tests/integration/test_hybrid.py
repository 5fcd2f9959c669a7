"""The hybrid source on real services: ClickHouse (embedded engine) backfills, then Kafka, into Postgres."""

from __future__ import annotations

import uuid

import pyarrow as pa

from streamling import run_pipeline
from streamling.state.sqlite import SqliteStateBackend
from tests.integration.collect_sink import COLLECTED
from tests.integration.streaming import Background

SCHEMA = {
    "type": "record",
    "name": "Transfer",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "who", "type": "string"},
        {"name": "amount", "type": "double"},
    ],
}


def transfers(client, database: str, table: str, ids: range) -> None:
    client.command(
        f"CREATE TABLE {database}.{table} (id Int64, who String, amount Float64) ENGINE = MergeTree ORDER BY id"
    )
    client.insert_arrow(
        f"{database}.{table}",
        pa.table({"id": list(ids), "who": [f"ch{i % 7}" for i in ids], "amount": [float(i) for i in ids]}),
    )


def pipeline(database: str, topic: str, schema: str, name: str = "transfers") -> str:
    return f"""
        sources:
          {name}:
            type: hybrid
            primary_key: id
            telemetry: {{labels: {{team: payments}}}}
            bounded_sources:
              - {{source_type: clickhouse, table_name: {database}.recent, filter: "id % 2 = 0"}}
              - {{source_type: clickhouse, table_name: {database}.archive}}
            unbounded_source: {{source_type: kafka, topic: {topic}, start_at: earliest, filter: "id % 5 <> 0"}}
        sinks:
          out: {{type: postgres, from: {name}, schema: {schema}, table: transfers}}
        """


def settings_for(make_settings, env: dict[str, str], **extra):
    return make_settings(
        environ=env,
        **{"clickhouse_source.page_size": 40, "clickhouse_source.sort_key_range": 16, **extra},
    )


def rows(pg_connect, schema: str) -> list[tuple]:
    with pg_connect() as conn:
        try:
            return conn.execute(f'SELECT id, who, amount FROM "{schema}".transfers ORDER BY id').fetchall()
        except Exception:
            return []


def test_backfill_then_stream_every_row_arrives_with_per_phase_filters(
    spark, make_settings, write_pipeline, clickhouse, clickhouse_env, kafka, postgres_env, pg_connect, tmp_path
) -> None:
    client, database = clickhouse
    transfers(client, database, "recent", range(1, 201))
    transfers(client, database, "archive", range(1001, 1101))
    topic = kafka.topic("hybrid")
    kafka.produce_avro(topic, SCHEMA, [{"id": i, "who": f"k{i}", "amount": i / 2} for i in range(2001, 2101)])
    schema = f"h_{uuid.uuid4().hex[:8]}"
    env = {**clickhouse_env, **kafka.env, **postgres_env}
    run = Background(write_pipeline(pipeline(database, topic, schema)), settings_for(make_settings, env), spark)
    expected = (
        [(i, f"ch{i % 7}", float(i)) for i in range(2, 201, 2)]
        + [(i, f"ch{i % 7}", float(i)) for i in range(1001, 1101)]
        + [(i, f"k{i}", i / 2) for i in range(2001, 2101) if i % 5]
    )
    run.wait_until(lambda: len(rows(pg_connect, schema)) >= len(expected))
    # rows produced while streaming arrive too
    kafka.produce_avro(topic, SCHEMA, [{"id": i, "who": f"k{i}", "amount": 1.0} for i in range(3001, 3004)])
    expected += [(i, f"k{i}", 1.0) for i in range(3001, 3004)]
    run.wait_until(lambda: len(rows(pg_connect, schema)) >= len(expected))
    summary = run.finish()
    assert rows(pg_connect, schema) == expected
    with SqliteStateBackend("local_app_v1", str(tmp_path / "state.db")) as state:
        saved = state.items()
    assert saved["transfers:__phase__"]["phase"] == 2  # the Kafka phase
    assert saved["transfers:__epoch__"]["epoch"] == summary.sources["transfers"].epochs
    assert f"clickhouse_source:transfers#1:{database}.recent" in saved
    assert f"clickhouse_source:transfers#2:{database}.archive" in saved
    assert sum(1 for k in saved if k.startswith(f"transfers:{topic}:")) == 4


def test_job_mode_stops_after_the_bounded_phases_and_a_rerun_does_nothing(
    spark, make_settings, write_pipeline, clickhouse, clickhouse_env, kafka, postgres_env, pg_connect, tmp_path
) -> None:
    client, database = clickhouse
    transfers(client, database, "recent", range(1, 101))
    transfers(client, database, "archive", range(1001, 1051))
    topic = kafka.topic("hybrid_job")
    kafka.produce_avro(topic, SCHEMA, [{"id": i, "who": "k", "amount": 0.0} for i in range(2001, 2011)])
    schema = f"h_{uuid.uuid4().hex[:8]}"
    env = {**clickhouse_env, **kafka.env, **postgres_env}
    path = write_pipeline(pipeline(database, topic, schema))
    settings = settings_for(make_settings, env, job_mode=True)
    summary = run_pipeline(path, settings, spark)
    assert [r[0] for r in rows(pg_connect, schema)] == list(range(2, 101, 2)) + list(range(1001, 1051))
    with SqliteStateBackend("local_app_v1", str(tmp_path / "state.db")) as state:
        saved = state.items()
    assert saved["transfers:__phase__"]["phase"] == 2
    assert saved["transfers:__epoch__"]["epoch"] == summary.sources["transfers"].epochs > 0
    assert not any(k.startswith(f"transfers:{topic}:") for k in saved)
    again = run_pipeline(path, settings, spark)
    assert again.sources.get("transfers") is None or again.sources["transfers"].epochs == 0


def test_two_hybrid_sources_drain_independently(
    spark, make_settings, write_pipeline, clickhouse, clickhouse_env, kafka
) -> None:
    client, database = clickhouse
    transfers(client, database, "small", range(1, 3))
    transfers(client, database, "large", range(1, 901))
    key = uuid.uuid4().hex
    path = write_pipeline(f"""
        sources:
          quick:
            type: hybrid
            primary_key: id
            bounded_sources: [{{source_type: clickhouse, table_name: {database}.small}}]
          slow:
            type: hybrid
            primary_key: id
            bounded_sources: [{{source_type: clickhouse, table_name: {database}.large}}]
        sinks:
          quick_out: {{type: test.collect, from: quick, options: {{key: {key}-quick}}}}
          slow_out: {{type: test.collect, from: slow, options: {{key: {key}-slow}}}}
        """)
    summary = run_pipeline(path, settings_for(make_settings, clickhouse_env, job_mode=True), spark)
    assert sorted(r["id"] for _, r in COLLECTED[f"{key}-quick"]) == [1, 2]
    assert sorted(r["id"] for _, r in COLLECTED[f"{key}-slow"]) == list(range(1, 901))
    assert summary.sources["quick"].epochs == 1
    assert summary.sources["slow"].epochs > 10


def test_hybrid_validation_names_the_phase_field(spark, make_settings, write_pipeline) -> None:
    from streamling.api import validate_pipeline

    path = write_pipeline("""
        sources:
          h:
            type: hybrid
            bounded_sources: [{source_type: clickhouse}]
        sinks:
          out: {type: blackhole, from: h}
        """)
    assert validate_pipeline(path, make_settings(), spark).errors == [
        "source 'h' (type 'hybrid'): missing required field 'bounded_sources.0.table_name'"
    ]
    unbounded_only = write_pipeline("""
        sources:
          k: {type: kafka, topic: t}
        sinks:
          out: {type: blackhole, from: k}
        """)
    assert validate_pipeline(unbounded_only, make_settings(job_mode=True), spark).errors == [
        "job mode needs bounded sources, but these sources are unbounded: k"
    ]


def test_phases_inherit_key_and_telemetry_labels() -> None:
    from streamling.builtins.hybrid import HybridSourceSpec

    spec = HybridSourceSpec.model_validate(
        {
            "type": "hybrid",
            "primary_key": "id",
            "telemetry": {"labels": {"team": "payments"}},
            "bounded_sources": [{"source_type": "clickhouse", "table_name": "t", "start_at": 5}],
            "unbounded_source": {"source_type": "kafka", "topic": "x", "start_at": "latest", "data_format": "avro"},
        }
    )
    backfill, stream = spec.phase_specs()
    assert backfill.labels() == stream.labels() == {"team": "payments"}
    assert backfill.primary_key_columns() == stream.primary_key_columns() == ["id"]
    assert (backfill.start_at, stream.starting_offsets) == ("5", "latest")


def test_start_at_latest_is_pinned_when_the_backfill_begins_so_records_produced_after_it_stream(
    spark, make_settings, write_pipeline, clickhouse, clickhouse_env, kafka, postgres_env, pg_connect, tmp_path
) -> None:
    """A backfill run (job mode), records produced afterwards, then the stream: with `start_at: latest` the
    stream starts at the offsets of when the backfill began, so the records in between are not skipped."""
    client, database = clickhouse
    transfers(client, database, "recent", range(1, 11))
    transfers(client, database, "archive", range(1001, 1006))
    topic = kafka.topic("hybrid_latest")
    kafka.produce_avro(topic, SCHEMA, [{"id": i, "who": "old", "amount": 0.0} for i in range(2001, 2011)])
    schema = f"h_{uuid.uuid4().hex[:8]}"
    env = {**clickhouse_env, **kafka.env, **postgres_env}
    text = pipeline(database, topic, schema).replace("start_at: earliest", "start_at: latest")
    path = write_pipeline(text)
    run_pipeline(path, settings_for(make_settings, env, job_mode=True), spark)
    with SqliteStateBackend("local_app_v1", str(tmp_path / "state.db")) as state:
        pinned = {k: v["offset"] for k, v in state.items(f"transfers:{topic}:").items()}
    assert sum(pinned.values()) == 10  # the high watermarks when the backfill began
    kafka.produce_avro(topic, SCHEMA, [{"id": i, "who": "between", "amount": 1.0} for i in range(3001, 3011)])
    run = Background(path, settings_for(make_settings, env), spark)
    expected = [i for i in range(2, 11, 2)] + list(range(1001, 1006)) + [i for i in range(3001, 3011) if i % 5]
    run.wait_until(lambda: len(rows(pg_connect, schema)) >= len(expected))
    run.finish()
    assert [r[0] for r in rows(pg_connect, schema)] == expected


def test_offset_table_starts_the_stream_after_the_offsets_the_backfill_holds(
    spark, make_settings, write_pipeline, clickhouse, clickhouse_env, kafka, tmp_path
) -> None:
    """The backfilled table was filled from the same topic and records each row's ``_partition``/``_offset``: the
    stream continues after the largest offset per partition, so no record arrives twice and none is lost."""
    client, database = clickhouse
    topic = kafka.topic("hybrid_offsets", partitions=2)
    records = [{"id": i, "who": f"k{i}", "amount": float(i)} for i in range(1, 41)]
    kafka.produce_avro(topic, SCHEMA, records, partition_of=lambda i: i % 2)  # offsets 0..19 in each partition
    client.command(
        f"CREATE TABLE {database}.backfill (id Int64, who String, amount Float64, _partition Int32, _offset Int64) "
        "ENGINE = MergeTree ORDER BY id"
    )
    held = records[:30]  # offsets 0..14 of each partition
    client.insert_arrow(
        f"{database}.backfill",
        pa.table(
            {
                "id": [r["id"] for r in held],
                "who": [r["who"] for r in held],
                "amount": [r["amount"] for r in held],
                "_partition": pa.array([(r["id"] - 1) % 2 for r in held], pa.int32()),
                "_offset": [(r["id"] - 1) // 2 for r in held],
            }
        ),
    )
    path = write_pipeline(f"""
        sources:
          transfers:
            type: hybrid
            primary_key: id
            bounded_sources:
              - {{source_type: clickhouse, table_name: {database}.backfill}}
            unbounded_source: {{source_type: kafka, topic: {topic}, start_at: earliest}}
            offset_table: {{topic_name: {topic}}}
        sinks:
          out: {{type: test.collect, from: transfers, options: {{key: {topic}}}}}
        """)
    run = Background(path, settings_for(make_settings, {**clickhouse_env, **kafka.env}), spark)
    run.wait_until(lambda: len(COLLECTED.get(topic, [])) >= 40)
    run.finish()
    ids = sorted(row["id"] for _, row in COLLECTED[topic])
    assert ids == list(range(1, 41))
    with SqliteStateBackend("local_app_v1", str(tmp_path / "state.db")) as state:
        saved = state.items()
    assert {k: v["offset"] for k, v in saved.items() if k.startswith(f"transfers:{topic}:")} == {
        f"transfers:{topic}:0": 20,
        f"transfers:{topic}:1": 20,
    }
