"""Streaming jobs in process against real services: backfill-then-stream in one run, observations while it
runs, a graceful stop on interrupt that ends the run CANCELED, and the stream-health checks afterwards."""

from __future__ import annotations

import _thread
import threading
import time
import uuid

import dagster as dg

from streamling import source_status
from streamling_dagster import build_definitions
from streamling_dagster.pipelines import discover
from streamling_dagster.resources import StreamlingResource
from tests.integration.test_dagster import SessionSpark, write
from tests.integration.test_hybrid import SCHEMA, rows, transfers


def resources(tmp_path) -> dict[str, object]:
    streamling = StreamlingResource(
        overrides={
            "state_backend.sqlite.database_path": str(tmp_path / "state.db"),
            "spark.checkpoint_root": str(tmp_path / "checkpoints"),
            "checkpoint_interval_sec": "300ms",
            "clickhouse_source.page_size": "40",
        }
    )
    return {"streamling": streamling, "spark": SessionSpark(spark_config={"spark.master": "local[2]"})}


def wait_for(condition, timeout: float = 120) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline and not condition():
        time.sleep(0.2)


def ticking(tmp_path, name: str, rows_per_second: int) -> None:
    """A stream that never ends: generated rows into a blackhole, source named like the pipeline."""
    source = f"{{type: generator, rows_per_second: {rows_per_second}, primary_key: id}}"
    write(tmp_path, f"{name}.yaml", f"sources:\n  {name}: {source}\nsinks:\n  out: {{type: blackhole, from: {name}}}\n")


def run_interrupted(
    job: dg.JobDefinition, instance: dg.DagsterInstance, resources: dict, op: str, observe_every: float, condition
):  # type: ignore[no-untyped-def]
    """Run `job` in process, observing every `observe_every` seconds, and interrupt it like SIGINT to a run worker
    (the main thread, running the op) once `condition()` returns. Gives the result and the run."""

    def watch() -> None:
        condition()
        _thread.interrupt_main()

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    result = job.execute_in_process(
        instance=instance,
        resources=resources,
        run_config={"ops": {op: {"config": {"observe_interval_sec": observe_every}}}},
        raise_on_error=False,
    )
    watcher.join(5)
    run = instance.get_run_by_id(result.run_id)
    assert run is not None
    return result, run


