"""One run per pipeline, decided over a real (ephemeral) Dagster instance's run records; and the observation
metadata's shapes (Kafka positions under their topic, no placeholder -1)."""

from __future__ import annotations

import uuid

import dagster as dg

from streamling import SourceStatus
from streamling_dagster.guard import REFUSED_TAG, STREAM_TAG, stream_skip_reason
from streamling_dagster.jobs import stream_job
from streamling_dagster.keeper import keeper_sensor
from streamling_dagster.observations import named_positions, stream_health
from streamling_dagster.pipelines import discover

KAFKA = (
    "sources:\n  ticks: {type: kafka, topic: t.1, data_format: json, schema: {id: bigint}, primary_key: id}\n"
    "sinks:\n  o: {type: blackhole, from: ticks}\n"
)


def add(instance: dg.DagsterInstance, job: str, status: dg.DagsterRunStatus, **tags: str) -> dg.DagsterRun:
    run = dg.DagsterRun(job_name=job, run_id=str(uuid.uuid4()), status=status, tags=tags)
    instance.add_run(run)
    return run


def test_sensors_skip_naming_the_active_stream_and_the_keeper_ignores_refused_runs(tmp_path) -> None:
    (tmp_path / "p.yaml").write_text(KAFKA)
    (pf,) = discover(tmp_path)
    with dg.DagsterInstance.ephemeral() as instance:
        context = dg.build_sensor_context(instance=instance)
        assert stream_skip_reason(context, "p") is None
        add(instance, "p__stream", dg.DagsterRunStatus.CANCELED, **{STREAM_TAG: "p", "streamling/pipeline": "p"})
        assert stream_skip_reason(context, "p") is None  # ended runs do not count
        live = add(instance, "p__stream", dg.DagsterRunStatus.STARTED, **{STREAM_TAG: "p", "streamling/pipeline": "p"})
        refused = {STREAM_TAG: "p", "streamling/pipeline": "p", REFUSED_TAG: live.run_id}
        add(instance, "p__stream", dg.DagsterRunStatus.FAILURE, **refused)  # newest: a refused second launch
        skip = stream_skip_reason(context, "p")
        assert skip is not None
        assert skip.skip_message == (
            f"p: not requesting a run while stream run {live.run_id} (p__stream, STARTED) is active; terminate it "
            "to let this run"
        )
        assert stream_skip_reason(context, "other") is None
        decision = keeper_sensor(pf, stream_job(pf))(context)
        assert isinstance(decision, dg.SkipReason)  # not a restart after the refused run's FAILURE
        assert decision.skip_message == f"p: stream run {live.run_id} is STARTED"


def test_kafka_positions_are_named_by_topic_and_a_missing_age_is_left_out(tmp_path) -> None:
    (tmp_path / "p.yaml").write_text(KAFKA)
    (pf,) = discover(tmp_path)
    assert named_positions(pf, {"ticks": {"0": 12, "1": 3}}) == {"ticks": {"t.1": {"0": 12, "1": 3}}}
    assert named_positions(pf, {"ticks": None}) == {"ticks": None}
    never = {"ticks": SourceStatus(position=None, last_epoch=None, updated_at_ms=None, backlog={"0": 5})}
    _lag, freshness = stream_health(pf, never, now=1000.0)
    assert freshness.description.startswith("never committed; 5 records waiting")
    assert "seconds_since_commit" not in freshness.metadata  # not a -1
    assert freshness.metadata["backlog_total"].value == 5


def test_runs_opening_the_embedded_clickhouse_in_their_process_are_tagged_with_its_path(tmp_path) -> None:
    """`dagster.yaml` lets one run per `streamling/embedded_clickhouse` value out of the queue: a backfill opening the
    path is tagged, a stream only when a ClickHouse sink keeps the path open for its life (a backfill-then-stream
    releases it after its backfill); with a server url or a warm engine, nothing is tagged. The coordinator reads the
    tag from the ops in the run's plan (`planned`), as it reads the pipeline."""
    from streamling.config import load_settings
    from streamling_dagster.coordinator import planned
    from streamling_dagster.guard import EMBEDDED_TAG, op_tags
    from streamling_dagster.jobs import backfill_then_stream_job

    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "reads.yaml").write_text(
        "sources:\n  h:\n    type: hybrid\n    primary_key: id\n"
        "    bounded_sources: [{source_type: clickhouse, table_name: db.t}]\n"
        "    unbounded_source: {source_type: kafka, topic: x, data_format: json, schema: {id: bigint}}\n"
        "sinks:\n  o: {type: blackhole, from: h}\n"
    )
    (tmp_path / "p" / "writes.yaml").write_text(
        "sources:\n  g: {type: generator, primary_key: id}\nsinks:\n  c: {type: clickhouse, from: g, table: db.t}\n"
    )
    data = tmp_path / "chdb"
    embedded = load_settings(
        environ={"STREAMLING__CLICKHOUSE_SOURCE__PATH": str(data), "STREAMLING__CLICKHOUSE_SINK__PATH": str(data)}
    )
    reads, writes = discover(tmp_path / "p", embedded)
    assert (op_tags(reads).get(EMBEDDED_TAG), op_tags(reads, streaming=True).get(EMBEDDED_TAG)) == (str(data), None)
    assert (op_tags(writes).get(EMBEDDED_TAG), op_tags(writes, streaming=True).get(EMBEDDED_TAG)) == (
        str(data),
        str(data),
    )
    for other in (
        {"STREAMLING__CLICKHOUSE_SINK__URL": "http://ch:8123", "STREAMLING__CLICKHOUSE_SOURCE__URL": "http://ch:8123"},
        {"STREAMLING__ENGINE_URL": "http://127.0.0.1:1"},
    ):
        for pf in discover(tmp_path / "p", load_settings(environ=other)):
            assert EMBEDDED_TAG not in op_tags(pf) and EMBEDDED_TAG not in op_tags(pf, streaming=True)
    with dg.instance_for_test() as instance:
        run = instance.create_run_for_job(backfill_then_stream_job(writes))
        assert planned(instance, run, EMBEDDED_TAG) == [str(data)]
        assert planned(instance, run, "streamling/pipeline") == ["writes"]


