"""The asset model of the Dagster control plane, from pipeline files alone (no services, no Spark): assets keyed by
the topics and tables they are, lineage across pipelines, only the jobs a pipeline can use, the translator, and
invalid files shown on the overview."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import dagster as dg
import pytest

from streamling.config import load_settings
from streamling_dagster import (
    StreamlingObject,
    StreamlingResource,
    StreamlingSparkResource,
    StreamlingTranslator,
    build_definitions,
    pipeline_definitions,
)
from streamling_dagster.definitions import FILES_SENSOR
from streamling_dagster.factory import VALIDITY_CHECK

WRITER = """
sources:
  orders: {type: generator, rows: 1000, primary_key: id}
sinks:
  to_topic: {type: kafka, from: orders, topic: shop.orders}
  to_table: {type: clickhouse, from: orders, table: orders_history}
"""
HYBRID = """
sources:
  orders:
    type: hybrid
    bounded_sources: [{source_type: clickhouse, table_name: orders_history}]
    unbounded_source: {source_type: kafka, topic: shop.orders, start_at: earliest}
transforms:
  big:
    type: sql
    primary_key: id
    sql: SELECT * FROM orders WHERE amount > 100
sinks:
  latest: {type: postgres, from: big, schema: shop, table: orders}
"""
READER = """
sources:
  events: {type: kafka, topic: audit.events}
sinks:
  out: {type: print, from: events}
"""
OTHER_READER = """
sources:
  same: {type: kafka, topic: audit.events}
sinks:
  also: {type: postgres, from: same, schema: shop, table: orders}
"""


def write(directory: Path, **files: str) -> Path:
    for name, text in files.items():
        (directory / f"{name}.yaml").write_text(textwrap.dedent(text))
    return directory


def key(text: str) -> dg.AssetKey:
    return dg.AssetKey.from_user_string(text)


def test_a_topic_written_by_one_pipeline_and_read_by_another_is_one_asset(tmp_path: Path) -> None:
    defs = build_definitions(write(tmp_path, writer=WRITER, hybrid=HYBRID))
    graph = defs.resolve_asset_graph()
    topic, table = key("kafka/shop.orders"), key("clickhouse/default/orders_history")
    target = key("postgres/default/shop/orders")
    # the writer produces the topic and the table (materialized by its backfill) ...
    for produced in (topic, table):
        node = graph.get(produced)
        assert node.is_materializable and node.group_name == "writer"
        assert node.parent_keys == {key("writer/orders")}
    # ... and the hybrid reads both: its transform depends on them, its sink on the transform
    assert graph.get(key("hybrid/big")).parent_keys == {topic, table}
    assert graph.get(target).parent_keys == {key("hybrid/big")}
    assert graph.get(target).is_materializable  # the hybrid's bounded phases backfill it
    assert graph.get(target).metadata["streamling/jobs"].value == (
        "- [hybrid__backfill](/guess/hybrid__backfill): the backfill\n"
        "- [hybrid__stream](/guess/hybrid__stream): the stream\n"
        "- [hybrid__backfill_then_stream](/guess/hybrid__backfill_then_stream): backfill, then stream"
    )


def test_only_the_jobs_a_pipeline_can_use_are_built(tmp_path: Path) -> None:
    defs = build_definitions(write(tmp_path, writer=WRITER, hybrid=HYBRID, reader=READER))
    assert sorted(j.name for j in defs.jobs or []) == [
        "hybrid__backfill",
        "hybrid__backfill_then_stream",
        "hybrid__stream",
        "reader__stream",
        "writer__backfill",
    ]
    assert sorted(s.name for s in defs.sensors or []) == [
        "hybrid__backfill_sensor",
        "hybrid__stream_keeper",
        "reader__stream_keeper",
        "streamling_committed_positions",
        FILES_SENSOR,
        "writer__backfill_sensor",
    ]
    # a stream-only sink cannot be materialized (nothing bounded to run); it is observed
    out = defs.resolve_asset_graph().get(key("reader/out"))
    assert (out.is_materializable, out.is_observable) == (False, True)


def test_an_input_read_by_two_pipelines_is_one_shared_asset(tmp_path: Path) -> None:
    defs = build_definitions(write(tmp_path, reader=READER, other=OTHER_READER))
    graph = defs.resolve_asset_graph()
    topic = graph.get(key("kafka/audit.events"))
    assert topic.group_name == "kafka"
    assert topic.metadata["streamling/read_by"] == "other, reader"
    assert "Read by other (source 'same'), reader (source 'events')." in (topic.description or "")
    assert graph.get(key("reader/out")).parent_keys == {key("kafka/audit.events")}


def test_two_pipelines_writing_one_table_both_load(tmp_path: Path) -> None:
    """One asset has one producer in Dagster: the second writer keeps its pipeline-scoped key."""
    defs = build_definitions(write(tmp_path, hybrid=HYBRID, other=OTHER_READER))
    keys = {k.to_user_string() for k in defs.resolve_asset_graph().get_all_asset_keys()}
    assert {"postgres/default/shop/orders", "other/also"} <= keys


class Conventions(StreamlingTranslator):
    """A deployment's own names: a prefix for every key, its team as owner, a tier tag."""

    def get_asset_key(self, obj: StreamlingObject) -> dg.AssetKey:
        return super().get_asset_key(obj).with_prefix("lake")

    def get_group_name(self, obj: StreamlingObject) -> str:
        return f"streams_{obj.pipeline.name}"

    def get_owners(self, obj: StreamlingObject) -> list[str]:
        return ["team:data"]

    def get_tags(self, obj: StreamlingObject) -> dict[str, str]:
        return {"tier": "gold" if obj.role == "output" else "raw"}


