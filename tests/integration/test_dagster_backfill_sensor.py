"""The backfill sensor against the real (embedded) ClickHouse engine: a run when the pipeline file changed or a
table's first sort key grew, a skip otherwise, and a skip that keeps the cursor when ClickHouse cannot be read."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import dagster as dg

from streamling_dagster.backfill_sensor import FIRST_TRIGGER, backfill_sensor
from streamling_dagster.pipelines import PipelineFile, discover
from streamling_dagster.resources import StreamlingResource
from tests.net import free_port

PIPELINE = """
sources:
  trades_history:
    type: clickhouse
    table_name: {database}.trades
    primary_key: id
  blocks:
    type: hybrid
    primary_key: block
    bounded_sources:
      - {{source_type: clickhouse, table_name: {database}.blocks}}
      - {{source_type: clickhouse, table_name: {database}.trades}}
sinks:
  out: {{type: blackhole, from: trades_history}}
  more: {{type: blackhole, from: blocks}}
"""


def make_tables(client, database: str) -> None:
    client.command(f"CREATE TABLE {database}.trades (ts DateTime, id UInt32) ENGINE = MergeTree ORDER BY (ts, id)")
    client.command(f"INSERT INTO {database}.trades VALUES ('2024-01-01 00:00:00', 1), ('2024-01-02 00:00:00', 2)")
    client.command(f"CREATE TABLE {database}.blocks (block UInt64, id UInt32) ENGINE = MergeTree ORDER BY block")
    client.command(f"INSERT INTO {database}.blocks SELECT number, 0 FROM numbers(10)")  # 0..9


def pipeline_file(directory: Path, database: str) -> PipelineFile:
    (directory / "trades.yaml").write_text(textwrap.dedent(PIPELINE.format(database=database)))
    (pf,) = discover(directory)
    assert pf.can_backfill, pf.errors or pf.backfill_errors
    return pf


def tick(sensor: dg.SensorDefinition, cursor: str | None, **overrides: str):
    resource = StreamlingResource(overrides=overrides)
    return sensor(dg.build_sensor_context(cursor=cursor, resources={"streamling": resource}))


def requested(result) -> dg.RunRequest:
    assert isinstance(result, dg.SensorResult), result
    (request,) = result.run_requests or []
    assert request.run_key == "trades:" + hashlib.sha256(result.cursor.encode()).hexdigest()[:16]
    assert request.tags["streamling/pipeline"] == "trades"
    return request


def test_runs_when_the_file_changes_or_a_sort_key_grows_and_skips_otherwise(
    tmp_path, clickhouse, clickhouse_env
) -> None:
    client, db = clickhouse
    make_tables(client, db)
    pf = pipeline_file(tmp_path, db)
    sensor = backfill_sensor(pf)
    path = clickhouse_env["STREAMLING__CLICKHOUSE_SOURCE__PATH"]

    def run(cursor: str | None):
        return tick(sensor, cursor, **{"clickhouse_source.path": path})

    # first evaluation: a run, and the cursor is the fingerprint
    first = run(None)
    request = requested(first)
    assert request.tags["streamling/trigger"] == FIRST_TRIGGER
    trades, blocks = f"{db}.trades max(ts)", f"{db}.blocks max(block)"
    recorded = json.loads(first.cursor)
    assert recorded["tables"] == {trades: "2024-01-02 00:00:00", blocks: "9"}
    assert sorted(recorded["nodes"]) == ["sink more", "sink out", "source blocks", "source trades_history"]
    assert requested(run(None)).run_key == request.run_key  # deterministic: same state, same key

    # nothing changed
    quiet = run(first.cursor)
    assert isinstance(quiet, dg.SkipReason)
    assert quiet.skip_message == (
        f"no bounded input advanced: pipeline definition unchanged; clickhouse {trades} still 2024-01-02 00:00:00; "
        f"clickhouse {blocks} still 9"
    )

    # a later timestamp: a run with another key, naming the table
    client.command(f"INSERT INTO {db}.trades VALUES ('2024-01-03 00:00:00', 3)")
    grown = run(first.cursor)
    assert requested(grown).run_key != request.run_key
    assert (
        requested(grown).tags["streamling/trigger"] == f"clickhouse {trades} 2024-01-02 00:00:00 -> 2024-01-03 00:00:00"
    )
    assert json.loads(grown.cursor)["tables"] == {trades: "2024-01-03 00:00:00", blocks: "9"}

    # rows with smaller keys are not read by a resumed backfill: no run
    client.command(f"INSERT INTO {db}.trades VALUES ('2023-12-31 00:00:00', 4)")
    assert run(grown.cursor).skip_message == (
        f"no bounded input advanced: pipeline definition unchanged; clickhouse {trades} still 2024-01-03 00:00:00; "
        f"clickhouse {blocks} still 9"
    )

    # keys compare in ClickHouse's order (10 > 9, though "10" < "9" as text)
    client.command(f"INSERT INTO {db}.blocks VALUES (10, 0)")
    numeric = run(grown.cursor)
    assert requested(numeric).tags["streamling/trigger"] == f"clickhouse {blocks} 9 -> 10"

    # a shrunken table keeps the high-water mark (and the cursor)
    client.command(f"TRUNCATE TABLE {db}.blocks")
    client.command(f"INSERT INTO {db}.blocks VALUES (5, 0)")
    shrunk = run(numeric.cursor)
    assert isinstance(shrunk, dg.SkipReason)
    assert shrunk.skip_message == (
        f"no bounded input advanced: pipeline definition unchanged; clickhouse {trades} still 2024-01-03 00:00:00; "
        f"clickhouse {blocks} 5, not beyond 10"
    )

    # comments, formatting, a default written out and orchestration settings change nothing a run does
    original = pf.path.read_text()
    pf.path.write_text(
        "# tuned\n"
        + original.replace("    primary_key: id\n", "    primary_key: id   # the trade id\n", 1)
        + "orchestration: {backfill_schedule: '0 3 * * *'}\n"
    )
    reformatted = run(numeric.cursor)
    assert isinstance(reformatted, dg.SkipReason), reformatted
    assert reformatted.skip_message.startswith("no bounded input advanced: pipeline definition unchanged;")

    # an edit on disk is seen before the code location reloads, and the trigger names what changed
    pf.path.write_text(original.replace("more: {type: blackhole, from: blocks}", "more: {type: print, from: blocks}"))
    edited = run(numeric.cursor)
    assert requested(edited).tags["streamling/trigger"] == "pipeline definition changed: sink 'more' changed"
    assert json.loads(edited.cursor)["tables"] == {trades: "2024-01-03 00:00:00", blocks: "10"}
    assert json.loads(edited.cursor)["nodes"]["sink more"] != recorded["nodes"]["sink more"]
    assert requested(edited).run_key not in {request.run_key, requested(grown).run_key, requested(numeric).run_key}

    # both at once
    client.command(f"INSERT INTO {db}.blocks VALUES (11, 0)")
    pf.path.write_text(original)
    assert requested(run(edited.cursor)).tags["streamling/trigger"] == (
        f"pipeline definition changed: sink 'more' changed; clickhouse {blocks} 10 -> 11"
    )

    # a cursor written by an older version (a digest of the file's bytes) is taken over without a run
    older = json.dumps({"file": "0" * 64, "tables": json.loads(edited.cursor)["tables"] | {blocks: "11"}})
    taken = run(older)
    assert isinstance(taken, dg.SensorResult) and not taken.run_requests
    assert "nodes" in json.loads(taken.cursor)


def test_unreadable_clickhouse_skips_naming_the_table_and_keeps_the_cursor(
    tmp_path, clickhouse, clickhouse_env
) -> None:
    client, db = clickhouse
    make_tables(client, db)
    pf = pipeline_file(tmp_path, db)
    sensor = backfill_sensor(pf)
    embedded = {"clickhouse_source.path": clickhouse_env["STREAMLING__CLICKHOUSE_SOURCE__PATH"]}
    cursor = tick(sensor, None, **embedded).cursor

    port = free_port()
    context = dg.build_sensor_context(
        cursor=cursor,
        resources={
            "streamling": StreamlingResource(
                overrides={
                    "clickhouse_source.url": f"http://127.0.0.1:{port}",
                    "clickhouse_source.password": "s3cret-pw",
                    "clickhouse_source.connect_timeout_sec": "2",
                }
            )
        },
    )
    down = sensor(context)
    assert isinstance(down, dg.SkipReason)
    prefix = f"cannot check clickhouse {db}.trades (cursor kept): cannot connect to http://127.0.0.1:{port}: "
    assert down.skip_message.startswith(prefix), down.skip_message
    assert "s3cret-pw" not in down.skip_message and "\n" not in down.skip_message
    assert context.cursor == cursor

    client.command(f"DROP TABLE {db}.trades")
    missing = tick(sensor, cursor, **embedded)
    assert isinstance(missing, dg.SkipReason)
    assert missing.skip_message == (
        f"cannot check clickhouse {db}.trades (cursor kept): table {db}.trades does not exist"
    )


def test_sensor_definition_targets_the_backfill_job_and_starts_stopped(tmp_path, clickhouse) -> None:
    from streamling_dagster import build_definitions

    _, db = clickhouse
    pf = pipeline_file(tmp_path, db)
    sensor = backfill_sensor(pf)
    assert (sensor.name, sensor.job_name, sensor.minimum_interval_seconds) == (
        "trades__backfill_sensor",
        "trades__backfill",
        60,
    )
    assert sensor.default_status == dg.DefaultSensorStatus.STOPPED
    assert "first evaluation requests a run" in (sensor.description or "")
    # wired next to the job build_definitions makes (as definitions.py would), the job resolves
    defs = build_definitions(tmp_path)
    job = next(j for j in defs.jobs or [] if j.name == "trades__backfill")
    wired = dg.Definitions(
        assets=defs.assets,
        jobs=[job],
        sensors=[backfill_sensor(pf, job, default_status=dg.DefaultSensorStatus.RUNNING)],
        resources=defs.resources,
    )
    repo = wired.get_repository_def()
    assert repo.get_sensor_def("trades__backfill_sensor").job_name == "trades__backfill"
    assert repo.get_sensor_def("trades__backfill_sensor").default_status == dg.DefaultSensorStatus.RUNNING
    assert "starts stopped" not in (repo.get_sensor_def("trades__backfill_sensor").description or "")


EMBEDDED_RELEASE = """
import json, sys
from pathlib import Path
import clickhouse_connect, dagster as dg
from streamling_dagster.backfill_sensor import backfill_sensor
from streamling_dagster.pipelines import discover
from streamling_dagster.resources import StreamlingResource

