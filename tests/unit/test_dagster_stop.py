"""The Dagster op's graceful stop waits for the engine to finish, even when the interrupt lands while the op's
thread waits for the engine. `run_pipeline` is replaced by a stand-in that takes a second to stop and then
records its last epoch (a Spark run would make the timing of the interrupt a matter of luck); the interrupt is a
real SIGINT to the main thread, as Dagster's run worker gets it."""

from __future__ import annotations

import logging
import signal
import threading
import time
from pathlib import Path

import dagster as dg
import pytest

import streamling_dagster.backfill as backfill
import streamling_dagster.jobs as jobs
import streamling_dagster.streaming as streaming
from streamling import RunSummary, SourceStatus
from streamling.runtime.summary import SourceProgress
from streamling_dagster import build_definitions
from streamling_dagster.pipelines import discover
from streamling_dagster.resources import StreamlingResource, StreamlingSparkResource
from streamling_dagster.streaming import StreamConfig, run_engine


def test_an_interrupt_while_waiting_for_the_engine_returns_only_after_the_engine_stopped(
    tmp_path: Path, monkeypatch
) -> None:
    (tmp_path / "gen.yaml").write_text(
        "sources:\n  g: {type: generator, primary_key: id}\nsinks:\n  o: {type: blackhole, from: g}\n"
    )
    (pf,) = discover(tmp_path)
    settings = StreamlingResource(
        overrides={"state_backend.sqlite.database_path": str(tmp_path / "state.db")}
    ).pipeline_settings(pf)
    finished = threading.Event()

    def slow_to_stop(path, settings, session, *, stop, summary: RunSummary) -> RunSummary:  # type: ignore[no-untyped-def]
        stop.wait(30)
        time.sleep(1.0)  # the in-flight epoch commits
        summary.sink_rows["o"] = 2400
        finished.set()
        return summary

    monkeypatch.setattr(streaming, "run_pipeline", slow_to_stop)
    main = threading.main_thread().ident
    assert main is not None and threading.current_thread().ident == main
    interrupt = threading.Timer(0.7, signal.pthread_kill, args=(main, signal.SIGINT))
    context = dg.build_op_context(instance=dg.DagsterInstance.ephemeral())
    events = run_engine(context, pf, settings, object(), StreamConfig(), observe=False, clean_stop=True)
    interrupt.start()
    try:
        while True:
            next(events)
    except StopIteration as end:
        returned, engine_done = end.value, finished.is_set()
    interrupt.join()
    assert engine_done  # the op returned only once the engine had stopped
    assert returned.sink_rows == {"o": 2400}


class NoSpark(StreamlingSparkResource):
    """The stand-in engine below needs no session; this keeps the test from starting Spark."""

    @property
    def spark_session(self) -> object:
        return object()


@pytest.mark.parametrize("moment", ["while the checks are recorded", "as the engine's final line is logged"])
def test_a_stop_between_the_backfill_and_the_stream_ends_the_run_canceled_with_the_backfill_recorded(
    tmp_path: Path, monkeypatch, moment: str
) -> None:
    """The SIGINT that Dagster's termination sends lands after the bounded phase: while its check is recorded (a
    CI run caught one in the op's next log line: a step failure, and the check missing from the result), or once
    the engine had finished but before the op looked at the stop (then the backfill is whole, not cut short). The
    engine is a stand-in that ends at once, so the signal's moment is chosen, not raced."""
    (tmp_path / "gen.yaml").write_text(GENERATOR)
    (pf,) = discover(tmp_path)
    phases: list[bool] = []
    monkeypatch.setattr(streaming, "run_pipeline", bounded_stand_in(phases))
    if moment == "while the checks are recorded":
        monkeypatch.setattr(jobs, "backfill_checks", signal_first(jobs.backfill_checks))
    else:
        monkeypatch.setattr(streaming, "_final", signal_first(streaming._final))
    resources = stand_in_resources(tmp_path)
    with dg.instance_for_test() as instance:
        result = jobs.backfill_then_stream_job(pf).execute_in_process(
            instance=instance, resources=resources, raise_on_error=False
        )
        run = instance.get_run_by_id(result.run_id)
        (canceled,) = instance.all_logs(result.run_id, of_type=dg.DagsterEventType.RUN_CANCELED)
    assert run is not None and run.status == dg.DagsterRunStatus.CANCELED
    assert canceled.level == logging.INFO  # a pause on request is no error (Dagster's own report says ERROR)
    kinds = [e.event_type_value for e in result.all_events]
    assert "STEP_FAILURE" not in kinds and "RUN_FAILURE" not in kinds
    assert phases == [True]  # the backfill ran; the stream did not start
    (materialization,) = result.get_asset_materialization_events()
    assert materialization.materialization.metadata["rows_written"].value == 5
    (check,) = result.get_asset_check_evaluations()
    assert (check.check_name, check.passed) == ("rows_reconcile", True)


