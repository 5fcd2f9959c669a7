"""Pipelines on the shared-nothing cluster of ``infra/services up spark-cluster``: a master and two workers whose
daemons run as their own user in mount namespaces where the checkout, the venv, /tmp and the interpreter's
site-packages are empty. The executors' Python is the archive `streamling package` built and the run ships.

Kafka → SQL → an HTTP handler (a loopback server in this process) → a path plugin's transform → a TypeScript
script → Postgres, with the raw topic into a second Postgres table. When the first request of the second wave of
records reaches the handler, the worker whose executor sent it is killed with SIGKILL (its JVM, its executor and
their Python workers): the epoch's tasks run again on the other worker, the run goes on, and both tables end exact.
Until then, each Kafka partition's rows came from one executor, epoch after epoch (`spark/locality.py`).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import uuid
from pathlib import Path

import psutil
import pytest
from werkzeug import Request, Response

from tests.conftest import services
from tests.e2e.cli import exit_code, run_cli, sqlite_state, start_cli, wait_for, write
from tests.plugin_util import write_six_kinds
from tests.postgres_util import table_count, table_rows

pytestmark = pytest.mark.integration
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"


class KillingHandler:
    """The handler's service: labels upper-cased. It notes which worker sent each request (found from the request's
    source port) for which Kafka partitions; the first request carrying an id of the second wave kills that worker
    before it is answered."""

    def __init__(self, port: int, first_of_wave_two: int) -> None:
        self.port = port
        self.first_of_wave_two = first_of_wave_two
        self.killed: int | None = None
        self.requested: dict[int, int] = {}
        self.readers: dict[int, set[int]] = {}
        """Before the kill: per Kafka partition, the worker JVMs (by pid) whose executors sent its rows."""
        self.lock = threading.Lock()

    def __call__(self, request: Request) -> Response:
        doc = json.loads(request.get_data())
        items = doc if isinstance(doc, list) else [doc]
        with self.lock:
            worker = self.sender(int(request.environ["REMOTE_PORT"]))
            for item in items:
                self.requested[item["id"]] = self.requested.get(item["id"], 0) + 1
                if self.killed is None and item["id"] < self.first_of_wave_two:
                    self.readers.setdefault((item["id"] - 1) % 4, set()).add(worker.pid)
            if self.killed is None and any(item["id"] >= self.first_of_wave_two for item in items):
                for process in [worker, *worker.children(recursive=True)]:
                    os.kill(process.pid, signal.SIGKILL)
                self.killed = worker.pid
        out = [{**item, "label": item["label"].upper()} for item in items]
        return Response(json.dumps(out if isinstance(doc, list) else out[0]), content_type="application/json")

    def sender(self, remote_port: int) -> psutil.Process:
        """The worker JVM above the process that holds the connection."""
        (sender,) = [
            c.pid
            for c in psutil.net_connections(kind="tcp")
            if c.laddr and c.laddr.port == remote_port and c.raddr and c.raddr.port == self.port and c.pid
        ]
        return next(p for p in psutil.Process(sender).parents() if WORKER_CLASS in " ".join(p.cmdline()))


def test_pipelines_run_from_the_packed_environment_and_survive_a_lost_worker(
    tmp_path: Path, shared_nothing_cluster_env: dict[str, str], kafka, postgres_env, pg_connect, server
) -> None:
    ns = f"acme_{uuid.uuid4().hex[:6]}"
    plugins = tmp_path / "plugins"
    write_six_kinds(plugins, ns)
    archive = tmp_path / "env.tar.gz"
    packed = run_cli(tmp_path, "package", "--output", str(archive), "--plugin-path", str(plugins))
    assert packed.returncode == 0, packed.stderr
    assert "Packed the engine, " in packed.stdout and str(archive) in packed.stdout
    assert archive.stat().st_size > 50_000_000

    topic = kafka.topic("cluster", partitions=4)
    schema = f"cluster_{uuid.uuid4().hex[:8]}"
    step, steps = 100, 3  # the first wave in three epochs; the second wave, one more step, meets the kill
    wave = step * steps

    def produce(first: int, last: int) -> None:
        kafka.produce_json(topic, ({"id": i, "label": f"l{i}", "amount": i * 1.5} for i in range(first, last + 1)))

    handler = KillingHandler(server.port, wave + 1)
    server.expect_request("/label", method="POST").respond_with_handler(handler)
    pipeline = write(
        tmp_path,
        f"""
        sources:
          orders:
            type: kafka
            topic: {topic}
            data_format: json
            primary_key: id
            schema: {{id: bigint, label: string, amount: double}}
        transforms:
          big: {{type: sql, primary_key: id, sql: "SELECT id, label, amount FROM orders WHERE amount >= 3"}}
          loud: {{type: handler, from: big, primary_key: id, url: "{server.url_for("/label")}", batch_size: 50}}
          kept: {{type: {ns}.keep, from: loud, primary_key: id, min_id: 10}}
          typed:
            type: script
            from: kept
            language: typescript
            primary_key: id
            schema: {{id: bigint, label: string, double_id: bigint}}
            script: |
              interface Kept {{ id: number; label: string; tag: string }}
              function process(input: Kept): {{id: number; label: string; double_id: number}} {{
                return {{id: input.id, label: `${{input.label}}/${{input.tag}}`, double_id: input.id * 2}};
              }}
        sinks:
          stored: {{type: postgres, from: typed, schema: {schema}, table: orders_out}}
          raw: {{type: postgres, from: orders, schema: {schema}, table: orders_raw}}
        """,
    )
    env = {
        **kafka.env,
        **postgres_env,
        **shared_nothing_cluster_env,
        "STREAMLING__SPARK__ENVIRONMENT_ARCHIVE": str(archive),
        "STREAMLING__PLUGIN__PATH": str(plugins),
        "STREAMLING__SPARK__APP_NAME": f"streamling-shared-nothing-{ns}",
        "STREAMLING__CHECKPOINT_INTERVAL_SEC": "500ms",
    }
    # Read tasks wait for their partition's executor (spark/locality.py) up to spark.locality.wait, 3 s by
    # default; a test machine starved of CPU can keep a one-core executor busy that long, so this run waits 10 s
    # (which is also how long the lost worker's retried task waits before it runs on the other). The session
    # starts once both executors registered, so the first epoch is dealt over both, like the ones after it.
    config = tmp_path / "config.yaml"
    conf = {"spark.locality.wait": "10s", "spark.cores.max": "2", "spark.scheduler.minRegisteredResourcesRatio": "1.0"}
    config.write_text(json.dumps({"spark": {"conf": conf}}))
    log = (tmp_path / "run.log").open("w+")
    proc = start_cli(tmp_path, str(pipeline), "--config", str(config), env=env, stderr=log)
    try:
        for last in range(step, wave + 1, step):
            produce(last - step + 1, last)
            wait_for(lambda last=last: table_count(pg_connect, schema, "orders_raw") >= last, proc, timeout=240)
        produce(wave + 1, wave + step)
        wait_for(lambda: table_count(pg_connect, schema, "orders_raw") >= wave + step, proc, timeout=240)
        wait_for(lambda: table_count(pg_connect, schema, "orders_out") >= wave + step - 9, proc, timeout=120)
        os.killpg(proc.pid, signal.SIGTERM)
        assert exit_code(proc, timeout=120) == 0, log.seek(0) or log.read()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        services("up", "spark-cluster")  # the killed worker back, for the tests after this one
    log.seek(0)
    stderr = log.read()
    assert handler.killed is not None, stderr
    # Before the kill (three epochs), each Kafka partition was read by one executor, and both executors read.
    assert sorted(handler.readers) == [0, 1, 2, 3] and all(len(w) == 1 for w in handler.readers.values()), (
        handler.readers
    )
    assert len(set().union(*handler.readers.values())) == 2, handler.readers
    # The lost worker's task ran again on the other: the request it had in flight was sent twice.
    assert any(count > 1 for i, count in handler.requested.items() if i > wave), stderr
    assert "Error:" not in stderr, stderr
    raw = table_rows(pg_connect, schema, "orders_raw")
    assert [(r[0], r[1], r[2]) for r in raw] == [(i, f"l{i}", i * 1.5) for i in range(1, wave + step + 1)]
    out = table_rows(pg_connect, schema, "orders_out")
    assert [(r[0], r[1], r[2]) for r in out] == [(i, f"L{i}/kept", 2 * i) for i in range(10, wave + step + 1)]
    state = sqlite_state(tmp_path / "state.db")
    assert sum(v["offset"] for k, v in state.items() if k.startswith(f"orders:{topic}:")) == wave + step


def test_without_the_packed_environment_the_workers_have_no_python_of_the_driver(
    tmp_path: Path, shared_nothing_cluster_env: dict[str, str]
) -> None:
    """What proves the executors above ran only what the job shipped: the driver's venv is not on the workers."""
    pipeline = write(
        tmp_path,
        """
        sources:
          src: {type: generator, rows: 100, primary_key: id}
        sinks:
          out: {type: blackhole, from: src}
        """,
    )
    env = {**shared_nothing_cluster_env, "STREAMLING__SPARK__ENVIRONMENT_ARCHIVE": "", "STREAMLING__JOB_MODE": "true"}
    result = run_cli(tmp_path, str(pipeline), env=env)
    assert result.returncode == 1, result.stderr  # a failed run (not an invalid pipeline)
    python = os.environ.get("PYSPARK_PYTHON", sys.executable)  # the driver's, which the executors are asked to run
    errors = [line for line in result.stderr.splitlines() if line.startswith("Error:")]
    assert errors == [
        f"Error: blackhole sink 'out': Spark could not start the Python workers' interpreter '{python}' where a task "
        "ran (no such file); on a cluster, ship one with the job (spark.environment_archive: auto, or an archive "
        "`streamling package` built) or install it at that path on every worker"
    ], result.stderr
    assert "restarting" not in result.stderr
