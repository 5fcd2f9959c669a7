"""Streams under `dagster dev` (webserver, daemon, code server, run workers), driven through Dagster's GraphQL API
as the UI does: terminate a stream → Canceled with its offsets committed; SIGKILL a stream's run worker → the
keeper restarts it and every record arrives."""

from __future__ import annotations

import os
import re
import signal
import time

import dagster as dg
import pytest
from confluent_kafka.admin import NewTopic

from streamling.state.sqlite import SqliteStateBackend
from tests.e2e.dagster_dev import DagsterDev
from tests.kafka_util import KafkaTestbed

STREAM_CONFIG = {"ops": {"stream_ticker": {"config": {"observe_interval_sec": 5.0, "progress_interval_sec": 5.0}}}}
SENSOR_MUTATION = """
mutation Start($selector: SensorSelector!) {
  startSensor(sensorSelector: $selector) { __typename ... on PythonError { message } }
}
"""
REPOSITORY_QUERY = "query { repositoriesOrError { ... on RepositoryConnection { nodes { name location { name } } } } }"


@pytest.fixture(scope="module")
def ticks(dagster_dev: DagsterDev, kafka_env: dict[str, str]):
    bed = KafkaTestbed(kafka_env)
    bed.admin.create_topics([NewTopic(dagster_dev.topic, num_partitions=4)])[dagster_dev.topic].result(timeout=30)
    yield bed
    bed.close()


def produce(bed: KafkaTestbed, topic: str, ids: range) -> None:
    bed.produce_json(topic, ({"id": i, "v": f"v{i}"} for i in ids))


def stored_ids(pg_connect, schema: str) -> list[int]:
    with pg_connect() as conn:
        try:
            return [r[0] for r in conn.execute(f'SELECT id FROM "{schema}".ticks ORDER BY id').fetchall()]
        except Exception:
            return []


def wait_for(condition, what: str, dev: DagsterDev, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.5)
    raise AssertionError(f"{what}: not reached in {timeout:.0f} s\n{dev.log_tail()}")


def committed(dev: DagsterDev) -> int:
    with SqliteStateBackend("local_app_v1.ticker", str(dev.home.parent / "state.db")) as state:
        return sum(int(v["offset"]) for v in state.items("ticks:").values() if "offset" in v)


def stream_runs(dev: DagsterDev) -> list[dg.DagsterRun]:
    with dev.instance() as instance:
        return list(instance.get_runs(dg.RunsFilter(job_name="ticker__stream")))


def run_worker_pid(dev: DagsterDev, run_id: str) -> int:
    with dev.instance() as instance:
        for record in instance.all_logs(run_id, of_type=dg.DagsterEventType.ENGINE_EVENT):
            found = re.search(r"Started process for run \(pid: (\d+)\)", record.message)
            if found:
                return int(found.group(1))
    raise AssertionError(f"no run worker pid logged for {run_id}")


def test_terminating_a_stream_through_the_api_ends_it_canceled_with_offsets_committed(
    dagster_dev: DagsterDev, ticks: KafkaTestbed, pg_connect
) -> None:
    dev = dagster_dev
    produce(ticks, dev.topic, range(1, 501))
    run_id = dev.client.submit_job_execution("ticker__stream", run_config=STREAM_CONFIG)
    wait_for(lambda: len(stored_ids(pg_connect, dev.schema)) == 500, "500 rows in Postgres", dev)
    dev.client.terminate_run(run_id)
    assert dev.wait_for_run(run_id, timeout=120) == "CANCELED"
    assert stored_ids(pg_connect, dev.schema) == list(range(1, 501))
    assert committed(dev) == 500
    with dev.instance() as instance:
        run = instance.get_run_by_id(run_id)
        messages = [r.message for r in instance.all_logs(run_id)]
        (last,) = instance.fetch_observations(dev.table_key("ticks"), limit=1).records
    assert run is not None and "streamling/stopped_by" not in run.tags  # asked for: the keeper treats it as a pause
    assert "Stop requested: finishing the in-flight epoch, then stopping" in messages
    metadata = last.asset_observation.metadata
    assert sum(metadata["committed_positions"].value["ticks"][dev.topic].values()) == 500  # Kafka: by topic
    assert metadata["backlog_total"].value == 0


def test_the_keeper_restarts_a_killed_stream_and_nothing_is_lost(
    dagster_dev: DagsterDev, ticks: KafkaTestbed, pg_connect
) -> None:
    dev = dagster_dev
    produce(ticks, dev.topic, range(501, 1001))
    # resume the stream (a terminated stream stays paused until launched again), then let the keeper guard it
    first = dev.client.submit_job_execution("ticker__stream", run_config=STREAM_CONFIG)
    (repository,) = dev.graphql(REPOSITORY_QUERY)["repositoriesOrError"]["nodes"]
    selector = {
        "repositoryName": repository["name"],
        "repositoryLocationName": repository["location"]["name"],
        "sensorName": "ticker__stream_keeper",
    }
    assert dev.graphql(SENSOR_MUTATION, {"selector": selector})["startSensor"]["__typename"] == "Sensor"
    wait_for(lambda: len(stored_ids(pg_connect, dev.schema)) == 1000, "1000 rows in Postgres", dev)
    os.kill(run_worker_pid(dev, first), signal.SIGKILL)  # a crash: no graceful stop, no final commit
    assert dev.wait_for_run(first, timeout=60) == "FAILURE"
    produce(ticks, dev.topic, range(1001, 1301))  # while nothing runs
    wait_for(lambda: len(stream_runs(dev)) >= 3, "the keeper's restart", dev, timeout=240)
    restarted = stream_runs(dev)[0]
    assert restarted.tags["streamling/restart"] == f"after FAILURE run {first}"
    wait_for(lambda: len(stored_ids(pg_connect, dev.schema)) == 1300, "1300 rows in Postgres", dev)
    assert stored_ids(pg_connect, dev.schema) == list(range(1, 1301))
    dev.client.terminate_run(restarted.run_id)
    assert dev.wait_for_run(restarted.run_id, timeout=120) == "CANCELED"
    assert committed(dev) == 1300