def test_a_stop_while_a_finished_backfill_is_recorded_records_it_and_ends_the_run_canceled(
    tmp_path: Path, monkeypatch
) -> None:
    """The signal lands after the engine finished, while the asset op computes what it records (a stand-in engine
    again, so its moment is chosen): the backfill is whole, so it is recorded in full, and the run ends as asked."""
    (tmp_path / "gen.yaml").write_text(GENERATOR)
    phases: list[bool] = []
    monkeypatch.setattr(streaming, "run_pipeline", bounded_stand_in(phases))
    monkeypatch.setattr(backfill, "sink_metadata", signal_first(backfill.sink_metadata))
    with dg.instance_for_test() as instance:
        result = dg.materialize(
            run_assets(tmp_path), instance=instance, resources=stand_in_resources(tmp_path), raise_on_error=False
        )
        run = instance.get_run_by_id(result.run_id)
    assert run is not None and run.status == dg.DagsterRunStatus.CANCELED
    kinds = [e.event_type_value for e in result.all_events]
    assert "STEP_FAILURE" not in kinds and "RUN_FAILURE" not in kinds
    assert phases == [True]
    (materialization,) = result.get_asset_materialization_events()
    assert materialization.materialization.metadata["rows_written"].value == 5
    (check,) = result.get_asset_check_evaluations()
    assert (check.check_name, check.passed) == ("rows_reconcile", True)


def test_a_stop_while_spark_starts_interrupts_the_start_and_the_engine_never_runs(tmp_path: Path, monkeypatch) -> None:
    """Starting Spark blocks and cannot watch the stop Event; a stop request breaks into it, as Dagster's own
    interrupt did, and the run ends CANCELED instead of failing. The session start is a stand-in that blocks for a
    minute; the SIGINT comes from another thread once the start began, as Dagster's termination thread sends it
    (not after a fixed delay: the step's set-up, a pool slot's claim included, may take longer)."""
    (tmp_path / "gen.yaml").write_text(GENERATOR)
    (pf,) = discover(tmp_path)
    phases: list[bool] = []
    monkeypatch.setattr(streaming, "run_pipeline", bounded_stand_in(phases))
    resources = {**stand_in_resources(tmp_path), "spark": SlowSpark(spark_config={})}
    main = threading.main_thread().ident
    assert main is not None and threading.current_thread().ident == main
    started = time.monotonic()
    with dg.instance_for_test() as instance:
        SPARK_STARTING.clear()

        def when_spark_starts() -> None:
            if SPARK_STARTING.wait(30):
                time.sleep(0.5)  # inside the blocking start: a signal just before a blocking call waits for its end
                signal.pthread_kill(main, signal.SIGINT)

        interrupt = threading.Thread(target=when_spark_starts)
        interrupt.start()
        result = jobs.stream_job(pf).execute_in_process(instance=instance, resources=resources, raise_on_error=False)
        interrupt.join()
        run = instance.get_run_by_id(result.run_id)
    assert time.monotonic() - started < 30  # the start was broken into, not waited out
    assert run is not None and run.status == dg.DagsterRunStatus.CANCELED
    kinds = [e.event_type_value for e in result.all_events]
    assert "STEP_FAILURE" not in kinds and "RUN_FAILURE" not in kinds
    assert phases == []  # the engine never ran


def test_an_error_on_the_ops_thread_stops_the_engine_and_fails_the_run_as_an_error(tmp_path: Path, monkeypatch) -> None:
    """Not every exception on the op's thread is a stop request: one from the progress report stops the engine,
    which is waited for, and the run fails with that error — it is not marked as stopped on request."""
    (tmp_path / "gen.yaml").write_text(GENERATOR)
    (pf,) = discover(tmp_path)
    engine_stopped = threading.Event()

    def until_stopped(path, settings, session, *, stop, summary: RunSummary) -> RunSummary:  # type: ignore[no-untyped-def]
        stop.wait(30)
        engine_stopped.set()
        return summary

    def broken_tick(self, now):  # type: ignore[no-untyped-def]
        raise RuntimeError("the event log is gone")

    monkeypatch.setattr(streaming, "run_pipeline", until_stopped)
    monkeypatch.setattr(streaming.Progress, "tick", broken_tick)
    with dg.instance_for_test() as instance:
        result = jobs.stream_job(pf).execute_in_process(
            instance=instance, resources=stand_in_resources(tmp_path), raise_on_error=False
        )
        run = instance.get_run_by_id(result.run_id)
    assert engine_stopped.is_set()
    assert run is not None and run.status == dg.DagsterRunStatus.FAILURE
    assert streaming.STOPPED_BY_TAG not in run.tags
    (failure,) = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    assert "RuntimeError: the event log is gone" in failure.event_specific_data.error.to_string()


