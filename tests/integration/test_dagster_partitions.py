"""Backfills that can be redone, through Dagster's Python API on a real instance (sqlite storage in tmp_path):
ranges of a real ClickHouse table (chdb) written to a real Postgres, reprocessing after an edit, partition
status, and a terminated backfill whose resume reports the whole total."""

from __future__ import annotations

import os
import signal
import textwrap
import threading
import time
import uuid

import dagster as dg
import pytest

from streamling_dagster import build_definitions
from streamling_dagster.backfill import REPROCESS_TAG
from streamling_dagster.pipelines import discover
from streamling_dagster.resources import StreamlingResource
from tests.integration.test_clickhouse_source import make_table
from tests.integration.test_dagster import SessionSpark

pytestmark = pytest.mark.integration

RANGED = """
sources:
  ch: {{type: clickhouse, table_name: {database}.events, columns: "block, idx, amount", primary_key: "block, idx"}}
transforms:
  t:
    type: sql
    primary_key: block, idx
    sql: SELECT block, idx, amount * {factor} AS amount FROM ch WHERE idx < 20
sinks:
  out: {{type: postgres, from: t, schema: {schema}, table: events}}
{orchestration}
"""


@pytest.fixture
def env(monkeypatch, postgres_env, clickhouse_env):
    for key, value in {**postgres_env, **clickhouse_env}.items():
        monkeypatch.setenv(key, value)


def resources(tmp_path) -> dict:
    streamling = StreamlingResource(
        overrides={
            "state_backend.sqlite.database_path": str(tmp_path / "state.db"),
            "spark.checkpoint_root": str(tmp_path / "checkpoints"),
            "checkpoint_interval_sec": "200ms",
            "clickhouse_source.page_size": "500",
        }
    )
    return {"streamling": streamling, "spark": SessionSpark(spark_config={"spark.master": "local[2]"})}


def run_assets(directory) -> list[dg.AssetsDefinition]:
    defs = build_definitions(directory)
    return [a for a in defs.assets or [] if isinstance(a, dg.AssetsDefinition)]


def write(directory, text: str) -> None:
    (directory / "ranged.yaml").write_text(textwrap.dedent(text))


def sink_rows(pg_connect, schema: str) -> dict[tuple[int, int], float]:
    with pg_connect() as conn:
        return {(b, i): a for b, i, a in conn.execute(f'SELECT block, idx, amount FROM "{schema}".events')}


def test_a_range_backfill_writes_its_range_and_a_rerun_after_an_edit_reapplies_it(
    tmp_path, spark, env, clickhouse, pg_connect
) -> None:
    client, database = clickhouse
    make_table(client, database)
    schema = f"p_{uuid.uuid4().hex[:8]}"
    plan = "orchestration:\n  backfill_partitions: {column: block, start: 0, end: 1100, step: 550}"
    directory = tmp_path / "pipelines"
    directory.mkdir()
    write(directory, RANGED.format(database=database, factor=1, schema=schema, orchestration=plan))
    (assets,) = run_assets(directory)
    assert assets.partitions_def.get_partition_keys() == ["0-550", "550-1100"]
    expected = {
        (b, i): a
        for b, i, a in client.query(
            f"SELECT block, idx, amount FROM {database}.events WHERE block >= 550 AND block < 1100 AND idx < 20"
        ).result_rows
    }
    assert len(expected) == 150 + 100 * 20
    with dg.instance_for_test() as instance:
        first = dg.materialize([assets], partition_key="550-1100", instance=instance, resources=resources(tmp_path))
        assert first.success
        assert sink_rows(pg_connect, schema) == expected  # exactly the range
        (event,) = first.get_asset_materialization_events()
        assert event.materialization.metadata["rows_written"].value == len(expected)
        key = event.asset_key
        assert key.path[0] == "postgres" and key.path[-2:] == [schema, "events"]
        assert instance.get_materialized_partitions(key) == {"550-1100"}

        # the SQL changes; running the same range again reads it from its start and re-applies the rows
        write(directory, RANGED.format(database=database, factor=3, schema=schema, orchestration=plan))
        (assets,) = run_assets(directory)
        again = dg.materialize([assets], partition_key="550-1100", instance=instance, resources=resources(tmp_path))
        assert again.success
        assert sink_rows(pg_connect, schema) == {k: a * 3 for k, a in expected.items()}
        (event,) = again.get_asset_materialization_events()
        assert event.materialization.metadata["rows_written"].value == len(expected)

        # a re-execution of a run (Dagster's parent run tag) resumes: this range has nothing left
        resumed = dg.materialize(
            [assets],
            partition_key="550-1100",
            instance=instance,
            resources=resources(tmp_path),
            tags={"dagster/parent_run_id": again.run_id},
        )
        # nothing new: no materialization, so the range keeps the re-run's as its latest (not `rows_written 0`)
        assert resumed.success and resumed.get_asset_materialization_events() == []
        latest = instance.get_latest_materialization_event(key)
        assert latest is not None and latest.run_id == again.run_id

        dg.materialize([assets], partition_key="0-550", instance=instance, resources=resources(tmp_path))
        assert instance.get_materialized_partitions(key) == {"0-550", "550-1100"}
        assert len(sink_rows(pg_connect, schema)) == 334 + 100 * 20
    with pg_connect() as conn:
        conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


