"""`dagster dev` with a live stream run ends on one SIGTERM to its process group (what systemd, `docker stop`,
Kubernetes and a terminal send): every process it started is gone within `STOP_TIMEOUT_SEC`, the stream run ends
Canceled with its in-flight epoch committed, and the sink holds exactly the committed positions' rows."""

from __future__ import annotations

import time
from pathlib import Path

import dagster as dg
from confluent_kafka.admin import NewTopic

from tests.e2e.dagster_dev import STOP_TIMEOUT_SEC, running_dagster_dev, stop
from tests.e2e.test_dagster_dev_streams import committed, produce, stored_ids, wait_for
from tests.kafka_util import KafkaTestbed


def test_sigterm_to_the_group_ends_dagster_dev_and_cancels_a_live_stream(
    tmp_path: Path, postgres_env: dict[str, str], kafka_env: dict[str, str], pg_connect
) -> None:
    with running_dagster_dev(tmp_path, postgres_env, kafka_env, ready_job="ticker__stream") as dev:
        bed = KafkaTestbed(kafka_env)
        try:
            bed.admin.create_topics([NewTopic(dev.topic, num_partitions=4)])[dev.topic].result(timeout=30)
            produce(bed, dev.topic, range(1, 301))
        finally:
            bed.close()
        run_id = dev.client.submit_job_execution("ticker__stream")
        wait_for(lambda: len(stored_ids(pg_connect, dev.schema)) == 300, "300 rows in Postgres", dev)
        started = time.monotonic()
        left = stop(dev)  # SIGTERM to the whole group at once; the fixture's own stop finds nothing more to do
        took = time.monotonic() - started
        assert not left, f"still there {STOP_TIMEOUT_SEC} s after SIGTERM to the group: {left}"
        print(f"dagster dev with a live stream ended {took:.1f} s after SIGTERM to its group")
        assert "Restarting the code server process" not in dev.log.read_text(errors="replace")
        with dev.instance() as instance:
            run = instance.get_run_by_id(run_id)
            messages = [r.message for r in instance.all_logs(run_id)]
        assert run is not None and run.status == dg.DagsterRunStatus.CANCELED, messages[-10:]
        assert "The run worker received a stop signal" in messages
        assert stored_ids(pg_connect, dev.schema) == list(range(1, 301))
        assert committed(dev) == 300