def test_a_translator_maps_every_key_group_owner_and_tag(tmp_path: Path) -> None:
    defs = build_definitions(write(tmp_path, reader=READER, hybrid=HYBRID), translator=Conventions())
    graph = defs.resolve_asset_graph()
    sink = graph.get(key("lake/postgres/default/shop/orders"))
    assert sink.group_name == "streams_hybrid"
    assert sink.owners == ["team:data"]
    assert sink.tags["tier"] == "gold"
    assert graph.get(key("lake/hybrid/big")).parent_keys == {
        key("lake/kafka/shop.orders"),
        key("lake/clickhouse/default/orders_history"),
    }
    # the checks, jobs and observations use the translated keys too
    checks = {c.asset_key for c in graph.asset_check_keys}
    assert key("lake/postgres/default/shop/orders") in checks
    assert key("lake/reader/out") in checks


def test_one_file_as_definitions_for_a_project_of_ones_own(tmp_path: Path) -> None:
    write(tmp_path, hybrid=HYBRID)
    defs = pipeline_definitions(tmp_path / "hybrid.yaml")
    assert sorted(j.name for j in defs.jobs or []) == [
        "hybrid__backfill",
        "hybrid__backfill_then_stream",
        "hybrid__stream",
    ]
    assert "hybrid__committed_positions" in {s.name for s in defs.sensors or []}
    keys = {k.to_user_string() for k in defs.resolve_asset_graph().get_all_asset_keys()}
    assert {"kafka/shop.orders", "clickhouse/default/orders_history", "postgres/default/shop/orders"} <= keys
    bare = pipeline_definitions(tmp_path / "hybrid.yaml", define_inputs=False)
    topic = bare.resolve_asset_graph().get(key("kafka/shop.orders"))
    assert topic.is_external and not topic.is_observable  # only a dependency: another definition produces it


def test_invalid_files_show_as_failing_checks_and_failing_ticks(tmp_path: Path) -> None:
    write(tmp_path, reader=READER, broken="sources:\n  a: {type: generator}\nsinks:\n  b: {type: print, from: c}\n")
    defs = build_definitions(tmp_path)
    sensor = next(s for s in defs.sensors or [] if s.name == FILES_SENSOR)
    result = sensor(dg.build_sensor_context())
    (event,) = result.asset_events
    expected = f"{tmp_path / 'broken.yaml'}:4: sink 'b': 'from' references unknown node 'c'"
    assert (event.asset_key, event.check_name, event.passed) == (key("broken/pipeline"), VALIDITY_CHECK, False)
    assert event.description == expected
    # unchanged: quiet
    assert isinstance(sensor(dg.build_sensor_context(cursor=result.cursor)), dg.SkipReason)
    # a file that was valid when the location loaded and is broken now fails the tick, naming file and line
    (tmp_path / "reader.yaml").write_text(
        "sources:\n  events: {type: kafka}\nsinks:\n  out: {type: print, from: events}\n"
    )
    with pytest.raises(dg.DagsterInvariantViolationError) as failed:
        sensor(dg.build_sensor_context(cursor=result.cursor))
    assert f"{tmp_path / 'reader.yaml'}:2: source 'events'" in str(failed.value)


def test_importing_the_package_builds_nothing(tmp_path: Path) -> None:
    """`defs` is built when Dagster asks: importing with a pipelines directory that does not exist succeeds."""
    code = "import streamling_dagster, dagster as dg; print(type(streamling_dagster.defs).__name__)"
    env = {"STREAMLING_DAGSTER_PIPELINES": str(tmp_path / "missing"), "PATH": "/usr/bin:/bin"}
    import os

    env["PYTHONPATH"] = os.environ.get("PYTHONPATH", "")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "LazyDefinitions"


