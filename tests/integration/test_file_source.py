"""The file source end to end: each format into Postgres, Hive folders, `_gs_op`, continuous mode (new, rewritten
and deleted files), resuming from the state backend, and the errors a user sees. Local paths only: the object-store
schemes go through the same pyarrow filesystem calls but have no service here."""

from __future__ import annotations

import json
import os
import signal
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from streamling import run_pipeline
from streamling.api import validate_pipeline
from streamling.errors import StreamlingError
from streamling.state.sqlite import SqliteStateBackend
from tests.e2e.cli import sqlite_state, start_cli, wait_for
from tests.integration.collect_sink import COLLECTED
from tests.integration.streaming import Background

ROWS = [
    {"id": 1, "name": "alice", "amount": 1.5},
    {"id": 2, "name": "bob, jr.", "amount": 2.25},
    {"id": 3, "name": "carol", "amount": -3.0},
]
SUFFIX = {"parquet": "parquet", "csv": "csv", "json": "json", "ndjson": "ndjson", "avro": "avro"}
AVRO_SCHEMA = {
    "type": "record",
    "name": "Row",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "name", "type": "string"},
        {"name": "amount", "type": "double"},
    ],
}
CLOCK = [time.time() - 10_000]


def write(path: Path, fmt: str, rows: list[dict[str, Any]], mtime: float | None = None) -> Path:
    """`rows` as a file of `fmt`, renamed into place (as a writer should), its modification time `mtime` or the
    next tick of a clock that only goes forward (so the files' order does not depend on the filesystem's)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = path.parent / f".{path.name}.tmp"
    if fmt == "parquet":
        pq.write_table(pa.Table.from_pylist(rows), staging)
    elif fmt == "csv":
        import csv

        with staging.open("w", newline="") as out:
            writer = csv.DictWriter(out, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    elif fmt in ("json", "ndjson"):
        staging.write_text("".join(json.dumps(r) + "\n" for r in rows))
    else:
        import fastavro

        with staging.open("wb") as out:
            fastavro.writer(out, AVRO_SCHEMA, rows)
    os.replace(staging, path)
    if mtime is None:
        CLOCK[0] += 10
        mtime = CLOCK[0]
    os.utime(path, (mtime, mtime))
    return path


@pytest.fixture
def schema(pg_connect) -> Iterator[str]:
    name = f"f_{uuid.uuid4().hex[:10]}"
    yield name
    with pg_connect() as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


def saved_position(tmp_path: Path, source: str = "files") -> dict[str, Any]:
    with SqliteStateBackend("local_app_v1", str(tmp_path / "state.db")) as state:
        saved = state.get(f"{source}:file")
    return {k: v for k, v in saved.items() if k != "updated_at"}


def collected(key: str) -> list[dict[str, Any]]:
    return [row for _, row in COLLECTED.get(key, [])]


@pytest.mark.parametrize("fmt", ["parquet", "csv", "json", "ndjson", "avro"])
def test_each_format_bounded_into_postgres_with_exact_rows(
    spark, make_settings, write_pipeline, postgres_env, pg_connect, schema, tmp_path, fmt
) -> None:
    data = tmp_path / "data"
    write(data / f"a.{SUFFIX[fmt]}", fmt, ROWS[:2])
    write(data / "nested" / "deeper" / f"b.{SUFFIX[fmt]}", fmt, ROWS[2:])
    path = write_pipeline(f"""
        sources:
          files: {{type: file, path: {data}, format: {fmt}, mode: {{type: bounded}}, primary_key: id}}
        sinks:
          out: {{type: postgres, from: files, schema: {schema}, table: rows}}
        """)
    summary = run_pipeline(path, make_settings(environ=postgres_env, job_mode=True), spark)
    with pg_connect() as conn:
        got = conn.execute(f'SELECT id, name, amount FROM "{schema}".rows ORDER BY id').fetchall()
        types = dict(
            conn.execute(
                "SELECT column_name, data_type FROM information_schema.columns WHERE table_schema = %s",
                (schema,),
            ).fetchall()
        )
    assert got == [(r["id"], r["name"], r["amount"]) for r in ROWS]
    assert {k: types[k] for k in ("id", "name", "amount")} == {
        "id": "bigint",
        "name": "text",
        "amount": "double precision",
    }
    assert summary.sources["files"].epochs == 1  # two small files: one epoch
    position = saved_position(tmp_path)
    assert position["last_modified"] == int(os.stat(data / "nested" / "deeper" / f"b.{SUFFIX[fmt]}").st_mtime_ns)
    assert position["files"] == [str(data / "nested" / "deeper" / f"b.{SUFFIX[fmt]}")]


def test_hive_folders_become_columns_and_gs_op_is_added_or_kept(spark, make_settings, write_pipeline, tmp_path):
    data = tmp_path / "events"
    write(data / "day=1" / "region=eu" / "part-0.parquet", "parquet", [{"id": 1, "v": "a"}, {"id": 2, "v": "b"}])
    write(data / "day=2" / "region=us%2Feast" / "part-0.parquet", "parquet", [{"id": 3, "v": "c"}])
    write(data / "_SUCCESS", "csv", [{"x": 1}])  # a writer's marker: hidden by its name
    key = uuid.uuid4().hex
    path = write_pipeline(f"""
        sources:
          files: {{type: file, path: {data}, format: parquet, mode: {{type: bounded}}}}
        sinks:
          out: {{type: test.collect, from: files, options: {{key: {key}}}}}
        """)
    settings = make_settings(job_mode=True)
    run_pipeline(path, settings, spark)
    assert sorted(collected(key), key=lambda r: r["id"]) == [
        {"id": 1, "v": "a", "day": 1, "region": "eu", "_gs_op": "i"},
        {"id": 2, "v": "b", "day": 1, "region": "eu", "_gs_op": "i"},
        {"id": 3, "v": "c", "day": 2, "region": "us/east", "_gs_op": "i"},
    ]
    # files that carry their own _gs_op keep it (a missing value is an insert)
    changes = tmp_path / "changes"
    write(changes / "c.json", "json", [{"id": 1, "_gs_op": "u"}, {"id": 2, "_gs_op": "d"}, {"id": 3}])
    key2 = uuid.uuid4().hex
    path = write_pipeline(
        f"""
        sources:
          changes: {{type: file, path: {changes}/*.json, mode: {{type: bounded}}}}
        sinks:
          out: {{type: test.collect, from: changes, options: {{key: {key2}}}}}
        """,
        name="changes.yaml",
    )
    run_pipeline(path, settings, spark)
    assert [(r["id"], r["_gs_op"]) for r in collected(key2)] == [(1, "u"), (2, "d"), (3, "i")]


def test_continuous_new_rewritten_and_deleted_files_then_a_restart_reads_only_what_is_new(
    spark, make_settings, write_pipeline, tmp_path
) -> None:
    data = tmp_path / "inbox"
    first = write(data / "a.csv", "csv", [{"id": 1, "v": "a1"}])
    key = uuid.uuid4().hex
    path = write_pipeline(f"""
        sources:
          files: {{type: file, path: {data}, format: csv, mode: {{type: continuous, poll_interval: 200ms}}}}
        sinks:
          out: {{type: test.collect, from: files, options: {{key: {key}}}}}
        """)
    settings = make_settings()
    run = Background(path, settings, spark)
    run.wait_until(lambda: len(collected(key)) == 1)
    second = write(data / "sub" / "b.csv", "csv", [{"id": 2, "v": "b1"}, {"id": 3, "v": "b2"}])
    run.wait_until(lambda: len(collected(key)) == 3)
    write(first, "csv", [{"id": 1, "v": "a1-rewritten"}, {"id": 4, "v": "a2"}])  # newer: read again, as inserts
    run.wait_until(lambda: len(collected(key)) == 5)
    second.unlink()  # a deletion changes nothing
    write(data / "old.csv", "csv", [{"id": 9, "v": "too old"}], mtime=CLOCK[0] - 5_000)  # before the watermark
    time.sleep(1.0)
    run.finish()
    assert [(r["id"], r["v"], r["_gs_op"]) for r in collected(key)] == [
        (1, "a1", "i"),
        (2, "b1", "i"),
        (3, "b2", "i"),
        (1, "a1-rewritten", "i"),
        (4, "a2", "i"),
    ]
    assert saved_position(tmp_path) == {"last_modified": os.stat(first).st_mtime_ns, "files": [str(first)]}
    # stopped; files arrive meanwhile; the next run reads each of them once and nothing read before
    write(data / "c.csv", "csv", [{"id": 5, "v": "c1"}])
    late = write(data / "d.csv", "csv", [{"id": 6, "v": "d1"}])
    run = Background(path, settings, spark)
    run.wait_until(lambda: len(collected(key)) >= 7)
    time.sleep(1.0)
    run.finish()
    assert [r["id"] for r in collected(key)[5:]] == [5, 6]
    assert saved_position(tmp_path) == {"last_modified": os.stat(late).st_mtime_ns, "files": [str(late)]}


def test_bounded_restart_reads_each_file_exactly_once_even_at_one_timestamp(
    spark, make_settings, write_pipeline, tmp_path
) -> None:
    """Files sharing one modification time: the set kept with the watermark tells read ones from new ones."""
    data = tmp_path / "drop"
    same = CLOCK[0] + 5
    CLOCK[0] += 10
    write(data / "a.json", "json", [{"id": 1}], mtime=same)
    write(data / "b.json", "json", [{"id": 2}], mtime=same)
    key = uuid.uuid4().hex
    path = write_pipeline(f"""
        sources:
          files: {{type: file, path: {data}, format: jsonl, mode: {{type: bounded}}}}
        sinks:
          out: {{type: test.collect, from: files, options: {{key: {key}}}}}
        """)
    settings = make_settings(job_mode=True)
    run_pipeline(path, settings, spark)
    assert saved_position(tmp_path) == {
        "last_modified": os.stat(data / "a.json").st_mtime_ns,
        "files": [str(data / "a.json"), str(data / "b.json")],
    }
    run_pipeline(path, settings, spark)  # nothing new: nothing read
    write(data / "c.json", "json", [{"id": 3}], mtime=same)  # the same time, not read yet
    write(data / "d.json", "json", [{"id": 4}])
    run_pipeline(path, settings, spark)
    assert [(epoch, row["id"]) for epoch, row in COLLECTED[key]] == [(1, 1), (1, 2), (2, 3), (2, 4)]
    assert saved_position(tmp_path) == {
        "last_modified": os.stat(data / "d.json").st_mtime_ns,
        "files": [str(data / "d.json")],
    }


def test_errors_name_the_path_and_the_bad_line(spark, make_settings, write_pipeline, tmp_path) -> None:
    settings = make_settings(job_mode=True)
    empty = tmp_path / "empty"
    empty.mkdir()
    for where in (str(empty), f"{tmp_path}/nothing/*.parquet"):
        path = write_pipeline(f"""
            sources:
              files: {{type: file, path: '{where}', format: parquet, mode: {{type: bounded}}}}
            sinks:
              out: {{type: blackhole, from: files}}
            """)
        assert validate_pipeline(path, settings, spark).errors == [f"file source 'files': no files matching {where}"]
    scheme = write_pipeline("""
        sources:
          files: {type: file, path: 'hdfs://nn/x', format: parquet, mode: {type: bounded}}
        sinks:
          out: {type: blackhole, from: files}
        """)
    assert validate_pipeline(scheme, settings, spark).errors == [
        "source 'files' (type 'file'): field 'path': unsupported scheme hdfs; use a local path or an s3://, s3a:// or "
        "gs:// URL (got 'hdfs://nn/x')"
    ]
    bad_csv = tmp_path / "csv"
    for name in "abcdefgh":  # the files the columns are inferred from
        write(bad_csv / f"{name}.csv", "csv", [{"id": 1, "v": "x"}])
    bad = bad_csv / "z.csv"
    bad.write_text('id,v\n2,"y"\n3,"multi\nline"\nnot-a-number,z\n')
    check_failure(spark, settings, write_pipeline, bad_csv, "csv", f"{bad}: line 5: ")
    ragged = tmp_path / "ragged"
    bad = write(ragged / "a.csv", "csv", [{"id": 1, "v": "x"}])
    bad.write_text(bad.read_text() + "2,y,extra\n")
    path = write_pipeline(
        f"""
        sources:
          files: {{type: file, path: {ragged}, format: csv, mode: {{type: bounded}}}}
        sinks:
          out: {{type: blackhole, from: files}}
        """,
        name="ragged.yaml",
    )
    assert validate_pipeline(path, settings, spark).errors == [
        f"file source 'files': {bad}: cannot read its columns as csv: line 3: expected 2 columns, got 3"
    ]
    bad_json = tmp_path / "json"
    bad = bad_json / "a.json"
    bad_json.mkdir()
    bad.write_text('{"id": 1}\n\n{"id": 2}\n{"id": 3,\n')
    path = write_pipeline(
        f"""
        sources:
          files: {{type: file, path: {bad_json}, format: json, mode: {{type: bounded}}}}
        sinks:
          out: {{type: blackhole, from: files}}
        """,
        name="json.yaml",
    )
    (error,) = validate_pipeline(path, settings, spark).errors
    assert error.startswith(f"file source 'files': {bad}: cannot read its columns as json: line 4: not valid JSON: ")


def check_failure(spark, settings, write_pipeline, data: Path, fmt: str, expected: str) -> None:
    path = write_pipeline(
        f"""
        sources:
          files: {{type: file, path: {data}, format: {fmt}, mode: {{type: bounded}}}}
        sinks:
          out: {{type: blackhole, from: files}}
        """,
        name=f"{fmt}.yaml",
    )
    with pytest.raises(StreamlingError) as failure:
        run_pipeline(path, settings, spark)
    message = str(failure.value)
    assert f"file source 'files': {expected}" in message, message
    assert "Traceback" not in message


def test_bad_lines_go_to_the_dead_letter_table_and_the_rest_is_read(
    spark, make_settings, write_pipeline, postgres_env, pg_connect, schema, tmp_path
) -> None:
    data = tmp_path / "mixed"
    for name in "abcdefgh":  # the files the columns are inferred from
        write(data / f"{name}.csv", "csv", [{"id": ord(name), "v": name}])
    bad = data / "z.csv"
    bad.write_text('id,v\n1,ok\nnope,x\n2,"two\nlines"\n3,a,b\n\n4,fine\n')
    jsonl = tmp_path / "jsonl"
    write(jsonl / "a.json", "json", [{"id": 1, "v": "a"}])
    broken = jsonl / "b.json"  # in the files the columns are inferred from: from its readable lines
    broken.write_text('{"id": 2, "v": "b"}\n[1]\n{"id": 3\n{"id": 4, "extra": true}\n')
    key = uuid.uuid4().hex
    path = write_pipeline(f"""
        sources:
          mixed:
            type: file
            path: {data}
            format: csv
            mode: {{type: bounded}}
            on_error: dead_letter
            dead_letter: {{table: {schema}.dlq}}
          lines:
            type: file
            path: {jsonl}
            format: ndjson
            mode: {{type: bounded}}
            on_error: dead_letter
            dead_letter: {{table: {schema}.dlq}}
        sinks:
          out: {{type: test.collect, from: mixed, options: {{key: {key}}}}}
          out2: {{type: test.collect, from: lines, options: {{key: {key}-2}}}}
        """)
    run_pipeline(path, make_settings(environ=postgres_env, job_mode=True), spark)
    assert sorted(r["id"] for r in collected(key)) == sorted([*(ord(c) for c in "abcdefgh"), 1, 2, 4])
    assert [(r["id"], r["v"]) for r in collected(key) if r["id"] < 10] == [(1, "ok"), (2, "two\nlines"), (4, "fine")]
    assert [r["id"] for r in collected(f"{key}-2")] == [1, 2, 4]
    with pg_connect() as conn:
        letters = conn.execute(
            f'SELECT node, record_id, error, topic, "offset", value FROM "{schema}".dlq ORDER BY node, "offset"'
        ).fetchall()
    mtime, jtime = os.stat(bad).st_mtime_ns, os.stat(broken).st_mtime_ns
    assert [(n, rid, t, o, bytes(v)) for n, rid, _, t, o, v in letters] == [
        ("lines", f"{broken}@{jtime}:2", str(broken), 2, b"[1]"),
        ("lines", f"{broken}@{jtime}:3", str(broken), 3, b'{"id": 3'),
        ("mixed", f"{bad}@{mtime}:3", str(bad), 3, b"nope,x"),
        ("mixed", f"{bad}@{mtime}:6", str(bad), 6, b"3,a,b"),
    ]
    errors = [e for _, _, e, _, _, _ in letters]
    assert errors[0] == f"{broken}: line 2: not a JSON object"
    assert errors[1].startswith(f"{broken}: line 3: not valid JSON: ")
    assert errors[2].startswith(f"{bad}: line 3: In CSV column #0: CSV conversion error to int64")
    assert errors[3] == f"{bad}: line 6: expected 2 columns, got 3"


def test_killed_after_an_epoch_was_written_the_restart_reads_no_file_twice_and_skips_none(
    tmp_path, postgres_env, pg_connect, schema
) -> None:
    """SIGKILL after the sinks wrote epoch 2 (one file) but before its position was committed: the restart
    replays exactly that file (the Postgres sinks recognise the epoch and skip it) and goes on with the next."""
    data = tmp_path / "in"
    write(data / "a.csv", "csv", [{"id": 1}, {"id": 2}])
    pipeline = tmp_path / "pipeline.yaml"
    pipeline.write_text(f"""
sources:
  files: {{type: file, path: {data}, format: csv, primary_key: id, mode: {{type: continuous, poll_interval: 200ms}}}}
sinks:
  rows: {{type: postgres, from: files, schema: {schema}, table: rows}}
  counts:
    type: postgres_aggregate
    from: files
    schema: {schema}
    landing_table: landing
    agg_table: counts
    aggregate: {{n: {{fn: count}}}}
""")
    env = {**postgres_env, "STREAMLING__CHECKPOINT_INTERVAL_SEC": "300ms"}

    def ids() -> list[int]:
        with pg_connect() as conn:
            try:
                return [r[0] for r in conn.execute(f'SELECT id FROM "{schema}".rows ORDER BY id').fetchall()]
            except Exception:
                return []

    proc = start_cli(tmp_path, str(pipeline), env={**env, "STREAMLING_CRASH_AT": "after_write:2"})
    wait_for(lambda: ids() == [1, 2], proc)
    write(data / "b.csv", "csv", [{"id": 3}, {"id": 4}])
    assert proc.wait(120) == -9, proc.stderr.read()
    first = data / "a.csv"
    saved = sqlite_state(tmp_path / "state.db")["files:file"]
    assert (saved["last_modified"], saved["files"]) == (os.stat(first).st_mtime_ns, [str(first)])
    write(data / "c.csv", "csv", [{"id": 5}])
    proc = start_cli(tmp_path, str(pipeline), env=env)
    wait_for(lambda: ids() == [1, 2, 3, 4, 5], proc)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 0, proc.stderr.read()
    with pg_connect() as conn:
        (applied,) = conn.execute(f'SELECT n FROM "{schema}".counts').fetchone()
    assert applied == 5  # nothing counted twice
    last = data / "c.csv"
    saved = sqlite_state(tmp_path / "state.db")["files:file"]
    assert (saved["last_modified"], saved["files"]) == (os.stat(last).st_mtime_ns, [str(last)])


def test_a_time_backfill_range_reads_the_files_modified_within_it(spark, make_settings, write_pipeline, tmp_path):
    """What a Dagster time-window partition of a bounded file source runs: the files modified in [start, end)."""
    from datetime import UTC, datetime

    data = tmp_path / "daily"
    for day in (1, 2, 3):
        moment = datetime(2026, 5, day, 12, tzinfo=UTC).timestamp()
        write(data / f"day{day}.csv", "csv", [{"id": day}], mtime=moment)
    write(data / "midnight.csv", "csv", [{"id": 20}], mtime=datetime(2026, 5, 2, tzinfo=UTC).timestamp())
    write(data / "next-midnight.csv", "csv", [{"id": 30}], mtime=datetime(2026, 5, 3, tzinfo=UTC).timestamp())
    key = uuid.uuid4().hex
    path = write_pipeline(f"""
        sources:
          files: {{type: file, path: {data}, format: csv, mode: {{type: bounded}}}}
        sinks:
          out: {{type: test.collect, from: files, options: {{key: {key}}}}}
        """)
    window = {"backfill_range.start": "2026-05-02", "backfill_range.end": "2026-05-03"}
    run_pipeline(path, make_settings(job_mode=True, **window), spark)
    assert sorted(r["id"] for r in collected(key)) == [2, 20]
    integers = make_settings(job_mode=True, **{"backfill_range.start": 1, "backfill_range.end": 5})
    assert validate_pipeline(path, integers, spark).errors == [
        "file source 'files': backfill_range [1, 5) is of integers; a file source's ranges are of the files' "
        "modification times (dates or date-times)"
    ]


def test_a_dagster_daily_partition_backfills_the_files_modified_that_day(
    tmp_path, spark, monkeypatch, postgres_env, pg_connect, schema
) -> None:
    """`orchestration.backfill_partitions` with `every: day` over a bounded file source: materializing one day
    writes the rows of the files modified that day, in a state namespace of the partition's own."""
    from datetime import UTC, datetime

    import dagster as dg

    from streamling_dagster import build_definitions
    from streamling_dagster.resources import StreamlingResource
    from tests.integration.test_dagster import SessionSpark

    for key, value in postgres_env.items():
        monkeypatch.setenv(key, value)
    data = tmp_path / "drops"
    for day in (1, 2, 3):
        moment = datetime(2026, 5, day, 12, tzinfo=UTC).timestamp()
        write(data / f"day{day}.csv", "csv", [{"id": day * 10 + i} for i in range(3)], mtime=moment)
    pipelines = tmp_path / "pipelines"
    pipelines.mkdir()
    (pipelines / "drops.yaml").write_text(f"""
sources:
  files: {{type: file, path: {data}, format: csv, mode: {{type: bounded}}, primary_key: id}}
sinks:
  out: {{type: postgres, from: files, schema: {schema}, table: drops}}
orchestration:
  backfill_partitions: {{every: day, start: 2026-05-01, end: 2026-05-04}}
""")
    defs = build_definitions(pipelines)
    (assets,) = [a for a in defs.assets or [] if isinstance(a, dg.AssetsDefinition)]
    assert assets.partitions_def.get_partition_keys() == ["2026-05-01", "2026-05-02", "2026-05-03"]
    resources = {
        "streamling": StreamlingResource(
            overrides={
                "state_backend.sqlite.database_path": str(tmp_path / "state.db"),
                "spark.checkpoint_root": str(tmp_path / "checkpoints"),
                "checkpoint_interval_sec": "200ms",
            }
        ),
        "spark": SessionSpark(spark_config={"spark.master": "local[2]"}),
    }
    with dg.instance_for_test() as instance:
        result = dg.materialize([assets], partition_key="2026-05-02", instance=instance, resources=resources)
        assert result.success
    with pg_connect() as conn:
        ids = [r[0] for r in conn.execute(f'SELECT id FROM "{schema}".drops ORDER BY id').fetchall()]
    assert ids == [20, 21, 22]
