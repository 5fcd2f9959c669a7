"""Dagster runs on the shared-nothing cluster of ``infra/services up spark-cluster`` (a master and two workers that
see neither the checkout, the venv nor /tmp), configured only through the resource's settings: the session follows
each run's engine settings, so master, app name and ``spark.environment_archive: auto`` come from the
`StreamlingResource`'s overrides in the run config (the backfill) or from the ``STREAMLING__`` environment (the
stream); the session ships the packed Python environment and the executors run the engine from it.

Each job runs in a `dagster job execute` process of its own, as a script or cron would start it (this test process
keeps the suite's local SparkSession): a backfill of a generator into Postgres, materialized with its rows and
positions, then a stream of a Kafka topic into Postgres, fed while it runs and stopped with SIGTERM. The Spark master
lists each run as an application that was given executors, and both tables end exact, positions committed.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
import urllib.request
import uuid
from pathlib import Path

import dagster as dg
import pytest

from tests.e2e.cli import cli_env, sqlite_state, write
from tests.e2e.test_dagster_cli import DAGSTER
from tests.postgres_util import table_count, table_rows

pytestmark = pytest.mark.integration


def cluster_apps(env: dict[str, str], name: str) -> list[dict]:
    """The applications named `name` that the cluster's master lists, running or completed (its JSON API)."""
    ui = int(env["STREAMLING__SPARK__MASTER"].rsplit(":", 1)[1]) + 1000
    with urllib.request.urlopen(f"http://127.0.0.1:{ui}/json/", timeout=5) as reply:
        master = json.load(reply)
    return [a for a in master["activeapps"] + master["completedapps"] if a["name"] == name]


def test_a_backfill_and_a_stream_run_on_the_shared_nothing_cluster_through_the_resource_settings(
    tmp_path: Path, shared_nothing_cluster_env: dict[str, str], kafka, postgres_env, pg_connect
) -> None:
    assert shared_nothing_cluster_env["STREAMLING__SPARK__ENVIRONMENT_ARCHIVE"] == "auto"
    schema = f"dc_{uuid.uuid4().hex[:8]}"
    topic = kafka.topic("dagster_cluster")
    pipelines = tmp_path / "pipelines"
    pipelines.mkdir()
    write(
        pipelines,
        f"""
        sources:
          orders: {{type: generator, rows: 2000, record_batch_size: 1000, partitions: 2, primary_key: id}}
        sinks:
          stored: {{type: postgres, from: orders, schema: {schema}, table: orders}}
        """,
        name="shop.yaml",
    )
    write(
        pipelines,
        f"""
        sources:
          events:
            type: kafka
            topic: {topic}
            data_format: json
            primary_key: id
            schema: {{id: bigint, label: string}}
        sinks:
          stored: {{type: postgres, from: events, schema: {schema}, table: events}}
        """,
        name="feed.yaml",
    )
    home = tmp_path / "dagster_home"
    home.mkdir()
    env = cli_env(
        tmp_path,
        {
            **postgres_env,
            **kafka.env,
            **shared_nothing_cluster_env,
            "DAGSTER_HOME": str(home),
            "STREAMLING_DAGSTER_PIPELINES": str(pipelines),
            "STREAMLING__CHECKPOINT_INTERVAL_SEC": "500ms",
        },
    )
    run_id = uuid.uuid4().hex[:8]
    backfill_app, stream_app = f"dagster-backfill-{run_id}", f"dagster-stream-{run_id}"

    # (a) The backfill: the generator's 2000 rows, materialized with their positions. Its cluster comes from the
    # StreamlingResource's overrides in the run config; its environment names none (the code location loads local).
    run_config = tmp_path / "run.yaml"
    overrides = {
        "spark.master": shared_nothing_cluster_env["STREAMLING__SPARK__MASTER"],
        "spark.environment_archive": "auto",
        "spark.app_name": backfill_app,
    }
    run_config.write_text(json.dumps({"resources": {"streamling": {"config": {"overrides": overrides}}}}))
    local = {k: v for k, v in env.items() if k not in shared_nothing_cluster_env}
    done = subprocess.run(
        [DAGSTER, "job", "execute", "-m", "streamling_dagster", "-j", "shop__backfill", "-c", str(run_config)],
        cwd=tmp_path,
        env=local,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (app,) = cluster_apps(shared_nothing_cluster_env, backfill_app)
    assert app["cores"] >= 1, app
    assert [r[0] for r in table_rows(pg_connect, schema, "orders")] == list(range(1, 2001))
    with dg.DagsterInstance.from_config(str(home)) as instance:
        event = instance.get_latest_materialization_event(dg.AssetKey(["postgres", "default", schema, "orders"]))
    assert event is not None and event.asset_materialization is not None
    metadata = event.asset_materialization.metadata
    assert metadata["rows_written"].value == 2000
    assert metadata["final_positions"].value == {"orders": {"offset": 2000}}

    # (b) The stream: records produced before it starts and while it runs, then a SIGTERM.
    def produce(first: int, last: int) -> None:
        kafka.produce_json(topic, ({"id": i, "label": f"l{i}"} for i in range(first, last + 1)))

    produce(1, 200)
    log = (tmp_path / "stream.log").open("w+")
    stream = subprocess.Popen(
        [DAGSTER, "job", "execute", "-m", "streamling_dagster", "-j", "feed__stream"],
        cwd=tmp_path,
        env={**env, "STREAMLING__SPARK__APP_NAME": stream_app},
        stdout=log,
        stderr=subprocess.STDOUT,
        text=True,
    )

    def output() -> str:
        log.seek(0)
        return log.read()[-5000:]

    def wait_for(count: int, timeout: float = 180) -> None:
        deadline = time.time() + timeout
        while table_count(pg_connect, schema, "events") < count:
            assert stream.poll() is None, output()
            assert time.time() < deadline, output()
            time.sleep(0.3)

    try:
        wait_for(200)
        (app,) = cluster_apps(shared_nothing_cluster_env, stream_app)  # running, on the cluster's executors
        assert app["cores"] >= 1 and app["state"] == "RUNNING", app
        produce(201, 500)
        wait_for(500)
        stream.send_signal(signal.SIGTERM)
        stream.wait(timeout=120)
    finally:
        if stream.poll() is None:
            stream.kill()
    assert "Stop requested: finishing the in-flight epoch, then stopping" in output(), output()
    with dg.DagsterInstance.from_config(str(home)) as instance:
        (run, _) = instance.get_runs()  # the stream's, then the backfill's
    assert run.job_name == "feed__stream"
    assert run.status == dg.DagsterRunStatus.CANCELED, output()
    assert run.tags["streamling/stopped_by"] == "signal"
    assert [(r[0], r[1]) for r in table_rows(pg_connect, schema, "events")] == [(i, f"l{i}") for i in range(1, 501)]
    state = sqlite_state(tmp_path / "state.db", app="local_app_v1.feed")
    assert sum(v["offset"] for k, v in state.items() if k.startswith(f"events:{topic}:")) == 500, state
    with pg_connect() as conn:
        conn.execute(f'DROP SCHEMA "{schema}" CASCADE')
