"""The file source where production puts it, through the real CLI and engine: beside a Kafka source with several
Postgres sinks in one pipeline, stopped by SIGTERM to its process group and run again; several file pipelines in
one `streamling serve`; and a starved machine (a busy process on every core) whose Spark Python workers are killed
mid-epoch, with a script transform whose added column is inferred at validation. Real Postgres, real broker and
registry, real files on local disk (the object-store schemes have no service here)."""

from __future__ import annotations

import json
import os
import re
import signal
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.e2e.cli import run_cli, sqlite_state, start_cli, wait_for, write
from tests.e2e.engine import Engine, settings_document, submit_all
from tests.e2e.starvation import RESTARTED, RESTARTING, Killer, follow
from tests.e2e.test_cli_postgres import _one, create_audited_events
from tests.integration.test_file_source import write as write_file
from tests.integration.test_kafka import TX_SCHEMA, tx
from tests.waiting import wait_for as wait_until

pytestmark = pytest.mark.integration


@pytest.fixture
def schema(pg_connect) -> Iterator[str]:
    name = f"cf_{uuid.uuid4().hex[:10]}"
    with pg_connect() as conn:
        conn.execute(f'CREATE SCHEMA "{name}"')
    yield name
    with pg_connect() as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


def _ids(pg_connect, schema: str, table: str) -> list[int]:
    with pg_connect() as conn:
        try:
            return [r[0] for r in conn.execute(f'SELECT id FROM "{schema}"."{table}" ORDER BY id').fetchall()]
        except Exception:  # not created yet
            return []


def _rows(first: int, n: int) -> list[dict]:
    return [{"id": i, "name": f"n{i}", "amount": i / 4} for i in range(first, first + n)]


def test_files_beside_kafka_into_three_sinks_stop_on_sigterm_to_the_group_and_a_second_run_reads_only_what_is_new(
    tmp_path: Path, kafka, postgres_env: dict[str, str], pg_connect, schema: str
) -> None:
    """One pipeline, two sources (a continuous CSV folder and an Avro topic), three sinks (each source's rows and a
    count over the union of both). SIGTERM to the whole process group (as systemd or `docker stop` do) drains and
    exits 0 with both sources' positions saved; files and messages that arrive while it is down are read by the next
    run, and nothing is read or counted twice."""
    data = tmp_path / "in"
    topic = kafka.topic("files_beside", partitions=2)
    pipeline = write(
        tmp_path,
        f"""
        sources:
          files: {{type: file, path: {data}, format: csv, primary_key: id, mode: {{type: continuous, poll_interval: 200ms}}}}
          orders: {{type: kafka, topic: {topic}, record_batch_size: 200}}
        transforms:
          order_view: {{type: sql, primary_key: id, sql: "SELECT id, user_id, amount FROM orders"}}
          both: {{type: sql, primary_key: id, sql: "SELECT id FROM files UNION ALL SELECT id + 1000000 AS id FROM orders"}}
        sinks:
          file_rows: {{type: postgres, from: files, schema: {schema}, table: file_rows}}
          order_rows: {{type: postgres, from: order_view, schema: {schema}, table: order_rows}}
          counts:
            type: postgres_aggregate
            from: both
            schema: {schema}
            landing_table: landing
            agg_table: counts
            aggregate: {{n: {{fn: count}}, total: {{from: id, fn: sum}}}}
        """,
    )
    env = {**postgres_env, **kafka.env, "STREAMLING__CHECKPOINT_INTERVAL_SEC": "300ms"}
    db = tmp_path / "state.db"

    write_file(data / "a.csv", "csv", _rows(1, 40))
    write_file(data / "2026" / "b.csv", "csv", _rows(41, 40))  # a subfolder, read recursively
    kafka.produce_avro(topic, TX_SCHEMA, [tx(i) for i in range(300)], partition_of=lambda i: i % 2)
    proc = start_cli(tmp_path, str(pipeline), env=env)
    wait_for(lambda: len(_ids(pg_connect, schema, "file_rows")) == 80, proc)
    wait_for(lambda: len(_ids(pg_connect, schema, "order_rows")) == 300, proc)
    # while it runs: a new file and more messages
    write_file(data / "c.csv", "csv", _rows(81, 20))
    kafka.produce_avro(topic, TX_SCHEMA, [tx(i) for i in range(300, 400)], partition_of=lambda i: i % 2)
    wait_for(lambda: len(_ids(pg_connect, schema, "file_rows")) == 100, proc)
    wait_for(lambda: len(_ids(pg_connect, schema, "order_rows")) == 400, proc)
    wait_for(lambda: _one(pg_connect, f'SELECT n FROM "{schema}".counts') == (500,), proc)

    os.killpg(proc.pid, signal.SIGTERM)
    assert proc.wait(60) == 0
    first_err = proc.stderr.read()
    assert "Traceback" not in first_err and "Error:" not in first_err, first_err[-3000:]
    assert re.search(r"source 'files': \d+ epochs, 100 rows read, position ", first_err), first_err[-3000:]
    assert re.search(r"source 'orders': \d+ epochs, 400 rows read, position ", first_err), first_err[-3000:]
    state = sqlite_state(db)
    last = data / "c.csv"
    assert (state["files:file"]["last_modified"], state["files:file"]["files"]) == (
        os.stat(last).st_mtime_ns,
        [str(last)],
    )
    assert sum(v["offset"] for k, v in state.items() if k.startswith(f"orders:{topic}:")) == 400

    # while it is down: another file and more messages; then the second run of the same pipeline
    write_file(data / "2026" / "d.csv", "csv", _rows(101, 30))
    kafka.produce_avro(topic, TX_SCHEMA, [tx(i) for i in range(400, 450)], partition_of=lambda i: i % 2)
    proc = start_cli(tmp_path, str(pipeline), env=env)
    wait_for(lambda: _one(pg_connect, f'SELECT n FROM "{schema}".counts') == (580,), proc)
    os.killpg(proc.pid, signal.SIGTERM)
    assert proc.wait(60) == 0
    second_err = proc.stderr.read()
    assert "Traceback" not in second_err and "Error:" not in second_err, second_err[-3000:]
    assert re.search(r"source 'files': \d+ epochs, 30 rows read, position ", second_err), second_err[-3000:]

    assert _ids(pg_connect, schema, "file_rows") == list(range(1, 131))
    assert _ids(pg_connect, schema, "order_rows") == list(range(450))
    expected_total = sum(range(1, 131)) + sum(i + 1_000_000 for i in range(450))
    # every row counted once across both runs: a re-read file or message would show here
    assert _one(pg_connect, f'SELECT n, total FROM "{schema}".counts') == (580, expected_total)
    state = sqlite_state(db)
    last = data / "2026" / "d.csv"
    assert state["files:file"]["last_modified"] == os.stat(last).st_mtime_ns
    assert sum(v["offset"] for k, v in state.items() if k.startswith(f"orders:{topic}:")) == 450