def test_an_unpartitioned_backfill_resumes_unless_it_reprocesses(tmp_path, spark, env, clickhouse, pg_connect) -> None:
    client, database = clickhouse
    make_table(client, database)
    schema = f"p_{uuid.uuid4().hex[:8]}"
    directory = tmp_path / "pipelines"
    directory.mkdir()
    write(directory, RANGED.format(database=database, factor=1, schema=schema, orchestration=""))
    with dg.instance_for_test() as instance:

        def backfill(**tags: str) -> int | None:
            """The run's rows_written; None when it recorded no materialization (it found nothing new)."""
            result = dg.materialize(run_assets(directory), instance=instance, resources=resources(tmp_path), tags=tags)
            events = result.get_asset_materialization_events()
            return events[0].materialization.metadata["rows_written"].value if events else None

        total = backfill()
        assert total == 334 + 100 * 20
        write(directory, RANGED.format(database=database, factor=2, schema=schema, orchestration=""))
        assert backfill() is None  # a plain run resumes after the committed positions: nothing new, nothing recorded
        assert backfill(**{REPROCESS_TAG: "pipeline file changed"}) == total
        amounts = client.query(f"SELECT block, idx, amount * 2 FROM {database}.events WHERE idx < 20").result_rows
        assert sink_rows(pg_connect, schema) == {(b, i): a for b, i, a in amounts}
    with pg_connect() as conn:
        conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


GENERATED = """
sources:
  gen: {{type: generator, rows: 20000, record_batch_size: 400, primary_key: id}}
sinks:
  out: {{type: postgres, from: gen, schema: {schema}, table: rows}}
"""


def test_a_terminated_backfill_reports_the_whole_total_when_it_resumes(tmp_path, spark, env, pg_connect) -> None:
    """The termination is a SIGINT to this process while the run executes in it: Dagster turns it into the same
    interrupt a terminate request delivers to a run worker."""
    schema = f"p_{uuid.uuid4().hex[:8]}"
    directory = tmp_path / "pipelines"
    directory.mkdir()
    (directory / "gen.yaml").write_text(textwrap.dedent(GENERATED.format(schema=schema)))

    def written() -> int:
        with pg_connect() as conn:
            found = conn.execute("SELECT to_regclass(%s)", (f'"{schema}".rows',)).fetchone()[0]
            return conn.execute(f'SELECT count(*) FROM "{schema}".rows').fetchone()[0] if found else 0

    def interrupt_when_rows_arrive() -> None:
        deadline = time.monotonic() + 120
        while written() < 2000 and time.monotonic() < deadline:
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGINT)

    with dg.instance_for_test() as instance:
        interrupter = threading.Thread(target=interrupt_when_rows_arrive)
        interrupter.start()
        stopped = dg.materialize(
            run_assets(directory), instance=instance, resources=resources(tmp_path), raise_on_error=False
        )
        interrupter.join()
        assert not stopped.success
        assert instance.get_run_by_id(stopped.run_id).status == dg.DagsterRunStatus.CANCELED
        kinds = [e.event_type_value for e in stopped.all_events]
        assert "STEP_FAILURE" not in kinds and "RUN_FAILURE" not in kinds  # terminating is a normal end
        (stopped_check,) = stopped.get_asset_check_evaluations()
        assert stopped_check.severity == dg.AssetCheckSeverity.WARN
        assert stopped_check.description.startswith("terminated before the end (resume to complete): read ")
        (partial,) = [e for e in stopped.all_events if e.event_type_value == "ASSET_OBSERVATION"]
        metadata = partial.event_specific_data.asset_observation.metadata
        first_rows = metadata["rows_written"].value
        assert metadata["backfill_incomplete"].value is True
        assert 0 < first_rows < 20000 and metadata["backfill_rows_total"].value == first_rows
        # The run returned only once the engine stopped (the epoch in flight at the stop committed and counted):
        # the table holds exactly what it recorded.
        engine = ("streamling-gen", "streamling-commit-", "streamling-read-")  # the run's thread, committer, reader
        assert not [t.name for t in threading.enumerate() if t.name.startswith(engine)]
        assert written() == first_rows

        resumed = dg.materialize(run_assets(directory), instance=instance, resources=resources(tmp_path))
        (event,) = resumed.get_asset_materialization_events()
        done = event.materialization.metadata
        assert done["rows_written"].value == 20000 - first_rows
        assert done["backfill_rows_total"].value == 20000 and written() == 20000
        (check,) = resumed.get_asset_check_evaluations()
        assert check.passed and "source_rows_offered" in check.metadata
    with pg_connect() as conn:
        conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


