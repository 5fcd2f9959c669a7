"""The micro-batch executor in-process on the shared SparkSession: epochs, commits, resume, failure."""

from __future__ import annotations

import sqlite3
import uuid

import pytest

from streamling import run_pipeline
from streamling.errors import StreamlingError
from tests.integration.collect_sink import COLLECTED, FLUSHED


def committed(db, app: str = "local_app_v1") -> dict:
    import json

    conn = sqlite3.connect(db)
    return {k: json.loads(v) for k, v in conn.execute("SELECT key, data FROM state WHERE namespace = ?", (app,))}


def test_job_mode_bounded_run_commits_every_epoch(spark, make_settings, write_pipeline, tmp_path, capsys) -> None:
    path = write_pipeline("""
        sources:
          raw.transactions: {type: generator, rows: 20000, record_batch_size: 3000}
        transforms:
          evens:
            type: sql
            primary_key: id
            sql: SELECT id, amount FROM raw.transactions WHERE id % 2 = 0
        sinks:
          out: {type: print, from: evens, sample_every: 7}
        """)
    summary = run_pipeline(path, make_settings(job_mode=True), spark)
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1429  # 10000 even ids, every 7th printed: ceil(10000 / 7)
    assert lines[0] == '1 -> (sample_every=7) [Insert] {"id": 2, "amount": 1853.62, "_gs_op": "i"}'
    assert lines[-1].startswith('9997 -> (sample_every=7) [Insert] {"id": 19994, ')
    assert summary.sink_rows == {"out": 10000}
    progress = summary.sources["raw.transactions"]
    assert progress.epochs == 7  # ceil(20000 / 3000)
    state = committed(tmp_path / "state.db")
    assert state["raw.transactions:generator"]["offset"] == 20000
    assert state["raw.transactions:__epoch__"]["epoch"] == 7


def test_rerun_resumes_from_state_backend(spark, make_settings, write_pipeline, capsys) -> None:
    text = """
        sources:
          src: {type: generator, rows: ROWS}
        sinks:
          out: {type: print, from: src}
        """
    settings = make_settings(job_mode=True)
    run_pipeline(write_pipeline(text.replace("ROWS", "500")), settings, spark)
    assert len(capsys.readouterr().out.splitlines()) == 500
    summary = run_pipeline(write_pipeline(text.replace("ROWS", "500")), settings, spark)
    assert capsys.readouterr().out == ""  # exhausted: nothing replayed
    assert summary.sources["src"].epochs == 0
    run_pipeline(write_pipeline(text.replace("ROWS", "800")), settings, spark)
    ids = [int(line.split('"id": ')[1].split(",")[0]) for line in capsys.readouterr().out.splitlines()]
    assert ids == list(range(501, 801))


def test_multi_source_union_fans_out_and_pins_now_per_epoch(spark, make_settings, write_pipeline) -> None:
    key = uuid.uuid4().hex
    path = write_pipeline(f"""
        sources:
          left: {{type: generator, rows: 300, record_batch_size: 100}}
          right: {{type: generator, rows: 200, seed: 9, record_batch_size: 100}}
        transforms:
          both:
            type: sql
            primary_key: id
            sql: |
              SELECT id, 'L' AS side, now() AS seen FROM left
              UNION ALL
              SELECT id + 1000 AS id, 'R' AS side, now() AS seen FROM right
        sinks:
          a: {{type: test.collect, from: both, options: {{key: {key}_a}}}}
          b: {{type: test.collect, from: both, options: {{key: {key}_b}}}}
          raw: {{type: blackhole, from: left}}
        """)
    summary = run_pipeline(path, make_settings(job_mode=True), spark)
    a, b = COLLECTED[f"{key}_a"], COLLECTED[f"{key}_b"]
    ids = sorted(row["id"] for _, row in a)
    assert ids == list(range(1, 301)) + list(range(1001, 1201))
    assert {row["_gs_op"] for _, row in a} == {"i"}
    # Both sinks of an epoch see the identical now(); different epochs see their own.
    seen_a = {row["id"]: row["seen"] for _, row in a}
    assert all(seen_a[row["id"]] == row["seen"] for _, row in b)
    assert summary.sink_rows == {"a": 500, "b": 500, "raw": 300}
    assert len(set(seen_a.values())) > 1
    # Epochs are numbered per source: left closes 3, right 2, and the sink flushes once for each.
    assert sorted(FLUSHED[f"{key}_a"]) == [1, 1, 2, 2, 3]


def test_failing_epoch_fails_run_and_is_not_committed(spark, make_settings, write_pipeline, tmp_path) -> None:
    path = write_pipeline("""
        sources:
          src: {type: generator, rows: 1000, record_batch_size: 100}
        transforms:
          guarded:
            type: sql
            primary_key: id
            sql: SELECT id, IF(id = 550, raise_error('amount check failed for id 550'), amount) AS amount FROM src
        sinks:
          out: {type: blackhole, from: guarded}
        """)
    with pytest.raises(StreamlingError) as info:
        run_pipeline(path, make_settings(job_mode=True), spark)
    assert "blackhole sink 'out'" in str(info.value)
    assert "amount check failed for id 550" in str(info.value)
    state = committed(tmp_path / "state.db")
    assert state["src:generator"]["offset"] == 500  # epochs up to id 500 committed, the failing one not


@pytest.mark.integration
def test_postgres_state_backend_records_positions(
    spark, make_settings, write_pipeline, postgres_env, pg_connect
) -> None:
    app = f"pg_state_{uuid.uuid4().hex[:8]}"
    path = write_pipeline("""
        sources:
          src: {type: generator, rows: 1200, record_batch_size: 500}
        sinks:
          out: {type: blackhole, from: src}
        """)
    settings = make_settings(
        environ={**postgres_env, "STREAMLING__STATE_BACKEND__BACKEND_TYPE": "Postgres"},
        job_mode=True,
        application_id=app,
    )
    run_pipeline(path, settings, spark)
    with pg_connect() as conn:
        rows = dict(conn.execute("SELECT key, data FROM streamling.state WHERE namespace = %s", (app,)).fetchall())
    assert rows["src:generator"]["offset"] == 1200
    assert rows["src:__epoch__"]["epoch"] == 3
