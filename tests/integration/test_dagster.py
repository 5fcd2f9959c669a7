"""The Dagster control plane over real pipelines: definitions from a directory, and a backfill materialized
in process into a real Postgres."""

from __future__ import annotations

import textwrap
import uuid

import dagster as dg

from streamling_dagster import StreamlingObject, StreamlingTranslator, build_definitions, streamling_assets
from streamling_dagster.resources import StreamlingResource, StreamlingSparkResource

VALID = """
sources:
  orders: {{type: generator, rows: 3000, key_space: 500, record_batch_size: 1000, primary_key: id}}
transforms:
  large:
    type: sql
    primary_key: id
    sql: SELECT id, amount, name FROM orders WHERE amount > 100
sinks:
  totals: {{type: postgres, from: large, schema: {schema}, table: orders}}
"""
BROKEN = """
sources:
  a: {type: generator}
sinks:
  b: {type: print, from: nowhere}
"""


TOTALS = dg.AssetKey(["postgres", "default", "s", "orders"])
"""The sink's table: the logical connection `default` (whatever database the settings name), schema `s`, table
`orders`."""


class SessionSpark(StreamlingSparkResource):
    """The test session's SparkSession is shared by the whole suite, so this run must not stop it."""

    def teardown_after_execution(self, context: dg.InitResourceContext) -> None:
        pass


def write(directory, name: str, text: str) -> None:
    (directory / name).write_text(textwrap.dedent(text))


def test_definitions_show_topology_and_keep_a_broken_file_from_breaking_the_others(tmp_path) -> None:
    write(tmp_path, "orders.yaml", VALID.format(schema="s"))
    write(tmp_path, "broken.yaml", BROKEN)
    defs = build_definitions(tmp_path)
    graph = defs.resolve_asset_graph()
    keys = {k.to_user_string() for k in graph.get_all_asset_keys()}
    assert {"orders/orders", "orders/large", TOTALS.to_user_string(), "broken/pipeline"} <= keys
    assert graph.get(TOTALS).parent_keys == {dg.AssetKey(["orders", "large"])}
    assert graph.get(dg.AssetKey(["orders", "large"])).parent_keys == {dg.AssetKey(["orders", "orders"])}
    # a generator with `rows` ends: the backfill only, no stream job, keeper or backfill-then-stream
    assert sorted(j.name for j in defs.jobs) == ["orders__backfill"]
    assert sorted(s.name for s in defs.sensors) == [
        "orders__backfill_sensor",
        "streamling_committed_positions",
        "streamling_pipeline_files",
    ]
    large = graph.get(dg.AssetKey(["orders", "large"]))
    assert "SELECT id, amount, name FROM orders" in large.metadata["sql"].value
    sink = graph.get(TOTALS)
    assert "totals: {type: postgres, from: large" in sink.metadata["pipeline_yaml"].value
    check = defs.get_asset_checks_def(dg.AssetCheckKey(dg.AssetKey(["broken", "pipeline"]), "pipeline_is_valid"))
    outcome = check()  # what the UI shows when the check runs
    assert not outcome.passed
    assert outcome.description == f"{tmp_path / 'broken.yaml'}:5: sink 'b': 'from' references unknown node 'nowhere'"


