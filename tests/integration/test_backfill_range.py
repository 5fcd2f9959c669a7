"""Backfills over a range, from scratch: `backfill_range` on the real ClickHouse engine (chdb) and the real
Kafka-protocol broker, and `reset_positions` making a rerun read everything again."""

from __future__ import annotations

import time
import uuid
from datetime import UTC, date, datetime, timedelta

import pyarrow as pa
import pytest

from streamling import reset_positions, run_pipeline
from streamling.api import validate_pipeline
from streamling.state.sqlite import SqliteStateBackend
from tests.integration.collect_sink import COLLECTED
from tests.integration.test_clickhouse_source import make_table
from tests.integration.test_kafka import TX_SCHEMA, tx

pytestmark = pytest.mark.integration


def rows_of(key: str) -> list[dict]:
    return [row for _, row in COLLECTED.pop(key, [])]


def state_items(tmp_path, app: str = "local_app_v1") -> dict[str, dict]:
    with SqliteStateBackend(app, str(tmp_path / "state.db")) as state:
        return {k: {f: v for f, v in doc.items() if f != "updated_at"} for k, doc in state.items().items()}


def ranged(make_settings, env, start, end, **extra):
    return make_settings(
        environ=env, job_mode=True, **{"backfill_range.start": start, "backfill_range.end": end}, **extra
    )


def test_an_integer_range_of_the_first_sort_key_is_read_alone_and_again_after_a_reset(
    spark, make_settings, write_pipeline, clickhouse, clickhouse_env, tmp_path
) -> None:
    client, database = clickhouse
    make_table(client, database, hot=50)
    key = uuid.uuid4().hex
    path = write_pipeline(f"""
        sources:
          ch: {{type: clickhouse, table_name: {database}.events, columns: "block, idx", primary_key: "block, idx"}}
        sinks:
          out: {{type: test.collect, from: ch, options: {{key: {key}}}}}
        """)
    settings = ranged(make_settings, clickhouse_env, 990, 1010, **{"clickhouse_source.page_size": 100})
    run_pipeline(path, settings, spark)
    expected = client.query(
        f"SELECT block, idx FROM {database}.events WHERE block >= 990 AND block < 1010 ORDER BY block, idx"
    ).result_rows
    assert len(expected) == 4 + 10 * 40  # 990, 993, 996, 999 and ten dense blocks
    assert [(r["block"], r["idx"]) for r in rows_of(key)] == [tuple(r) for r in expected]
    epochs = state_items(tmp_path)["ch:__epoch__"]["epoch"]
    run_pipeline(path, settings, spark)  # a plain rerun resumes after the range: nothing left
    assert rows_of(key) == []
    assert reset_positions(path, settings) == [f"clickhouse_source:ch:{database}.events"]
    assert f"clickhouse_source:ch:{database}.events" not in state_items(tmp_path)
    run_pipeline(path, settings, spark)
    assert len(rows_of(key)) == len(expected)
    assert state_items(tmp_path)["ch:__epoch__"]["epoch"] > epochs  # epochs number on: sinks' progress stays true


def test_time_windows_on_datetime_and_date_keys(
    spark, make_settings, write_pipeline, clickhouse, clickhouse_env, tmp_path
) -> None:
    client, database = clickhouse
    client.command(f"CREATE TABLE {database}.hourly (ts DateTime64(3, 'UTC'), n UInt32) ENGINE = MergeTree ORDER BY ts")
    client.command(f"CREATE TABLE {database}.daily (d Date, n UInt32) ENGINE = MergeTree ORDER BY d")
    first = datetime(2026, 1, 1, tzinfo=UTC)
    hours = [first + timedelta(hours=h, milliseconds=500) for h in range(72)]
    client.insert_arrow(f"{database}.hourly", pa.table({"ts": pa.array(hours, pa.timestamp("ms")), "n": range(72)}))
    days = [date(2026, 1, 1) + timedelta(days=d) for d in range(10)]
    client.insert_arrow(f"{database}.daily", pa.table({"d": pa.array(days, pa.date32()), "n": range(10)}))
    key = uuid.uuid4().hex
    path = write_pipeline(f"""
        sources:
          h: {{type: clickhouse, table_name: {database}.hourly, primary_key: ts}}
          d: {{type: clickhouse, table_name: {database}.daily, primary_key: d}}
        sinks:
          hs: {{type: test.collect, from: h, options: {{key: {key}h}}}}
          ds: {{type: test.collect, from: d, options: {{key: {key}d}}}}
        """)
    # one day in UTC+05:00: 2026-01-01T19:00Z .. 2026-01-02T19:00Z for date-times; the dates 2026-01-02 for dates
    run_pipeline(
        path, ranged(make_settings, clickhouse_env, "2026-01-02T00:00:00+05:00", "2026-01-03T00:00+05:00"), spark
    )
    assert sorted(r["n"] for r in rows_of(f"{key}h")) == list(range(19, 43))
    assert [r["d"] for r in rows_of(f"{key}d")] == [date(2026, 1, 2)]
    # another namespace, a whole UTC week given as dates
    week = ranged(make_settings, clickhouse_env, "2026-01-03", "2026-01-10", application_id="week")
    run_pipeline(path, week, spark)
    assert sorted(r["n"] for r in rows_of(f"{key}h")) == list(range(48, 72))
    assert [r["d"].day for r in rows_of(f"{key}d")] == [3, 4, 5, 6, 7, 8, 9]
    assert set(state_items(tmp_path, "week")) >= {f"clickhouse_source:h:{database}.hourly", "h:__epoch__"}