def test_backfill_then_stream_in_one_run_stops_gracefully_and_ends_canceled(
    tmp_path, spark, clickhouse, clickhouse_env, kafka, postgres_env, pg_connect, monkeypatch
) -> None:
    client, database = clickhouse
    transfers(client, database, "recent", range(1, 101))
    topic = kafka.topic("dagster_stream")
    kafka.register(topic, SCHEMA)
    schema = f"ds_{uuid.uuid4().hex[:8]}"
    for key, value in {**clickhouse_env, **kafka.env, **postgres_env}.items():
        monkeypatch.setenv(key, value)
    write(
        tmp_path,
        "pay.yaml",
        f"""
        sources:
          transfers:
            type: hybrid
            primary_key: id
            bounded_sources: [{{source_type: clickhouse, table_name: {database}.recent}}]
            unbounded_source: {{source_type: kafka, topic: {topic}, start_at: latest}}
        sinks:
          out: {{type: postgres, from: transfers, schema: {schema}, table: transfers}}
        orchestration: {{stream_max_lag: 3}}
        """,
    )
    defs = build_definitions(tmp_path)
    job = defs.resolve_job_def("pay__backfill_then_stream")

    def backfilled_then_streamed() -> bool:
        wait_for(lambda: len(rows(pg_connect, schema)) >= 100)
        kafka.produce_avro(topic, SCHEMA, [{"id": i, "who": "k", "amount": 1.0} for i in range(2001, 2021)])
        wait_for(lambda: len(rows(pg_connect, schema)) >= 120)
        time.sleep(2.5)  # at least one more observation interval
        return True

    instance = dg.DagsterInstance.ephemeral()
    result, run = run_interrupted(
        job, instance, resources(tmp_path), "backfill_then_stream_pay", 1.0, backfilled_then_streamed
    )
    assert run.status == dg.DagsterRunStatus.CANCELED
    assert run.tags["streamling/stopped_by"] == "signal"
    types = [e.event_type for e in result.all_events]
    assert dg.DagsterEventType.STEP_FAILURE not in types  # a stop is a normal end: no red step, no traceback
    assert dg.DagsterEventType.STEP_SUCCESS in types
    assert sorted(r[0] for r in rows(pg_connect, schema)) == list(range(1, 101)) + list(range(2001, 2021))

    (materialized,) = result.get_asset_materialization_events()
    assert materialized.asset_key.path[::2] == ["postgres", schema] and materialized.asset_key.path[-1] == "transfers"
    assert materialized.materialization.metadata["rows_written"].value == 100
    observed = [e.event_specific_data.asset_observation for e in result.all_events if e.is_asset_observation]
    last = observed[-1].metadata
    assert sum(last["committed_positions"].value["transfers"][topic].values()) == 20  # the final one, by topic
    assert last["backlog_total"].value == 0
    assert last["stream_rows_written"].value == 20  # by the stream phase; the backfill wrote the 100
    logs = [e.message for e in instance.all_logs(result.run_id) if e.user_message]
    assert any("Backfill done; streaming from the committed positions" in m for m in logs)
    assert any("rows/s since the run started) | sources transfers: epoch" in m for m in logs)

    # after the stop: positions committed, and 5 records waiting exceed the lag limit of 3
    (pf,) = discover(tmp_path)
    settings = resources(tmp_path)["streamling"].pipeline_settings(pf)  # type: ignore[attr-defined]
    assert sum(source_status(pf.path, settings)["transfers"].position.values()) == 20
    kafka.produce_avro(topic, SCHEMA, [{"id": i, "who": "k", "amount": 1.0} for i in range(3001, 3006)])
    sensor = next(s for s in defs.sensors or [] if s.name == "streamling_committed_positions")
    tick = sensor(dg.build_sensor_context(resources={"streamling": resources(tmp_path)["streamling"]}))
    by_check = {e.check_name: e for e in tick.asset_events if isinstance(e, dg.AssetCheckEvaluation)}
    assert not by_check["stream_lag"].passed
    assert by_check["stream_lag"].description == "5 records wait after the committed positions (limit 3)"
    assert by_check["stream_freshness"].passed  # the last commit is seconds old
    (observation,) = [e for e in tick.asset_events if isinstance(e, dg.AssetObservation)]
    assert observation.metadata["backlog_total"].value == 5


def test_a_stream_whose_pipeline_another_process_holds_ends_with_a_clear_message(tmp_path) -> None:
    """The engine's run lease held by another live holder (here a lease taken in this process, renewed by its
    heartbeat, as a `streamling run` of the same pipeline would): the op ends with a Failure saying so, not a
    traceback of the engine's error, and the holder keeps its lease."""
    from streamling.runtime.lease import RunLease
    from streamling.state.sqlite import SqliteStateBackend

    write(
        tmp_path,
        "gen.yaml",
        "sources:\n  g: {type: generator, primary_key: id}\nsinks:\n  o: {type: blackhole, from: g}\n",
    )
    defs = build_definitions(tmp_path)
    extra = resources(tmp_path)
    extra["streamling"] = StreamlingResource(
        overrides={**extra["streamling"].overrides, "state_backend.lease_ttl_sec": "3"}  # type: ignore[attr-defined]
    )
    holder = RunLease(SqliteStateBackend("local_app_v1.gen", str(tmp_path / "state.db")), "gen", None, 3.0, "cli")
    assert holder.acquire(threading.Event())
    try:
        result = defs.resolve_job_def("gen__stream").execute_in_process(
            instance=dg.DagsterInstance.ephemeral(), resources=extra, raise_on_error=False
        )
    finally:
        holder.release()
    assert not result.success
    (failure,) = [e for e in result.all_events if e.is_step_failure]
    described = failure.step_failure_data.user_failure_data.description
    assert described.startswith("pipeline 'gen' is already running (pid ")
    assert "outside this Dagster instance (a `streamling run`, or another DAGSTER_HOME); this gen__stream run was" in (
        described
    )