SPARK_STARTING = threading.Event()


class SlowSpark(StreamlingSparkResource):
    @property
    def spark_session(self) -> object:
        SPARK_STARTING.set()
        time.sleep(60)
        return object()


def signal_first(function):  # type: ignore[no-untyped-def]
    """`function`, with a SIGINT to this process first (as Dagster's run worker gets a termination request)."""

    def signalled(*args, **kwargs):  # type: ignore[no-untyped-def]
        signal.raise_signal(signal.SIGINT)
        return function(*args, **kwargs)

    return signalled


GENERATOR = "sources:\n  g: {type: generator, rows: 5, primary_key: id}\nsinks:\n  o: {type: blackhole, from: g}\n"


def bounded_stand_in(phases: list[bool]):  # type: ignore[no-untyped-def]
    """`run_pipeline` for a run of 5 rows that ends at once; records each call's job mode."""

    def run(path, settings, session, *, stop, summary: RunSummary) -> RunSummary:  # type: ignore[no-untyped-def]
        phases.append(settings.job_mode)
        summary.sources["g"] = SourceProgress(epochs=1, rows_in=5)
        summary.sink_rows["o"] = 5
        return summary

    return run


def stand_in_resources(tmp_path: Path) -> dict:
    return {
        "streamling": StreamlingResource(overrides={"state_backend.sqlite.database_path": str(tmp_path / "state.db")}),
        "spark": NoSpark(spark_config={}),
    }


def run_assets(directory: Path) -> list[dg.AssetsDefinition]:
    return [a for a in build_definitions(directory).assets or [] if isinstance(a, dg.AssetsDefinition)]


def test_a_running_stream_observes_only_when_its_rows_positions_or_backlog_moved(tmp_path: Path, monkeypatch) -> None:
    """An idle stream reports nothing after its first observation (issue: one identical observation a minute per
    asset). `source_status` is replaced by a stand-in returning what the state backend would say at each reading;
    the observations are built by the real `Progress`."""
    (tmp_path / "gen.yaml").write_text(GENERATOR)
    (pf,) = discover(tmp_path)
    settings = StreamlingResource(
        overrides={"state_backend.sqlite.database_path": str(tmp_path / "state.db")}
    ).pipeline_settings(pf)
    said = {"g": SourceStatus({"offset": 5}, 1, 1_000, {"0": 0})}
    monkeypatch.setattr(streaming, "source_status", lambda path, settings: dict(said))
    summary = RunSummary()
    summary.sources["g"] = SourceProgress(epochs=1, rows_in=5)
    summary.sink_rows["o"] = 5
    context = dg.build_op_context(instance=dg.DagsterInstance.ephemeral())
    progress = streaming.Progress(
        context, pf, settings, summary, StreamConfig(observe_interval_sec=60, progress_interval_sec=3600), True
    )
    start = progress.started
    assert len(progress.tick(start + 1)) == 1  # the first commit: observed at once
    assert [progress.tick(start + 61 + 60 * i) for i in range(9)] == [[]] * 9  # idle for ten minutes: nothing
    said["g"] = SourceStatus({"offset": 5}, 1, 1_000, {"0": 7})  # records arrive, not yet read
    (waiting,) = progress.tick(start + 661)
    assert waiting.metadata["backlog_total"].value == 7
    summary.sink_rows["o"] = 12
    said["g"] = SourceStatus({"offset": 12}, 2, 2_000, {"0": 0})
    assert progress.tick(start + 700) == []  # moved, but not due yet: the interval still holds
    (moved,) = progress.tick(start + 721)
    assert moved.metadata["stream_rows_written"].value == 12
    assert moved.metadata["rows_per_sec_since_last_observation"].value == round(7 / 60, 1)
    assert progress.observations(start + 722) != []  # the run's final observations are always made


def test_a_backfill_that_found_nothing_new_keeps_the_latest_materialization(tmp_path: Path, monkeypatch) -> None:
    """A plain re-run of a finished backfill reads nothing after its committed positions; recording it would make
    `rows_written 0` the sinks' latest metadata. The engine is a stand-in: 5 rows, then nothing."""
    (tmp_path / "gen.yaml").write_text(GENERATOR)
    phases: list[bool] = []

    def nothing(path, settings, session, *, stop, summary: RunSummary) -> RunSummary:  # type: ignore[no-untyped-def]
        summary.sources["g"] = SourceProgress(epochs=0, rows_in=0)
        return summary

    with dg.instance_for_test() as instance:
        monkeypatch.setattr(streaming, "run_pipeline", bounded_stand_in(phases))
        first = dg.materialize(run_assets(tmp_path), instance=instance, resources=stand_in_resources(tmp_path))
        monkeypatch.setattr(streaming, "run_pipeline", nothing)
        again = dg.materialize(run_assets(tmp_path), instance=instance, resources=stand_in_resources(tmp_path))
        (key,) = {e.asset_key for e in first.get_asset_materialization_events()}
        latest = instance.get_latest_materialization_event(key)
        logs = [e.message for e in instance.all_logs(again.run_id)]
    assert again.success and again.get_asset_materialization_events() == []
    assert [c.check_name for c in again.get_asset_check_evaluations()] == ["rows_reconcile"]
    assert latest is not None and latest.run_id == first.run_id
    assert latest.asset_materialization.metadata["rows_written"].value == 5
    assert any("Nothing new since the last backfill" in m for m in logs)