def test_ranges_that_do_not_fit_the_table_are_refused_by_name(
    spark, make_settings, write_pipeline, clickhouse, clickhouse_env
) -> None:
    client, database = clickhouse
    make_table(client, database)
    client.command(f"CREATE TABLE {database}.named (name String, n UInt32) ENGINE = MergeTree ORDER BY name")
    text = """
        sources:
          ch: {type: clickhouse, table_name: TABLE}
        sinks:
          out: {type: blackhole, from: ch}
        """
    events = write_pipeline(text.replace("TABLE", f"{database}.events"), "events.yaml")
    named = write_pipeline(text.replace("TABLE", f"{database}.named"), "named.yaml")
    by_day = ranged(make_settings, clickhouse_env, "2026-01-01", "2026-01-02")
    assert validate_pipeline(events, by_day, spark).errors == [
        "clickhouse source 'ch': backfill_range [2026-01-01T00:00:00+00:00, 2026-01-02T00:00:00+00:00) holds "
        f"date-times, but {database}.events is sorted by block (UInt64)"
    ]
    assert validate_pipeline(named, ranged(make_settings, clickhouse_env, 0, 10), spark).errors == [
        "clickhouse source 'ch': backfill_range needs a first sort key of integer, date or date-time type; "
        f"{database}.named is sorted by name (String)"
    ]
    wrong_column = ranged(make_settings, clickhouse_env, 0, 10, **{"backfill_range.column": "idx"})
    assert validate_pipeline(events, wrong_column, spark).errors == [
        f"clickhouse source 'ch': backfill_range column 'idx' is not the first sort key of {database}.events ('block')"
    ]
    from streamling.errors import StreamlingError

    with pytest.raises(StreamlingError, match=r"backfill_range \[0, 10\) applies to job mode only"):
        make_settings(**{"backfill_range.start": 0, "backfill_range.end": 10})
    with pytest.raises(StreamlingError, match="start 10 must be before end 5"):
        make_settings(job_mode=True, **{"backfill_range.start": 10, "backfill_range.end": 5})


def test_hybrid_range_and_reset_keep_the_stream_offsets(
    spark, make_settings, write_pipeline, clickhouse, clickhouse_env, kafka, tmp_path
) -> None:
    client, database = clickhouse
    make_table(client, database)
    topic = kafka.topic("hy", partitions=1)
    key = uuid.uuid4().hex
    path = write_pipeline(f"""
        sources:
          hy:
            type: hybrid
            primary_key: block, idx
            bounded_sources:
              - {{source_type: clickhouse, table_name: {database}.events}}
            unbounded_source:
              source_type: kafka
              topic: {topic}
              data_format: json
              schema: {{block: bigint, idx: bigint, who: string}}
        sinks:
          out: {{type: test.collect, from: hy, options: {{key: {key}}}}}
        """)
    env = {**clickhouse_env, **kafka.env}
    settings = ranged(make_settings, env, 1090, 2000)
    cursor = f"clickhouse_source:hy#1:{database}.events"
    # as if the hybrid had backfilled and streamed: its phase is the stream, with offsets of its own
    with SqliteStateBackend("local_app_v1", str(tmp_path / "state.db")) as state:
        state.put_many({"hy:__phase__": {"phase": 1}, f"hy:{topic}:0": {"offset": 7}, cursor: {"from": 99999}})
    assert reset_positions(path, settings) == [cursor, "hy:__phase__"]
    run_pipeline(path, settings, spark)
    rows = rows_of(key)
    assert sorted({r["block"] for r in rows}) == list(range(1090, 1100)) and len(rows) == 400
    assert set(rows[0]) == {"block", "idx", "who", "_gs_op"}  # conformed to the stream's schema
    after = state_items(tmp_path)
    assert after["hy:__phase__"] == {"phase": 1}  # back in the stream phase, which goes on where it was
    assert after[f"hy:{topic}:0"] == {"offset": 7}