def test_a_stream_run_links_the_pipeline_page_and_the_page_serves_while_it_runs(tmp_path, spark) -> None:
    import httpx

    from tests.net import ADMIN_HEADERS, ADMIN_TOKEN, free_port

    port = free_port()
    ticking(tmp_path, "ticks", rows_per_second=200)
    defs = build_definitions(tmp_path)
    extra = resources(tmp_path)
    overrides = {**extra["streamling"].overrides, "admin_api_port": str(port), "admin_api_token": ADMIN_TOKEN}  # type: ignore[attr-defined]
    extra["streamling"] = StreamlingResource(overrides=overrides)
    seen: dict[str, object] = {}

    def page_shows_rows() -> bool:
        def rows() -> bool:
            try:
                doc = httpx.get(f"http://127.0.0.1:{port}/api/topology", timeout=2, headers=ADMIN_HEADERS).json()
            except httpx.HTTPError:
                return False
            seen["topology"] = doc
            return doc["nodes"][0]["rows_total"] > 0

        wait_for(rows)
        time.sleep(1.5)  # past the first observation, yielded once the first epoch committed
        return True

    instance = dg.DagsterInstance.ephemeral()
    result, run = run_interrupted(
        defs.resolve_job_def("ticks__stream"), instance, extra, "stream_ticks", 1.0, page_shows_rows
    )
    assert run.status == dg.DagsterRunStatus.CANCELED
    page = f"http://127.0.0.1:{port}/"
    assert run.tags["streamling/admin_page"] == page
    assert seen["topology"]["pipeline"] == "ticks"  # type: ignore[index]
    observed = [e.event_specific_data.asset_observation for e in result.all_events if e.is_asset_observation]
    assert observed and all(o.metadata["admin_page"].value == page for o in observed)
    logs = [e.message for e in instance.all_logs(result.run_id) if e.user_message]
    assert f"Pipeline page (live rows, rows/s per node): {page}" in logs


def test_an_interrupt_never_meets_a_yield_while_the_stream_runs(tmp_path, spark, monkeypatch) -> None:
    """Observations every tick (every 0.5 s), interrupted once several are stored. After a yield Dagster holds an
    interrupt that arrives while it handles the event and raises it outside the op, where no graceful stop can run
    (a bare signal then ends the run FAILURE). So the op must yield nothing while the engine runs: what it yields
    is recorded here with the time, and observations must reach the run's event log while it runs."""
    import streamling_dagster.jobs as jobs

    ticking(tmp_path, "beat", rows_per_second=100)
    yielded: list[float] = []
    real = jobs.run_engine

    def recording(*args, **kwargs):  # type: ignore[no-untyped-def]
        gen = real(*args, **kwargs)
        try:
            while True:
                item = next(gen)
                yielded.append(time.monotonic())
                yield item
        except StopIteration as stop:
            return stop.value

    monkeypatch.setattr(jobs, "run_engine", recording)
    defs = build_definitions(tmp_path)
    instance = dg.DagsterInstance.ephemeral()
    interrupted: list[float] = []

    def stored_while_running() -> bool:
        def observed() -> int:
            (run,) = instance.get_runs(limit=1) or [None]
            if run is None:
                return 0
            records = instance.get_records_for_run(run.run_id, of_type=dg.DagsterEventType.ASSET_OBSERVATION)
            return len(records.records)

        wait_for(lambda: observed() >= 3)
        interrupted.append(time.monotonic())
        return True

    result, run = run_interrupted(
        defs.resolve_job_def("beat__stream"), instance, resources(tmp_path), "stream_beat", 0.1, stored_while_running
    )
    assert run.status == dg.DagsterRunStatus.CANCELED
    assert run.tags["streamling/stopped_by"] == "signal"
    types = [e.event_type for e in result.all_events]
    assert dg.DagsterEventType.STEP_FAILURE not in types
    assert interrupted and yielded and min(yielded) > interrupted[0]  # only the final observation, after the stop
    stored = instance.get_records_for_run(result.run_id, of_type=dg.DagsterEventType.ASSET_OBSERVATION).records
    assert len(stored) >= 4  # three or more while running, then the final one
    observed = [e for e in result.all_events if e.is_asset_observation]
    assert len(observed) == len(stored)  # and the run's own event stream has each once