def test_observing_a_stream_only_sink_reads_where_the_stream_stands(tmp_path: Path, monkeypatch) -> None:
    """*Observe* on a stream-only sink: the committed positions and last epoch from a real (sqlite) state backend,
    with no Spark and no broker (a generator without `rows` streams; its backlog is unknown)."""
    from streamling.state.sqlite import SqliteStateBackend

    write(
        tmp_path,
        feed="sources:\n  gen: {type: generator, rows_per_second: 10}\nsinks:\n  out: {type: blackhole, from: gen}\n",
    )
    db = tmp_path / "state.db"
    monkeypatch.setenv("STREAMLING__STATE_BACKEND__SQLITE__DATABASE_PATH", str(db))
    defs = build_definitions(tmp_path)
    with SqliteStateBackend("local_app_v1.feed", str(db)) as state:
        state.put_many(
            {"gen:generator": {"offset": 420}, "gen:__epoch__": {"epoch": 7, "updated_at": 1_700_000_000_000}}
        )
    job = defs.resolve_implicit_global_asset_job_def()
    result = job.execute_in_process(asset_selection=[key("feed/out")])  # what *Observe* on the asset page runs
    assert result.success
    (event,) = [e.event_specific_data.asset_observation for e in result.all_events if e.is_asset_observation]
    assert event.asset_key == key("feed/out")
    assert event.metadata["committed_positions"].value == {"gen": {"offset": 420}}
    assert event.metadata["last_finalized_epoch"].value == {"gen": 7}
    assert event.metadata["last_commit_at"].value == 1_700_000_000


DYNAMIC = """
sources:
  orders: {type: generator, rows: 10, primary_key: id}
transforms:
  seen:
    type: dynamic_table
    from: orders
    primary_key: id
    backend_type: Postgres
    schema: shop
    backend_entity_name: seen_orders
    sql: SELECT id FROM orders
sinks:
  archive: {type: clickhouse, from: orders, table: analytics.orders_archive}
"""


def test_asset_keys_do_not_depend_on_the_loading_processs_environment_or_checkout(tmp_path: Path, monkeypatch) -> None:
    """The same files loaded by two code servers, one with production's connection settings and one with a
    developer's (other databases, another working directory, another checkout), give the same keys; only the
    metadata says which database each environment reached."""
    project = write(tmp_path, writer=WRITER, hybrid=HYBRID, dynamic=DYNAMIC)

    def loaded(environ: dict[str, str], cwd: Path) -> tuple[set[str], dict[str, str]]:
        cwd.mkdir(exist_ok=True)
        monkeypatch.chdir(cwd)
        settings = load_settings(environ=environ)
        graph = build_definitions(project, settings=settings).resolve_asset_graph()
        keys = {k.to_user_string() for k in graph.get_all_asset_keys()}
        sink = graph.get(key("postgres/default/shop/orders"))
        return keys, {"database": sink.metadata["database"]}

    production, prod_meta = loaded(
        {
            "STREAMLING__POSTGRES_SINK__DB": "warehouse",
            "STREAMLING__DYNAMIC_TABLE_BACKEND__POSTGRES__DB": "warehouse",
            "STREAMLING__CLICKHOUSE_SINK__DATABASE": "prod",
            "STREAMLING__CLICKHOUSE_SOURCE__DATABASE": "prod",
        },
        tmp_path / "srv",
    )
    laptop, dev_meta = loaded({}, tmp_path / "home")
    assert production == laptop
    assert {
        "postgres/default/shop/orders",
        "postgres/default/shop/seen_orders",  # the dynamic table's backing table
        "clickhouse/default/orders_history",  # a bare name: the connection's database, by its logical name
        "clickhouse/analytics/orders_archive",  # a named database is the pipeline's own
        "kafka/shop.orders",
    } <= production
    assert (prod_meta, dev_meta) == ({"database": "warehouse"}, {"database": "postgres"})


class TwoWarehouses(StreamlingTranslator):
    def get_connection_name(self, obj: StreamlingObject) -> str:
        connection = obj.external.connection if obj.external is not None else None
        return "dt" if connection == "dynamic_table_backend.postgres" else "main"


def test_the_translator_names_the_connections(tmp_path: Path) -> None:
    settings = load_settings(environ={"STREAMLING__DYNAMIC_TABLE_BACKEND__POSTGRES__DB": "dt"})
    project = write(tmp_path, dynamic=DYNAMIC, hybrid=HYBRID)
    defs = build_definitions(project, translator=TwoWarehouses(), settings=settings)
    keys = {k.to_user_string() for k in defs.resolve_asset_graph().get_all_asset_keys()}
    assert {"postgres/main/shop/orders", "postgres/dt/shop/seen_orders", "clickhouse/main/orders_history"} <= keys
    assert "clickhouse/analytics/orders_archive" in keys


def test_backfill_outside_a_streamling_assets_function_names_the_op() -> None:
    """`StreamlingResource.backfill` finds its pipeline by the op's name; in any other asset it says so in one line
    (before any settings are read or Spark is started)."""

    @dg.asset
    def plain(context, streamling: StreamlingResource, spark: StreamlingSparkResource):  # type: ignore[no-untyped-def]
        yield from streamling.backfill(context, spark)

    spark = StreamlingSparkResource(spark_config={"spark.master": "local[1]"})
    with pytest.raises(dg.DagsterInvariantViolationError) as raised:
        dg.materialize([plain], resources={"streamling": StreamlingResource(), "spark": spark})
    assert str(raised.value) == (
        "Error: op 'plain': StreamlingResource.backfill runs inside a @streamling_assets function only"
    )