def test_several_file_pipelines_share_one_engine_each_with_its_own_folder_and_positions(
    tmp_path: Path, postgres_env: dict[str, str], pg_connect, schema: str
) -> None:
    """Four bounded file pipelines (Parquet, CSV, JSON, Avro, each its own folder) and a continuous one, submitted
    at the same moment to one `streamling serve`: the bounded ones end, each table exact; the continuous one picks
    up a file written while it runs and stops on request with its position saved; a second run of a bounded
    pipeline reads nothing again (its position says every file was read)."""
    app = f"cf_{uuid.uuid4().hex[:8]}"
    formats = ["parquet", "csv", "json", "avro"]
    pipelines = []
    for i, fmt in enumerate(formats):
        for part in range(3):
            write_file(tmp_path / fmt / f"part={part}" / f"f.{fmt}", fmt, _rows(1000 * i + 100 * part + 1, 50))
        pipelines.append(
            write(
                tmp_path,
                f"""
                sources:
                  files: {{type: file, path: {tmp_path / fmt}, format: {fmt}, primary_key: id, mode: {{type: bounded}}}}
                sinks:
                  out: {{type: postgres, from: files, schema: {schema}, table: {fmt}}}
                  counts: {{type: postgres_aggregate, from: files, schema: {schema}, landing_table: {fmt}_landing, agg_table: {fmt}_counts, aggregate: {{n: {{fn: count}}}}}}
                """,
                f"{fmt}.yaml",
            )
        )
    live_folder = tmp_path / "live"
    write_file(live_folder / "a.ndjson", "ndjson", _rows(1, 10))
    live = write(
        tmp_path,
        f"""
        sources:
          files: {{type: file, path: {live_folder}, format: ndjson, primary_key: id, mode: {{type: continuous, poll_interval: 200ms}}}}
        sinks:
          out: {{type: postgres, from: files, schema: {schema}, table: live}}
        """,
        "live.yaml",
    )
    env = {**postgres_env, "STREAMLING__CHECKPOINT_INTERVAL_SEC": "300ms"}
    engine = Engine(tmp_path, env)
    try:
        job = [
            settings_document(
                tmp_path, {**env, "STREAMLING__JOB_MODE": "true", "STREAMLING__APPLICATION_ID": f"{app}_{f}"}
            )
            for f in formats
        ]
        stream = settings_document(tmp_path, {**env, "STREAMLING__APPLICATION_ID": f"{app}_live"})
        *bounded, live_run = submit_all(engine, [*pipelines, live], [*job, stream])
        wait_until(lambda: all(engine.get(f"/runs/{r}")["done"] for r in bounded), 300, "the bounded runs")
        views = [engine.get(f"/runs/{r}") for r in bounded]
        assert [v["state"] for v in views] == ["succeeded"] * 4, [v["error"] for v in views]
        assert [v["sources"]["files"]["rows_in"] for v in views] == [150] * 4  # counted by Spark as they were read
        wait_until(lambda: len(_ids(pg_connect, schema, "live")) == 10, 120, "the live pipeline's first file")
        write_file(live_folder / "later" / "b.ndjson", "ndjson", _rows(11, 5))
        wait_until(lambda: len(_ids(pg_connect, schema, "live")) == 15, 120, "a file written while it runs")
        stopped = httpx.post(f"{engine.url}/runs/{live_run}/stop", headers=engine.headers, timeout=60)
        assert stopped.status_code == 202, stopped.text
        wait_until(lambda: engine.get(f"/runs/{live_run}")["state"] == "stopped", 120, "the live run stopped")
        assert engine.get(f"/runs/{live_run}")["sources"]["files"]["rows_in"] == 15

        # the same Parquet pipeline again: its position covers every file, so it reads none
        (again,) = submit_all(engine, [pipelines[0]], job[0])
        wait_until(lambda: engine.get(f"/runs/{again}")["done"], 180, "the second Parquet run")
        assert engine.get(f"/runs/{again}")["state"] == "succeeded"
        assert engine.get("/health")["status"] == "ok"
    finally:
        assert engine.stop() == 0

    for i, fmt in enumerate(formats):
        expected = [1000 * i + 100 * part + k for part in range(3) for k in range(1, 51)]
        assert _ids(pg_connect, schema, fmt) == expected, fmt
        parts = _one(pg_connect, f'SELECT array_agg(DISTINCT part ORDER BY part) FROM "{schema}"."{fmt}"')
        assert parts == ([0, 1, 2],), fmt  # the Hive folder became a column
        assert _one(pg_connect, f'SELECT n FROM "{schema}"."{fmt}_counts"') == (150,), fmt  # the second run read none
        saved = sqlite_state(tmp_path / "state.db", f"{app}_{fmt}")["files:file"]
        assert len(saved["files"]) == 1 and saved["last_modified"] == max(
            os.stat(p).st_mtime_ns for p in (tmp_path / fmt).rglob(f"*.{fmt}")
        )
    assert _ids(pg_connect, schema, "live") == list(range(1, 16))
    saved = sqlite_state(tmp_path / "state.db", f"{app}_live")["files:file"]
    assert saved["files"] == [str(live_folder / "later" / "b.ndjson")]