def test_backfill_materializes_the_sinks_with_rows_and_positions(
    tmp_path, spark, postgres_env, pg_connect, monkeypatch
) -> None:
    schema = f"d_{uuid.uuid4().hex[:8]}"
    write(tmp_path, "orders.yaml", VALID.format(schema=schema))
    for key, value in postgres_env.items():
        monkeypatch.setenv(key, value)
    defs = build_definitions(tmp_path)
    run_assets = [a for a in defs.assets or [] if isinstance(a, dg.AssetsDefinition)]
    streamling = StreamlingResource(
        overrides={
            "state_backend.sqlite.database_path": str(tmp_path / "state.db"),
            "spark.checkpoint_root": str(tmp_path / "checkpoints"),
            "checkpoint_interval_sec": "200ms",
        }
    )
    result = dg.materialize(
        run_assets,
        resources={"streamling": streamling, "spark": SessionSpark(spark_config={"spark.master": "local[2]"})},
    )
    assert result.success
    (event,) = result.get_asset_materialization_events()
    metadata = event.materialization.metadata
    with pg_connect() as conn:
        stored = conn.execute(f'SELECT count(*) FROM "{schema}".orders').fetchone()[0]
        conn.execute(f'DROP SCHEMA "{schema}" CASCADE')
    assert event.asset_key == dg.AssetKey(["postgres", "default", schema, "orders"])
    assert metadata["rows_written"].value > stored > 0  # upserts: 3000 changes of 500 keys, filtered
    assert metadata["final_positions"].value == {"orders": {"offset": 3000}}
    assert metadata["epochs"].value == {"orders": 3}
    assert metadata["rows_per_sec"].value > 0
    ops = [metadata[op].value for op in ("inserts", "updates", "deletes", "unchanged")]
    assert sum(ops) == metadata["rows_written"].value and ops[0] > 0
    (check,) = result.get_asset_check_evaluations()
    assert (check.check_name, check.passed) == ("rows_reconcile", True)
    written = metadata["rows_written"].value
    assert {k: v.value for k, v in check.metadata.items()} == {
        "source_rows_offered": 3000,
        "source_rows_read": 3000,
        "sink_rows_written": written,
        "rows_filtered": 3000 - written,
    }
    assert check.description == f"3000 read = {written} written + {3000 - written} filtered out"


def test_reconciliation_fails_when_rows_were_lost_or_invented(tmp_path) -> None:
    from streamling import RunSummary, SourceStatus
    from streamling.runtime.executor import SourceProgress
    from streamling_dagster.backfill import reconcile
    from streamling_dagster.pipelines import discover

    write(tmp_path, "orders.yaml", VALID.format(schema="s"))
    (pf,) = discover(tmp_path)
    key = pf.asset_key("totals")
    offered = {"orders": SourceStatus({"offset": 0}, 1, 1, {"rows": 3000})}
    lost = RunSummary(sources={"orders": SourceProgress(rows_in=2990)}, sink_rows={"totals": 100})
    result = reconcile(pf, key, offered, lost)
    assert not result.passed
    assert result.description == "read 2990 rows but the sources offered 3000 when the run started"
    invented = RunSummary(sources={"orders": SourceProgress(rows_in=3000)}, sink_rows={"totals": 3001})
    assert reconcile(pf, key, offered, invented).description == "wrote 3001 rows, more than the 3000 read"


def test_orchestration_block_declares_a_backfill_schedule_and_bad_cron_is_reported(tmp_path) -> None:
    scheduled = VALID.format(schema="s") + "\norchestration:\n  backfill_schedule: '*/15 * * * *'\n"
    write(tmp_path, "orders.yaml", scheduled)
    write(tmp_path, "nightly.yaml", VALID.format(schema="s") + "\norchestration: {backfill_schedule: nope}\n")
    defs = build_definitions(tmp_path)
    (schedule,) = defs.schedules or []
    assert (schedule.name, schedule.cron_schedule, schedule.job_name) == (
        "orders__backfill_schedule",
        "*/15 * * * *",
        "orders__backfill",
    )
    check = defs.get_asset_checks_def(dg.AssetCheckKey(dg.AssetKey(["nightly", "pipeline"]), "pipeline_is_valid"))
    nightly = tmp_path / "nightly.yaml"
    assert check().description == f"{nightly}:12: orchestration.backfill_schedule: 'nope' is not a cron expression"


def test_committed_positions_are_observable_without_a_run(tmp_path) -> None:
    """The sensor reads a real (sqlite) state backend that an earlier run left behind."""
    from streamling.state.sqlite import SqliteStateBackend

    write(tmp_path, "orders.yaml", VALID.format(schema="s"))
    defs = build_definitions(tmp_path)
    sensor = next(s for s in defs.sensors or [] if s.name == "streamling_committed_positions")
    db = tmp_path / "state.db"
    with SqliteStateBackend("local_app_v1.orders", str(db)) as state:  # each pipeline has its own namespace
        state.put_many({"orders:generator": {"offset": 2000}, "orders:__epoch__": {"epoch": 2}, "other:x": {"a": 1}})
    streamling = StreamlingResource(overrides={"state_backend.sqlite.database_path": str(db)})
    first = sensor(dg.build_sensor_context(resources={"streamling": streamling}))
    (event,) = first.asset_events
    assert event.asset_key == TOTALS
    assert event.metadata["committed_positions"].value == {"orders": {"offset": 2000}}
    assert event.metadata["backlog"].value == {"orders": {"rows": 1000}}
    assert event.metadata["last_finalized_epoch"].value == {"orders": 2}
    # nothing changed: the next tick stays quiet
    again = sensor(dg.build_sensor_context(cursor=first.cursor, resources={"streamling": streamling}))
    assert isinstance(again, dg.SkipReason)