def test_a_backfill_whose_sources_are_all_at_their_end_does_not_start_spark(tmp_path: Path, monkeypatch) -> None:
    """When every source says nothing waits after its committed position (bounded Kafka knows its end offsets), a
    plain re-run is a no-op: Spark is not started (issue: 73 s for nothing). `source_status` is a stand-in saying
    what the state backend and the broker would; `run_pipeline` one that fails the test if it is called."""
    (tmp_path / "gen.yaml").write_text(GENERATOR)

    def never(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise AssertionError("the engine ran")

    monkeypatch.setattr(streaming, "run_pipeline", never)
    monkeypatch.setattr(backfill, "source_status", lambda path, settings: {"g": SourceStatus({"0": 5}, 3, 1, {"0": 0})})
    with dg.instance_for_test() as instance:
        result = dg.materialize(run_assets(tmp_path), instance=instance, resources=stand_in_resources(tmp_path))
        logs = [e.message for e in instance.all_logs(result.run_id)]
    assert result.success and result.get_asset_materialization_events() == []
    assert any("every source is at its end (backlog 0), so Spark is not started" in m for m in logs)
    monkeypatch.setattr(backfill, "source_status", lambda path, settings: {"g": SourceStatus({"0": 5}, 3, 1, {"0": 2})})
    with dg.instance_for_test() as instance, pytest.raises(AssertionError, match="the engine ran"):
        dg.materialize(run_assets(tmp_path), instance=instance, resources=stand_in_resources(tmp_path))


def test_a_run_refused_by_its_op_ends_canceled_with_the_refusal_and_no_failure(tmp_path: Path, monkeypatch) -> None:
    """A run that never met the run coordinator (`dagster job execute`, `materialize` in a script) while another
    run of the pipeline is active: its op refuses it before anything starts. It ends CANCELED, not FAILURE — no
    step failure, no failed asset — with the refusal as its RUN_CANCELED message at INFO, and tagged so that the
    keeper skips it and Dagster does not retry it. Both the backfill and the stream op. (The holder is a run
    record only: what is tested is the refusal, not a stream.)"""
    (tmp_path / "gen.yaml").write_text(GENERATOR)
    (pf,) = discover(tmp_path)
    phases: list[bool] = []
    monkeypatch.setattr(streaming, "run_pipeline", bounded_stand_in(phases))
    with dg.instance_for_test() as instance:
        holder = dg.DagsterRun(
            job_name="gen__stream",
            run_id="0aa4f5b6-0000-4000-8000-000000000001",
            status=dg.DagsterRunStatus.STARTED,
            tags={"streamling/pipeline": "gen", "streamling/stream": "gen"},
        )
        instance.add_run(holder)
        results = [
            dg.materialize(
                run_assets(tmp_path), instance=instance, resources=stand_in_resources(tmp_path), raise_on_error=False
            ),
            jobs.stream_job(pf).execute_in_process(
                instance=instance, resources=stand_in_resources(tmp_path), raise_on_error=False
            ),
        ]
        for result in results:
            run = instance.get_run_by_id(result.run_id)
            assert run is not None and run.status == dg.DagsterRunStatus.CANCELED, run
            assert run.tags["streamling/refused"] == holder.run_id and run.tags["dagster/max_retries"] == "0"
            kinds = [e.event_type_value for e in result.all_events]
            assert "STEP_FAILURE" not in kinds and "RUN_FAILURE" not in kinds
            assert not result.get_asset_materialization_events()
            (canceled,) = instance.all_logs(result.run_id, of_type=dg.DagsterEventType.RUN_CANCELED)
            assert canceled.level == logging.INFO
            assert canceled.message.startswith(
                f"pipeline 'gen' is already running in Dagster run {holder.run_id} (gen__stream, STARTED)"
            )
        # the backfill's declared check reports (or the step would fail): nothing to reconcile, and why
        (check,) = results[0].get_asset_check_evaluations()
        assert (check.check_name, check.passed) == ("rows_reconcile", True)
        assert check.description == "Nothing read or written: the run was refused"
    assert phases == []  # nothing started