SCRIPTED = """
sources:
  files: {{type: file, path: {data}, format: parquet, primary_key: id, mode: {{type: bounded}}}}
transforms:
  tagged:
    type: script
    from: files
    language: javascript
    script: >
      function process(input) {{
        input.tier = input.amount > 100 ? 'big' : 'small';
        return input;
      }}
    primary_key: id
  big_ones: {{type: sql, primary_key: id, sql: "SELECT id, tier FROM tagged WHERE tier = 'big'"}}
sinks:
  out: {{type: postgres, from: tagged, schema: {schema}, table: events}}
  big: {{type: postgres, from: big_ones, schema: {schema}, table: big}}
"""


def test_on_a_starved_machine_killed_python_workers_restart_the_run_and_every_file_row_lands_once(
    tmp_path: Path, postgres_env: dict[str, str], pg_connect, schema: str, starved: None
) -> None:
    """Twelve Parquet files through a script transform that adds a column without `schema` (inferred at
    validation), every core busy beside the run, and Spark's Python workers (which read the files and run the
    script) killed with SIGKILL until the run restarts from its committed positions: the table ends with every row
    once, each with its inferred column, and the audit shows no row written twice."""
    data = tmp_path / "in"
    files, per_file = 12, 2000
    for i in range(files):
        write_file(data / f"f{i:02d}.parquet", "parquet", _rows(i * per_file + 1, per_file))
    with pg_connect() as conn:
        create_audited_events(conn, schema, columns="name text, amount double precision, tier text")
    pipeline = write(tmp_path, SCRIPTED.format(data=data, schema=schema))

    validated = run_cli(tmp_path, "--validate", str(pipeline), env=postgres_env)
    # valid only if `tier` (added by the script, no `schema`) was inferred: the SQL after it selects it
    assert validated.returncode == 0, validated.stderr[-3000:]
    assert json.loads(validated.stdout)["is_valid"] is True, validated.stdout

    env = {**postgres_env, **RESTARTING, "STREAMLING__JOB_MODE": "true"}
    proc = start_cli(tmp_path, str(pipeline), env=env)
    output = follow(proc)
    killer = Killer(proc.pid, output)
    try:
        assert proc.wait(600) == 0, "".join(output)[-4000:]
    finally:
        killer.stop.set()
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    text = "".join(output)
    assert any(RESTARTED in line for line in output), f"{killer.kills} workers killed, no restart:\n{text[-3000:]}"
    assert "Error:" not in text and "Traceback" not in text
    total = files * per_file
    assert _one(pg_connect, f'SELECT count(*), count(DISTINCT id), min(id), max(id) FROM "{schema}".events') == (
        total,
        total,
        1,
        total,
    )
    assert _one(pg_connect, f'SELECT count(*) FROM "{schema}".events WHERE tier IS NULL') == (0,)
    big = [i for i in range(1, total + 1) if i / 4 > 100]
    assert _one(pg_connect, f"SELECT count(*) FROM \"{schema}\".events WHERE tier = 'big'") == (len(big),)
    assert _ids(pg_connect, schema, "big") == big
    assert _one(pg_connect, f'SELECT count(*), count(DISTINCT id), min(op), max(op) FROM "{schema}".audit') == (
        total,
        total,
        "INSERT",
        "INSERT",
    )
    last = max(data.glob("*.parquet"), key=lambda p: os.stat(p).st_mtime_ns)
    assert sqlite_state(tmp_path / "state.db")["files:file"]["files"] == [str(last)]


