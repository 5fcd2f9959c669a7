"""The queue under `dagster dev`: a run spanning several pipelines waits for each pipeline it touches.

*Materialize all* on the lineage page makes one asset run over every pipeline whose assets it selects. Before,
the one-run-per-pipeline limit was a run-tag limit, and such a run's tag (`streamling/pipeline=slow,spot`) was
one more distinct value: it started beside a running backfill of `slow` and failed "already running". Every op
of a pipeline is now in the pool `streamling/<pipeline>`, limited to one run (`dagster.yaml`: `concurrency.pools`,
run granularity), so the daemon keeps the run queued until `slow`'s backfill ended, then runs it.
"""

from __future__ import annotations

import time

import pytest

from tests.e2e.dagster_dev import DagsterDev

pytestmark = pytest.mark.e2e


def rows(pg_connect, schema: str, table: str) -> int:
    with pg_connect() as conn:
        try:
            return conn.execute(f'SELECT count(*) FROM "{schema}"."{table}"').fetchone()[0]
        except Exception:
            return 0


def test_a_run_spanning_two_pipelines_waits_in_the_queue_until_each_is_free(
    dagster_dev: DagsterDev, pg_connect
) -> None:
    dev = dagster_dev
    first = dev.client.submit_job_execution("slow__backfill")
    dev.wait_for_run(first, {"STARTED"}, timeout=120)
    answer = dev.launch("__ASSET_JOB", [list(dev.table_key("dripped").path), list(dev.table_key("spotted").path)])
    assert answer["__typename"] == "LaunchRunSuccess", answer
    both = answer["run"]["runId"]
    seen: set[str] = set()
    while True:
        waiting = dev.run_status(both)  # read first: it counts only if slow's backfill still ran afterwards
        if (status := dev.run_status(first)) in ("SUCCESS", "FAILURE", "CANCELED"):
            break
        seen.add(waiting)
        time.sleep(0.5)
    assert status == "SUCCESS", dev.log_tail()
    assert seen == {"QUEUED"}, f"while slow__backfill ran, the run spanning slow and spot was {seen}"
    assert dev.wait_for_run(both, timeout=240) == "SUCCESS", dev.log_tail()
    with dev.instance() as instance:
        run = instance.get_run_by_id(both)
    assert run is not None and run.tags["streamling/pipelines"] == "slow,spot"
    assert rows(pg_connect, dev.schema, "dripped") == 300
    assert rows(pg_connect, dev.schema, "spotted") == 50


def test_the_shipped_instance_caps_runs_per_pipeline_only(tmp_path) -> None:
    """A stream's run never ends, so a cap on runs overall is a cap on pipelines streamed: under Dagster's default
    (10) the 11th pipeline's stream stayed QUEUED for good (bench/dagster_engine.py launches 20). The instance
    `dagster dev` builds from the shipped `dagster.yaml` (as `running_dagster_dev` copies it) has no such cap; one
    run per pipeline and per embedded ClickHouse path still holds."""
    import shutil

    import dagster as dg

    from tests.e2e.dagster_dev import REPO

    shutil.copy(REPO / "infra" / "dagster" / "dagster.yaml", tmp_path / "dagster.yaml")
    with dg.DagsterInstance.from_config(str(tmp_path)) as instance:
        concurrency = instance.get_concurrency_config()
    assert concurrency.run_queue_config.max_concurrent_runs == -1
    assert concurrency.pool_config.default_pool_limit == 1
    assert [limit["key"] for limit in concurrency.run_queue_config.tag_concurrency_limits] == [
        "streamling/embedded_clickhouse"
    ]