HYBRID = """
sources:
  hy:
    type: hybrid
    primary_key: block, idx
    bounded_sources:
      - {{source_type: clickhouse, table_name: {database}.events}}
    unbounded_source: {{source_type: kafka, topic: {topic}, data_format: json, schema: {{block: bigint, idx: bigint}}}}
sinks:
  out: {{type: blackhole, from: hy}}
"""


def test_backfill_then_stream_evaluates_rows_reconcile_after_its_bounded_phase(
    tmp_path, spark, env, clickhouse, kafka, monkeypatch
) -> None:
    """The stream is ended by a SIGINT to this process once the check was recorded (Dagster's interrupt)."""
    from streamling_dagster.jobs import backfill_then_stream_job

    client, database = clickhouse
    rows = make_table(client, database)
    topic = kafka.topic("bts", partitions=1)
    for key, value in kafka.env.items():
        monkeypatch.setenv(key, value)
    directory = tmp_path / "pipelines"
    directory.mkdir()
    (directory / "hy.yaml").write_text(textwrap.dedent(HYBRID.format(database=database, topic=topic)))
    (pf,) = discover(directory)
    with dg.instance_for_test() as instance:

        def interrupt_once_checked() -> None:
            deadline = time.monotonic() + 180
            while time.monotonic() < deadline:
                runs = instance.get_runs()
                if runs and any(
                    e.dagster_event is not None and e.dagster_event.event_type_value == "ASSET_CHECK_EVALUATION"
                    for e in instance.all_logs(runs[0].run_id)
                ):
                    break
                time.sleep(0.2)
            os.kill(os.getpid(), signal.SIGINT)

        interrupter = threading.Thread(target=interrupt_once_checked)
        interrupter.start()
        result = backfill_then_stream_job(pf).execute_in_process(
            instance=instance, resources=resources(tmp_path), raise_on_error=False
        )
        interrupter.join()
    (check,) = result.get_asset_check_evaluations()
    assert (check.asset_key, check.check_name, check.passed) == (pf.asset_key("out"), "rows_reconcile", True)
    metadata = {k: v.value for k, v in check.metadata.items()}
    assert metadata == {"source_rows_read": rows, "sink_rows_written": rows, "rows_filtered": 0}  # nothing offered
    # is known for a ClickHouse table, so no number stands in for it