def test_a_hybrid_sources_phase_is_in_the_observation_metadata(tmp_path) -> None:
    from streamling_dagster.observations import status_metadata

    (tmp_path / "h.yaml").write_text(
        "sources:\n  h:\n    type: hybrid\n    primary_key: id\n"
        "    bounded_sources: [{source_type: clickhouse, table_name: db.t}]\n"
        "    unbounded_source: {source_type: kafka, topic: x, data_format: json, schema: {id: bigint}}\n"
        "sinks:\n  o: {type: blackhole, from: h}\n"
    )
    (pf,) = discover(tmp_path)
    bounded = {"h": SourceStatus({"cursor": "5"}, 1, 1_000, None, phase=0)}
    streaming = {"h": SourceStatus({"0": 7}, 4, 2_000, {"0": 0}, phase=1)}
    assert status_metadata(pf, bounded, ["h"])["source_phase"].value == {"h": "1 of 2: clickhouse db.t (bounded)"}
    assert status_metadata(pf, streaming, ["h"])["source_phase"].value == {"h": "2 of 2: kafka x (stream)"}
    plain = {"h": SourceStatus(None, None, None, None)}
    assert "source_phase" not in status_metadata(pf, plain, ["h"])


def test_positions_in_log_lines_read_as_text_not_python_dicts() -> None:
    from streamling_dagster.observations import position_text

    assert position_text({"orders": {"0": 12, "1": 3}}) == "orders[0]=12 orders[1]=3"
    assert position_text({"cursor": "5", "phase": 1}) == "cursor=5 phase=1"
    assert position_text(None) == "the start"


def test_the_schedule_and_the_keeper_skip_a_file_broken_since_the_last_reload(tmp_path) -> None:
    """Between an edit that breaks the file and the code location's reload, the loaded definitions still offer the
    jobs; a tick then skips, naming the problem, instead of requesting a run that fails to start."""
    from streamling_dagster.guard import backfill_schedule

    text = (
        "sources:\n  g: {type: generator, primary_key: id}\nsinks:\n  o: {type: blackhole, from: g}\n"
        "orchestration: {backfill_schedule: '0 3 * * *'}\n"
    )
    (tmp_path / "p.yaml").write_text(text.replace("primary_key: id", "rows: 5, primary_key: id"))
    (bounded,) = discover(tmp_path)
    schedule = backfill_schedule(bounded, stream_job(bounded))
    with dg.DagsterInstance.ephemeral() as instance:
        context = dg.build_schedule_context(instance=instance)
        assert isinstance(schedule.evaluate_tick(context).run_requests[0], dg.RunRequest)
        (tmp_path / "p.yaml").write_text(text.replace("from: g", "from: nowhere"))
        (skip,) = schedule.evaluate_tick(context).skip_message.splitlines()
        assert skip.startswith(f"p: {tmp_path / 'p.yaml'} is invalid now (fix it, then reload the code location): ")
        assert "'nowhere'" in skip
        (tmp_path / "p.yaml").write_text(text)
        (streaming,) = discover(tmp_path)
        (tmp_path / "p.yaml").write_text(text.replace("from: g", "from: nowhere"))
        keeper = keeper_sensor(streaming, stream_job(streaming))(dg.build_sensor_context(instance=instance))
        assert isinstance(keeper, dg.SkipReason) and "is invalid now" in (keeper.skip_message or "")


def test_a_pipelines_pool_is_limited_from_the_first_queue_pass_that_meets_it() -> None:
    """Two runs of one pipeline queued together (a scheduled backfill and a launched stream, in the same second):
    the queue daemon's first pass over a new pool must not let both out. Dagster reads the pools that have a limit
    before it gives a new one its default, so the coordinator sets the pool up when the run is submitted. The pass
    is Dagster's own counter, built as its daemon builds it."""
    from dagster._core.instance.config import PoolGranularity
    from dagster._core.op_concurrency_limits_counter import GlobalOpConcurrencyLimitsCounter
    from dagster._core.storage.dagster_run import RunOpConcurrency

    from streamling_dagster.coordinator import known_pools

    pool = "streamling/p"
    overrides = {"concurrency": {"pools": {"default_limit": 1, "granularity": "run"}}}
    with dg.instance_for_test(overrides=overrides) as instance:
        runs = []
        for job in ("p__backfill", "p__stream"):
            concurrency = RunOpConcurrency(
                root_key_counts={pool: 1}, has_unconstrained_root_nodes=False, all_pools={pool}
            )
            run = dg.DagsterRun(
                job_name=job,
                run_id=str(uuid.uuid4()),
                status=dg.DagsterRunStatus.NOT_STARTED,
                run_op_concurrency=concurrency,
            )
            instance.add_run(run)
            known_pools(instance, run)
            runs.append(run)
        storage = instance.event_log_storage
        assert pool in storage.get_concurrency_keys()
        counter = GlobalOpConcurrencyLimitsCounter(
            instance,
            runs,
            [],
            concurrency_keys=storage.get_concurrency_keys(),
            pool_limits=storage.get_pool_limits(),
            pool_granularity=PoolGranularity.RUN,
        )
        assert not counter.is_blocked(runs[0])
        counter.update_counters_with_launched_item(runs[0])
        assert counter.is_blocked(runs[1])  # waits for the first, instead of starting beside it
