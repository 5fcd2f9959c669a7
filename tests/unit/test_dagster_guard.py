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