directory, data = Path(sys.argv[1]), sys.argv[2]
engine = clickhouse_connect.get_client(dsn=f"chdb://{data}")
engine.command("CREATE TABLE default.trades (ts DateTime, id UInt32) ENGINE = MergeTree ORDER BY ts")
engine.command("INSERT INTO default.trades VALUES ('2024-01-01 00:00:00', 1)")
engine.close()
(pf,) = discover(directory)
resource = StreamlingResource(overrides={"clickhouse_source.path": data})
result = backfill_sensor(pf)(dg.build_sensor_context(resources={"streamling": resource}))
print(json.dumps(json.loads(result.cursor)["tables"]))
"""


def test_the_embedded_engine_is_released_after_a_tick(tmp_path) -> None:
    """chdb lets one process hold a data directory: a sensor in the code-location server must not keep it, or
    the backfill run it requests (another process) could not open it."""
    data = tmp_path / "data"
    data.mkdir()
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "trades.yaml").write_text(
        "sources:\n  t: {type: clickhouse, table_name: trades, primary_key: id}\nsinks:\n  o: {type: blackhole, from: t}\n"
    )
    script = tmp_path / "tick.py"
    script.write_text(EMBEDDED_RELEASE + "import subprocess\n" + _OTHER_PROCESS)
    done = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "p"), str(data)], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.strip().splitlines()
    assert lines[-2:] == ['{"default.trades max(ts)": "2024-01-01 00:00:00"}', "other process read 1 rows"]


_OTHER_PROCESS = """
other = subprocess.run(
    [sys.executable, "-c", "import clickhouse_connect, sys; c = clickhouse_connect.get_client(dsn='chdb://' + sys.argv[1]);"
     " print('other process read', c.query('SELECT count() FROM default.trades').result_rows[0][0], 'rows')", data],
    capture_output=True, text=True,
)
print(other.stdout.strip() or other.stderr.strip().splitlines()[-1])
"""