def test_kafka_ranges_by_offset_and_by_message_time(spark, make_settings, write_pipeline, kafka, tmp_path) -> None:
    topic = kafka.topic("range", partitions=2)
    now_ms = int(time.time() * 1000)
    kafka.produce_avro(
        topic, TX_SCHEMA, [tx(i) for i in range(40)], timestamp_ms=now_ms - 60_000, partition_of=lambda i: i % 2
    )
    kafka.produce_avro(
        topic, TX_SCHEMA, [tx(i) for i in range(40, 60)], timestamp_ms=now_ms, partition_of=lambda i: i % 2
    )
    key = uuid.uuid4().hex
    path = write_pipeline(f"""
        sources:
          src: {{type: kafka, topic: {topic}, ending_offsets: latest, record_batch_size: 7}}
        sinks:
          out: {{type: test.collect, from: src, options: {{key: {key}}}}}
        """)
    by_offset = ranged(make_settings, kafka.env, 5, 12, application_id="offsets")
    run_pipeline(path, by_offset, spark)
    assert sorted(r["id"] for r in rows_of(key)) == sorted(i for i in range(60) if 5 <= i // 2 < 12)
    recent = datetime.fromtimestamp((now_ms - 30_000) / 1000, tz=UTC).isoformat()
    later = datetime.fromtimestamp((now_ms + 3_600_000) / 1000, tz=UTC).isoformat()
    by_time = ranged(make_settings, kafka.env, recent, later, application_id="times")
    run_pipeline(path, by_time, spark)
    assert sorted(r["id"] for r in rows_of(key)) == list(range(40, 60))
    assert state_items(tmp_path, "times")[f"src:{topic}:0"] == {"offset": 30}
    run_pipeline(path, by_time, spark)
    assert rows_of(key) == []
    reset_positions(path, by_time)
    run_pipeline(path, by_time, spark)
    assert sorted(r["id"] for r in rows_of(key)) == list(range(40, 60))
    early = datetime.fromtimestamp((now_ms - 120_000) / 1000, tz=UTC).isoformat()
    run_pipeline(path, ranged(make_settings, kafka.env, early, recent, application_id="early"), spark)
    assert sorted(r["id"] for r in rows_of(key)) == list(range(40))


def test_a_stream_keeps_its_offsets_whatever_starting_offsets_says_until_its_positions_are_reset(
    spark, make_settings, write_pipeline, kafka, tmp_path
) -> None:
    """`starting_offsets` is where a source with no committed offsets starts, as `auto.offset.reset` is for a
    consumer group; `streamling PIPELINE --reset-positions` (`reset_positions(streams=True)`) starts it over."""
    topic = kafka.topic("restart")
    kafka.produce_avro(topic, TX_SCHEMA, [tx(i) for i in range(10)])
    key = uuid.uuid4().hex
    text = f"""
        sources:
          src: {{type: kafka, topic: {topic}, starting_offsets: STARTING, ending_offsets: latest}}
        sinks:
          out: {{type: test.collect, from: src, options: {{key: {key}}}}}
        """
    settings = make_settings(environ=kafka.env, job_mode=True)
    run_pipeline(write_pipeline(text.replace("STARTING", "earliest")), settings, spark)
    assert sorted(r["id"] for r in rows_of(key)) == list(range(10))
    kafka.produce_avro(topic, TX_SCHEMA, [tx(i) for i in range(10, 13)])
    run_pipeline(write_pipeline(text.replace("STARTING", "latest")), settings, spark)
    assert sorted(r["id"] for r in rows_of(key)) == [10, 11, 12]  # resumed: `latest` would have read nothing
    path = write_pipeline(text.replace("STARTING", "earliest").replace(", ending_offsets: latest", ""))
    assert reset_positions(path, settings) == []  # a stream is kept unless asked
    offsets = sorted(k for k in state_items(tmp_path) if k.startswith(f"src:{topic}:"))
    assert offsets and sorted(reset_positions(path, settings, streams=True)) == offsets
    assert not set(offsets) & set(state_items(tmp_path))
    run_pipeline(write_pipeline(text.replace("STARTING", "earliest")), settings, spark)
    assert sorted(r["id"] for r in rows_of(key)) == list(range(13))