def test_partition_settings_are_validated_by_field_and_value(tmp_path) -> None:
    base = "sources:\n  g: {type: generator, rows: 10}\nsinks:\n  s: {type: blackhole, from: g}\norchestration:\n  "
    cases = {
        "steps.yaml": (
            "backfill_partitions: {start: 0, end: 100}",
            "orchestration.backfill_partitions: integer ranges need 'step'",
        ),
        "many.yaml": (
            "backfill_partitions: {start: 0, end: 1000000, step: 1}",
            "orchestration.backfill_partitions: step 1 makes 1000000 partitions, more than 10000",
        ),
        "zone.yaml": (
            "backfill_partitions: {every: day, start: 2026-01-01, timezone: Mars/Base}",
            "orchestration.backfill_partitions.timezone: timezone 'Mars/Base' is not a known time zone",
        ),
        "every.yaml": (
            "backfill_partitions: {every: fortnight, start: 2026-01-01}",
            "orchestration.backfill_partitions.every: Input should be 'hour', 'day', 'week' or 'month'",
        ),
        "mixed.yaml": (
            "backfill_partitions: {every: day, start: 5}",
            "orchestration.backfill_partitions: time windows need a date or date-time start, not 5",
        ),
        "scheduled.yaml": (
            "{backfill_schedule: '0 3 * * *', backfill_partitions: {start: 0, end: 10, step: 5}}",
            "orchestration.backfill_schedule: '0 3 * * *' cannot launch a partitioned backfill (backfill_partitions is "
            "set): launch ranges from the partition view instead",
        ),
    }
    for name, (block, _) in cases.items():
        text = base + block if not block.startswith("{") else base.removesuffix("\n  ") + " " + block
        (tmp_path / name).write_text(text + "\n")
    found = {pf.path.name: pf.errors for pf in discover(tmp_path)}
    assert found == {name: [error] for name, (_, error) in cases.items()}


def test_time_windows_and_integer_ranges_become_partitions_and_engine_ranges(tmp_path) -> None:
    from datetime import UTC, datetime
    from zoneinfo import ZoneInfo

    from streamling_dagster.partitions import BackfillPartitions

    hourly = BackfillPartitions.model_validate({"every": "hour", "start": "2026-01-01", "timezone": "Europe/Berlin"})
    definition = hourly.definition()
    assert definition.get_first_partition_key() == "2026-01-01-00:00"
    wanted = hourly.range_of(definition, "2026-01-01-05:00")
    berlin = ZoneInfo("Europe/Berlin")
    assert (wanted.start, wanted.end) == (
        datetime(2026, 1, 1, 5, tzinfo=berlin),
        datetime(2026, 1, 1, 6, tzinfo=berlin),
    )
    assert wanted.start.astimezone(UTC).hour == 4
    ranges = BackfillPartitions.model_validate({"column": "id", "start": -10, "end": 15, "step": 10})
    assert ranges.definition().get_partition_keys() == ["-10-0", "0-10", "10-15"]
    last = ranges.range_of(ranges.definition(), "10-15")
    assert (last.start, last.end, last.column) == (10, 15, "id")


def test_the_sensor_reprocesses_on_a_changed_file_and_reruns_done_ranges_when_partitioned(tmp_path) -> None:
    from streamling.config import load_settings
    from streamling_dagster.backfill_sensor import evaluate

    text = "sources:\n  g: {type: generator, rows: 10}\nsinks:\n  s: {type: blackhole, from: g}\n"
    path = tmp_path / "gen.yaml"
    path.write_text(text)
    settings = load_settings(environ={})
    (pf,) = discover(tmp_path)
    first = evaluate(pf, settings, None, "sensor")
    (plain,) = first.run_requests
    assert REPROCESS_TAG not in plain.tags  # the first run resumes
    path.write_text(text + "# edited\n")  # a comment changes nothing a run does
    quiet = evaluate(pf, settings, first.cursor, "sensor")
    assert isinstance(quiet, dg.SkipReason) and "pipeline definition unchanged" in quiet.skip_message
    path.write_text(text.replace("rows: 10", "rows: 12"))
    (changed,) = evaluate(pf, settings, first.cursor, "sensor").run_requests
    assert changed.tags[REPROCESS_TAG] == "pipeline definition changed"
    assert changed.tags["streamling/trigger"] == "pipeline definition changed: source 'g' changed"

    path.write_text(text + "orchestration:\n  backfill_partitions: {start: 0, end: 30, step: 10}\n")
    (pf,) = discover(tmp_path)
    start = evaluate(pf, settings, None, "sensor", done=[])
    assert not start.run_requests and "ranges are launched from the partition view" in start.skip_reason.skip_message
    path.write_text(path.read_text().replace("sinks:", "sinks:\n  t: {type: blackhole, from: g}"))
    again = evaluate(pf, settings, start.cursor, "sensor", done=["0-10", "20-30"])
    assert [(r.partition_key, r.tags["streamling/trigger"]) for r in again.run_requests] == [
        ("0-10", "pipeline definition changed: sink 't' added"),
        ("20-30", "pipeline definition changed: sink 't' added"),
    ]