def test_unreadable_and_malformed_files_do_not_break_the_others(tmp_path) -> None:
    write(tmp_path, "orders.yaml", VALID.format(schema="s"))
    (tmp_path / "binary.yaml").write_bytes(b"sources: {a: \xff\xfe}\n")
    write(tmp_path, "deep.yaml", "sources: " + "[" * 5000 + "]" * 5000)
    write(tmp_path, "orch.yaml", VALID.format(schema="s") + "\norchestration: 5\n")
    defs = build_definitions(tmp_path)
    keys = {k.to_user_string() for k in defs.resolve_asset_graph().get_all_asset_keys()}
    assert {TOTALS.to_user_string(), "binary/pipeline", "deep/pipeline", "orch/pipeline"} <= keys

    def described(name: str) -> str:
        check = defs.get_asset_checks_def(dg.AssetCheckKey(dg.AssetKey([name, "pipeline"]), "pipeline_is_valid"))
        return check().description

    path = tmp_path / "binary.yaml"
    assert (
        described("binary")
        == f"{path}: pipeline file '{path}' is not UTF-8 text: byte 0xff at offset 13 (invalid start byte)"
    )
    assert (
        described("deep")
        == f"{tmp_path / 'deep.yaml'}:1: pipeline is not valid YAML at line 1, column 73: nested more than 64 levels deep"
    )
    assert (
        described("orch")
        == f"{tmp_path / 'orch.yaml'}:12: orchestration: Input should be a valid dictionary or instance of Orchestration"
    )


def test_streamling_assets_decorates_a_backfill_of_ones_own(
    tmp_path, spark, postgres_env, pg_connect, monkeypatch
) -> None:
    """`@streamling_assets` as `@dbt_assets`: the function is the backfill op, and its own code runs around
    `streamling.backfill(context, spark)`; keys come from the translator, the check comes with it."""

    class Prefixed(StreamlingTranslator):
        def get_asset_key(self, obj: StreamlingObject) -> dg.AssetKey:
            return super().get_asset_key(obj).with_prefix("lake")

    schema = f"d_{uuid.uuid4().hex[:8]}"
    write(tmp_path, "orders.yaml", VALID.format(schema=schema))
    for name, value in postgres_env.items():
        monkeypatch.setenv(name, value)
    seen: list[str] = []

    @streamling_assets(pipeline=tmp_path / "orders.yaml", translator=Prefixed())
    def my_orders(context, streamling: StreamlingResource, spark: StreamlingSparkResource):
        seen.append("before")
        yield from streamling.backfill(context, spark)
        seen.append("after")

    streamling = StreamlingResource(
        overrides={
            "state_backend.sqlite.database_path": str(tmp_path / "state.db"),
            "spark.checkpoint_root": str(tmp_path / "checkpoints"),
        }
    )
    result = dg.materialize(
        [my_orders],
        resources={"streamling": streamling, "spark": SessionSpark(spark_config={"spark.master": "local[2]"})},
    )
    assert result.success and seen == ["before", "after"]
    (event,) = result.get_asset_materialization_events()
    assert event.asset_key == dg.AssetKey(["lake", "postgres", "default", schema, "orders"])
    (check,) = result.get_asset_check_evaluations()
    assert (check.check_name, check.passed) == ("rows_reconcile", True)
    with pg_connect() as conn:
        stored = conn.execute(f'SELECT count(*) FROM "{schema}".orders').fetchone()[0]
        conn.execute(f'DROP SCHEMA "{schema}" CASCADE')
    assert 0 < stored <= 500 and event.materialization.metadata["rows_written"].value >= stored