def test_on_a_starved_machine_a_malformed_row_ends_the_run_with_one_error_line_and_the_fixed_file_is_read_again(
    tmp_path: Path, postgres_env: dict[str, str], pg_connect, schema: str, starved: None
) -> None:
    """A bad CSV row read in a Spark Python worker while every core is busy: exit 1, stderr's last line is the one
    `Error:`, naming the source, the file and the line, and no Python traceback (the worker's or pyspark's) reaches
    stderr. The failed epoch's position is not saved, so nothing is lost: once the file is fixed, the next run reads
    every row."""
    data = tmp_path / "in"
    for n, name in enumerate("abcdefgh"):  # the files the columns are inferred from
        write_file(data / f"{name}.csv", "csv", _rows(2 * n + 1, 2))
    bad = data / "z.csv"
    bad.write_text("id,name,amount\n17,x,1.0\nseventeen,y,2.0\n")
    os.utime(bad, (os.stat(data / "h.csv").st_mtime + 10,) * 2)
    pipeline = write(
        tmp_path,
        f"""
        sources:
          files: {{type: file, path: {data}, format: csv, primary_key: id, mode: {{type: bounded}}}}
        sinks:
          out: {{type: postgres, from: files, schema: {schema}, table: rows}}
        """,
    )
    env = {**postgres_env, "STREAMLING__JOB_MODE": "true"}
    failed = run_cli(tmp_path, str(pipeline), env=env, timeout=400)
    assert failed.returncode == 1, failed.stderr[-3000:]
    lines = failed.stderr.strip().splitlines()
    assert lines[-1].startswith("Error: ") and f"file source 'files': {bad}: line 3: " in lines[-1], lines[-1]
    assert sum(line.startswith("Error:") for line in lines) == 1, failed.stderr[-3000:]
    assert "Traceback" not in failed.stderr and 'File "' not in failed.stderr, failed.stderr[-3000:]
    assert "files:file" not in sqlite_state(tmp_path / "state.db")

    bad.write_text("id,name,amount\n17,x,1.0\n18,y,2.0\n")
    os.utime(bad, (os.stat(data / "h.csv").st_mtime + 20,) * 2)
    fixed = run_cli(tmp_path, str(pipeline), env=env, timeout=400)
    assert fixed.returncode == 0, fixed.stderr[-3000:]
    assert _ids(pg_connect, schema, "rows") == list(range(1, 19))
