"""A scripted run of docs/dagster.md's walkthrough against the running local services and its own `dagster dev`.

Why: the walkthrough promises that an operator clicking through it (materialize, re-run a range, stream, try to
break it, terminate, let the keeper restart a crash, run a backfill from a script) is left with no failed run that
was not a real failure, and sinks that hold exactly what the sources offered. The e2e tests check these promises one
at a time; this runs them in the walkthrough's order in one instance, so what one step leaves behind (a refused run,
a failed asset, a duplicated row) is seen by the next and by the final audit.

Its own temp directory holds DAGSTER_HOME (infra/dagster/dagster.yaml), the pipeline files, the state database and
the embedded ClickHouse data; Postgres schema and Kafka topics carry a uuid suffix and are dropped at the end.

    eval "$(infra/services env postgres kafka registry)"
    PYTHONPATH=$PWD/engine:$PWD python bench/dagster_walkthrough.py

Prints each step's checks as a table and writes bench/results/dagster-walkthrough-<UTC timestamp>.json. Exit code 0
only if every check held.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import traceback
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(Path(__file__).resolve().parent), str(ROOT), str(ROOT / "engine")]

import dagster as dg  # noqa: E402
import httpx  # noqa: E402
import kafka_data  # noqa: E402
import psycopg  # noqa: E402
from confluent_kafka import Consumer, TopicPartition  # noqa: E402
from confluent_kafka.admin import NewTopic  # noqa: E402
from harness import record  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from tests.e2e.dagster_dev import (  # noqa: E402
    DAGSTER,
    LOCATION,
    DagsterDev,
    drop_schema,
    ranged_pipeline,
    running_dagster_dev,
)
from tests.e2e.test_dagster_dev_streams import run_worker_pid  # noqa: E402
from tests.kafka_util import KafkaTestbed  # noqa: E402

console = Console(width=None if sys.stdout.isatty() else 150)
ARCHIVE_ROWS = 300
RANGED_ROWS = 100
GEN_ROWS = 1000
REFUSED_TAG = "streamling/refused"
LAUNCH = """
mutation Launch($params: ExecutionParams!) {
  launchPipelineExecution(executionParams: $params) {
    __typename
    ... on LaunchRunSuccess { run { runId } }
    ... on PythonError { message stack }
    ... on Error { message }
  }
}
"""
REPOSITORY = "query { repositoriesOrError { ... on RepositoryConnection { nodes { name location { name } } } } }"
JOBS_OF_ASSET = "query Jobs($keys: [AssetKeyInput!]) { assetNodes(assetKeys: $keys) { assetKey { path } jobNames } }"
LATEST = """
query L($keys: [AssetKeyInput!]!) { assetsLatestInfo(assetKeys: $keys) { assetKey { path } latestRun { id status } } }
"""
START_SENSOR = """
mutation Start($s: SensorSelector!) { startSensor(sensorSelector: $s) { __typename ... on PythonError { message } } }
"""
CREATE_ARCHIVE = """
import sys, clickhouse_connect
client = clickhouse_connect.get_client(dsn="chdb://" + sys.argv[1])
client.command("CREATE DATABASE IF NOT EXISTS wt_db")
client.command("CREATE TABLE wt_db.archive (id Int64, who String, amount Float64) ENGINE = MergeTree ORDER BY id")
client.command("INSERT INTO wt_db.archive SELECT number + 1, 'ch', toFloat64(number + 1) FROM numbers(%d)")
"""


# ---------------------------------------------------------------------------------------------------- the setting


def service_env() -> dict[str, str]:
    """The services' STREAMLING__ variables (`kafka_data.services_env`: started if needed)."""
    return kafka_data.services_env("postgres", "kafka", "registry")


def write_pipelines(directory: Path, schema: str, topic: str) -> None:
    """The walkthrough's shapes: `hyb`, a hybrid (an embedded ClickHouse table, then a Kafka topic) into Postgres,
    kept by a keeper with a 2 s backoff; `ranged`, a backfill partitioned by Kafka offset ranges; `gen`, a plain
    generator backfill for the script-run step."""
    directory.mkdir(parents=True)
    (directory / "hyb.yaml").write_text(
        textwrap.dedent(
            f"""\
            sources:
              orders:
                type: hybrid
                primary_key: id
                bounded_sources: [{{source_type: clickhouse, table_name: wt_db.archive}}]
                unbounded_source:
                  source_type: kafka
                  topic: {topic}
                  data_format: json
                  schema: {{id: bigint, who: string, amount: double}}
                  start_at: earliest
            sinks:
              out: {{type: postgres, from: orders, schema: {schema}, table: hyb}}
            orchestration: {{restart_backoff_sec: 2, restart_backoff_max_sec: 10}}
            """
        )
    )
    (directory / "ranged.yaml").write_text(ranged_pipeline(schema, topic, factor=1))
    (directory / "gen.yaml").write_text(
        textwrap.dedent(
            f"""\
            sources:
              rows: {{type: generator, rows: {GEN_ROWS}, primary_key: id}}
            sinks:
              stored: {{type: postgres, from: rows, schema: {schema}, table: gen}}
            """
        )
    )


# ---------------------------------------------------------------------------------------------------- the record


@dataclass
class Check:
    what: str
    expected: str
    observed: str
    ok: bool


@dataclass
class Step:
    name: str
    seconds: float = 0.0
    checks: list[Check] = field(default_factory=list)
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and all(c.ok for c in self.checks)

    def check(self, what: str, expected: Any, observed: Any, ok: bool | None = None) -> bool:
        held = (expected == observed) if ok is None else ok
        self.checks.append(Check(what, str(expected), str(observed), bool(held)))
        return bool(held)


def show(step: Step) -> None:
    table = Table(title=f"{step.name} ({step.seconds:.1f} s)", title_justify="left")
    for column in ("check", "expected", "observed", "ok"):
        table.add_column(column, overflow="fold")
    for c in step.checks:
        table.add_row(c.what, c.expected, c.observed, "[green]yes" if c.ok else "[red]NO")
    if step.error:
        table.add_row("step raised", "-", step.error[-600:], "[red]NO")
    console.print(table)


# ---------------------------------------------------------------------------------------------------- the walk


class Walk:
    def __init__(self, dev: DagsterDev, bed: KafkaTestbed, pg: dict[str, str], schema: str, topic: str) -> None:
        self.dev, self.bed, self.pg, self.schema, self.topic = dev, bed, pg, schema, topic
        self.steps: list[Step] = []
        self.produced: list[int] = []
        self.killed_run = ""
        self.plain_refused: list[str] = []
        self.killed_status = ""
        self.live_run = ""
        (repository,) = dev.graphql(REPOSITORY)["repositoriesOrError"]["nodes"]
        self.repository = {
            "repositoryName": repository["name"],
            "repositoryLocationName": repository["location"]["name"],
        }

    # -- helpers

    def key(self, table: str) -> list[str]:
        return ["postgres", "default", self.schema, table]

    def connect(self) -> psycopg.Connection:
        p = "STREAMLING__STATE_BACKEND__POSTGRES__"
        return psycopg.connect(
            host=self.pg[p + "HOST"],
            port=int(self.pg[p + "PORT"]),
            user=self.pg[p + "USER"],
            password=self.pg[p + "PASSWORD"],
            dbname=self.pg[p + "DATABASE"],
            autocommit=True,
        )

    def rows(self, table: str, where: str = "TRUE") -> list[tuple]:
        with self.connect() as conn:
            try:
                return conn.execute(f'SELECT * FROM "{self.schema}"."{table}" WHERE {where} ORDER BY id').fetchall()
            except psycopg.errors.UndefinedTable:
                return []

    def count(self, table: str) -> tuple[int, int]:
        """(rows, distinct ids)."""
        with self.connect() as conn:
            try:
                return tuple(
                    conn.execute(f'SELECT count(*), count(DISTINCT id) FROM "{self.schema}"."{table}"').fetchone()
                )
            except psycopg.errors.UndefinedTable:
                return (0, 0)

    def wait_for(self, condition: Callable[[], bool], what: str, timeout: float = 240) -> float:
        """Poll until `condition`; returns the seconds it took."""
        started = time.monotonic()
        while time.monotonic() - started < timeout:
            if condition():
                return time.monotonic() - started
            time.sleep(0.5)
        raise AssertionError(f"{what}: not reached in {timeout:.0f} s\n{self.dev.log_tail(3000)}")

    def launch(self, job: str, assets: list[list[str]] | None = None, tags: dict[str, str] | None = None) -> dict:
        """As the UI sends it: `launchPipelineExecution`, an asset selection for Materialize, tags for a partition."""
        selector: dict[str, Any] = {**self.repository, "pipelineName": job}
        if assets is not None:
            selector["assetSelection"] = [{"path": p} for p in assets]
        params = {
            "selector": selector,
            "mode": "default",
            "executionMetadata": {"tags": [{"key": k, "value": v} for k, v in (tags or {}).items()]},
            "runConfigData": {},
        }
        response = httpx.post(
            f"{self.dev.url}/graphql", json={"query": LAUNCH, "variables": {"params": params}}, timeout=60
        )
        if response.status_code not in (200, 500):
            raise AssertionError(f"{response.status_code}: {response.text[:2000]}")
        return response.json()["data"]["launchPipelineExecution"]

    def launched(self, job: str, assets: list[list[str]] | None = None, tags: dict[str, str] | None = None) -> str:
        answer = self.launch(job, assets, tags)
        if answer["__typename"] != "LaunchRunSuccess":
            raise AssertionError(f"launch of {job} {assets} {tags}: {answer}")
        return answer["run"]["runId"]

    def asset_job(self, key: list[str]) -> str:
        """The implicit asset job an asset page's Materialize launches (`__ASSET_JOB…`)."""
        (node,) = self.dev.graphql(JOBS_OF_ASSET, {"keys": [{"path": key}]})["assetNodes"]
        return next(j for j in node["jobNames"] if j.startswith("__ASSET_JOB"))

    def run_ids(self) -> set[str]:
        with self.dev.instance() as instance:
            return {r.run_id for r in instance.get_runs()}

    def same_runs(self, before: set[str]) -> str:
        now = self.run_ids()
        return (
            f"{len(now)} runs, unchanged"
            if now == before
            else f"new {sorted(now - before)}, gone {sorted(before - now)}"
        )

    def latest_run(self, key: list[str]) -> dict | None:
        (info,) = self.dev.graphql(LATEST, {"keys": [{"path": key}]})["assetsLatestInfo"]
        return info["latestRun"]

    def produce(self, ids: range) -> None:
        self.bed.produce_json(self.topic, ({"id": i, "who": "k", "amount": float(i)} for i in ids))
        self.produced.extend(ids)

    def execute(self, job: str, plain: bool = False) -> subprocess.CompletedProcess:
        """`python -m streamling_dagster.execute -j job`, or with `plain` Dagster's own `dagster job execute`."""
        command = (
            [DAGSTER, "job", "execute", "-m", LOCATION]
            if plain
            else [sys.executable, "-m", "streamling_dagster.execute"]
        )
        return subprocess.run(
            [*command, "-j", job],
            cwd=self.dev.home.parent,
            env=self.dev.env,
            capture_output=True,
            text=True,
            timeout=600,
        )

    def hyb_expected(self) -> list[tuple]:
        archive = {i: (i, "ch", float(i)) for i in range(1, ARCHIVE_ROWS + 1)}
        return sorted({**archive, **{i: (i, "k", float(i)) for i in self.produced}}.values())

    def hyb_rows(self) -> list[tuple]:
        return [tuple(r[:3]) for r in self.rows("hyb")]

    @contextmanager
    def step(self, name: str) -> Iterator[Step]:
        step = Step(name)
        self.steps.append(step)
        console.rule(f"[bold]{name}")
        started = time.monotonic()
        try:
            yield step
        except Exception as exc:  # a step that raises is a failed step; the audit and the clean-up still run
            step.error = f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=3)}"
        finally:
            step.seconds = round(time.monotonic() - started, 1)
            show(step)

    # -- the walkthrough's steps

    def materialize(self) -> None:
        with self.step("1. materialize backfill assets (hybrid sink; both ranges of the partitioned one)") as s:
            hyb = self.key("hyb")
            run = self.launched(self.asset_job(hyb), [hyb])
            s.check("hyb materialize run", "SUCCESS", self.dev.wait_for_run(run, timeout=300))
            s.check(
                "hyb rows = the ClickHouse archive",
                ARCHIVE_ROWS,
                len(self.hyb_rows()),
                self.hyb_rows() == self.hyb_expected(),
            )
            ranged = self.key("ranged")
            job = self.asset_job(ranged)
            for part in ("0-50", "50-100"):
                run = self.launched(job, [ranged], {"dagster/partition": part})
                s.check(f"ranged partition {part}", "SUCCESS", self.dev.wait_for_run(run, timeout=300))
            stored = self.rows("ranged")
            s.check("ranged rows = the topic's records", RANGED_ROWS, len(stored), stored == self.ranged_expected())

    def ranged_expected(self, low: int = 0, high: int = RANGED_ROWS) -> list[tuple]:
        return [(i, i) for i in range(low, high)]

    def rerun_partition(self) -> None:
        with self.step("2. re-run partition 0-50") as s:
            ranged = self.key("ranged")
            run = self.launched(self.asset_job(ranged), [ranged], {"dagster/partition": "0-50"})
            s.check("re-run", "SUCCESS", self.dev.wait_for_run(run, timeout=300))
            part = [tuple(r[:2]) for r in self.rows("ranged", "id >= 0 AND id < 50")]
            s.check("range 0-50 rows exact, no duplicates", 50, len(part), part == self.ranged_expected(0, 50))
            s.check("whole table (rows, distinct ids)", (RANGED_ROWS, RANGED_ROWS), self.count("ranged"))
            with self.dev.instance() as instance:
                (latest,) = instance.fetch_materializations(dg.AssetKey(ranged), limit=1).records
            s.check("latest materialization is the re-run's", run, latest.run_id)
            s.check("its rows_written", 50, latest.asset_materialization.metadata["rows_written"].value)

    def stream(self) -> None:
        with self.step("3. hyb__backfill_then_stream, then produce to the topic") as s:
            self.live_run = self.launched("hyb__backfill_then_stream")
            s.check(
                "run status",
                "STARTED",
                self.dev.wait_for_run(self.live_run, ("STARTED", "FAILURE", "CANCELED", "SUCCESS")),
            )
            self.produce(range(1001, 1101))
            took = self.wait_for(lambda: self.count("hyb")[0] >= ARCHIVE_ROWS + 100, "100 Kafka rows in Postgres")
            s.check("rows arrive (s after produce)", "< 240", f"{took:.1f}", True)
            s.check(
                "hyb rows = archive + topic",
                ARCHIVE_ROWS + 100,
                len(self.hyb_rows()),
                self.hyb_rows() == self.hyb_expected(),
            )

    def try_to_break_it(self) -> None:
        with self.step("4. while live: Materialize and a script backfill are refused") as s:
            hyb = self.key("hyb")
            before = self.run_ids()
            answer = self.launch(self.asset_job(hyb), [hyb])
            message = answer.get("message", "")
            s.check(
                "Materialize answer",
                "PythonError, empty stack",
                f"{answer['__typename']}, stack {answer.get('stack')}",
                answer["__typename"] == "PythonError" and answer.get("stack") == [],
            )
            s.check(
                "names the live run",
                "already running in Dagster run <live>",
                message[:160],
                f"already running in Dagster run {self.live_run}" in message,
            )
            s.check("no run left behind", f"{len(before)} runs, unchanged", self.same_runs(before))
            latest = self.latest_run(hyb) or {}
            s.check(
                "asset's latest run not failed", "not FAILURE", latest.get("status"), latest.get("status") != "FAILURE"
            )
            done = self.execute("hyb__backfill")
            s.check("execute -j hyb__backfill exit", 3, done.returncode)
            s.check(
                "says refused, no run created",
                "refused: no run was created",
                done.stderr.strip().splitlines()[-1][:120] if done.stderr.strip() else "",
                "refused: no run was created" in done.stderr,
            )
            s.check("no run created by it", f"{len(before)} runs, unchanged", self.same_runs(before))
            done = self.execute("hyb__backfill", plain=True)
            output = done.stdout + done.stderr
            s.check("dagster job execute -j hyb__backfill exit", "not 0", done.returncode, done.returncode != 0)
            s.check(
                "no traceback, no Spark started",
                "none",
                "none" if "Traceback" not in output and "SparkSession" not in output else output[-300:],
            )
            with self.dev.instance() as instance:
                refused = [
                    r for r in instance.get_runs(dg.RunsFilter(job_name="hyb__backfill")) if REFUSED_TAG in r.tags
                ]
                events = [e for r in refused for e in instance.all_logs(r.run_id) if e.dagster_event]
            s.check(
                "its run (Dagster creates one first)",
                "1 CANCELED",
                f"{len(refused)} " + ",".join(r.status.value for r in refused),
                [r.status.value for r in refused] == ["CANCELED"],
            )
            self.plain_refused = [r.run_id for r in refused]
            s.check(
                "tagged streamling/refused=<live>", self.live_run, refused[0].tags.get(REFUSED_TAG) if refused else None
            )
            s.check(
                "step or run failure events",
                "none",
                sorted(
                    e.dagster_event.event_type_value
                    for e in events
                    if e.dagster_event.is_step_failure or e.dagster_event.is_run_failure
                )
                or "none",
            )
            canceled = [e.message for e in events if e.dagster_event.event_type == dg.DagsterEventType.RUN_CANCELED]
            s.check(
                "its RUN_CANCELED message",
                "already running in Dagster run <live>",
                canceled[0][:160] if canceled else None,
                bool(canceled) and f"already running in Dagster run {self.live_run}" in canceled[0],
            )
            s.check("stream still live", "STARTED", self.dev.run_status(self.live_run))

    def terminate_and_resume(self) -> None:
        with self.step("5. Terminate the live run, relaunch the stream") as s:
            self.dev.client.terminate_run(self.live_run)
            s.check("terminated run", "CANCELED", self.dev.wait_for_run(self.live_run, timeout=180))
            with self.dev.instance() as instance:
                types = {e.dagster_event.event_type for e in instance.all_logs(self.live_run) if e.dagster_event}
            s.check(
                "no step/run failure in its log",
                "none",
                sorted(t.value for t in types if "FAILURE" in t.value) or "none",
            )
            self.live_run = self.launched("hyb__stream")
            s.check(
                "relaunched stream",
                "STARTED",
                self.dev.wait_for_run(self.live_run, ("STARTED", "FAILURE", "CANCELED", "SUCCESS")),
            )
            self.produce(range(1101, 1201))
            self.wait_for(lambda: self.count("hyb")[0] >= ARCHIVE_ROWS + 200, "100 more rows after the relaunch")
            s.check(
                "hyb rows = archive + topic",
                ARCHIVE_ROWS + 200,
                len(self.hyb_rows()),
                self.hyb_rows() == self.hyb_expected(),
            )

    def crash_and_keep(self) -> None:
        with self.step("6. keeper on, kill -9 the run worker, the keeper restarts the stream") as s:
            selector = {**self.repository, "sensorName": "hyb__stream_keeper"}
            started = self.dev.graphql(START_SENSOR, {"s": selector})["startSensor"]["__typename"]
            s.check("startSensor hyb__stream_keeper", "Sensor", started)
            pid = run_worker_pid(self.dev, self.live_run)
            os.kill(pid, signal.SIGKILL)
            self.killed_run = self.live_run
            t0 = time.monotonic()
            self.killed_status = self.dev.wait_for_run(self.killed_run, timeout=180)
            s.check("killed run's status (set by Dagster's code server)", "FAILURE", self.killed_status)
            s.check("seconds until Dagster marked it", "-", f"{time.monotonic() - t0:.1f}", True)

            def restarted() -> dg.DagsterRun | None:
                with self.dev.instance() as instance:
                    runs = instance.get_runs(dg.RunsFilter(job_name="hyb__stream"))
                return next((r for r in runs if r.tags.get("streamling/restart", "").endswith(self.killed_run)), None)

            took = self.wait_for(lambda: restarted() is not None, "the keeper's restart", timeout=240)
            run = restarted()
            assert run is not None
            self.live_run = run.run_id
            s.check("keeper's run tag", f"after FAILURE run {self.killed_run}", run.tags.get("streamling/restart"))
            s.check("seconds from FAILURE to the keeper's run", "-", f"{took:.1f}", True)
            s.check(
                "restarted run",
                "STARTED",
                self.dev.wait_for_run(self.live_run, ("STARTED", "FAILURE", "CANCELED", "SUCCESS")),
            )
            self.produce(range(1201, 1301))
            self.wait_for(lambda: self.count("hyb")[0] >= ARCHIVE_ROWS + 300, "100 rows after the restart")
            s.check(
                "hyb rows = archive + topic",
                ARCHIVE_ROWS + 300,
                len(self.hyb_rows()),
                self.hyb_rows() == self.hyb_expected(),
            )

    def script_run(self) -> None:
        with self.step("7. dagster job execute -j gen__backfill, then the script form (real runs)") as s:
            done = self.execute("gen__backfill", plain=True)
            s.check("dagster job execute exit code", 0, done.returncode)
            stored = [r[0] for r in self.rows("gen")]
            s.check("gen rows 1..N", GEN_ROWS, len(stored), stored == list(range(1, GEN_ROWS + 1)))
            done = self.execute("gen__backfill")
            s.check("exit code", 0, done.returncode)
            s.check(
                "says succeeded",
                "... succeeded",
                done.stderr.strip().splitlines()[-1][-60:] if done.stderr.strip() else "",
                done.stderr.rstrip().endswith("succeeded"),
            )
            stored = [r[0] for r in self.rows("gen")]
            s.check("gen rows 1..N", GEN_ROWS, len(stored), stored == list(range(1, GEN_ROWS + 1)))

    def stop_stream(self) -> None:
        with self.step("end: terminate the keeper's stream (a pause: the keeper leaves it stopped)") as s:
            if self.live_run and self.dev.run_status(self.live_run) in ("QUEUED", "STARTING", "STARTED"):
                self.dev.client.terminate_run(self.live_run)
                s.check("stream run", "CANCELED", self.dev.wait_for_run(self.live_run, timeout=180))

    # -- the audit

    def topic_records(self, topic: str) -> list[dict]:
        """Every record of `topic`, to its high watermarks."""
        consumer = Consumer(
            {"bootstrap.servers": self.bed.brokers, "group.id": f"walk-{uuid.uuid4().hex}", "enable.auto.commit": False}
        )
        try:
            parts = sorted(consumer.list_topics(topic, timeout=10).topics[topic].partitions)
            ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in parts}
            consumer.assign([TopicPartition(topic, p, 0) for p in parts])
            out: list[dict] = []
            left = {p: e for p, e in ends.items() if e > 0}
            deadline = time.monotonic() + 60
            while left and time.monotonic() < deadline:
                message = consumer.poll(1.0)
                if message is None or message.error():
                    continue
                out.append(json.loads(message.value()))
                if message.offset() + 1 >= ends[message.partition()]:
                    left.pop(message.partition(), None)
            return out
        finally:
            consumer.close()

    def audit_sinks(self) -> None:
        with self.step("audit: sinks equal their sources") as s:
            topic = self.topic_records(self.topic)
            s.check(
                "topic records = produced",
                len(self.produced),
                len(topic),
                sorted(r["id"] for r in topic) == sorted(self.produced),
            )
            stored = self.hyb_rows()
            expected = sorted(
                {
                    **{i: (i, "ch", float(i)) for i in range(1, ARCHIVE_ROWS + 1)},
                    **{r["id"]: (r["id"], r["who"], r["amount"]) for r in topic},
                }.values()
            )
            s.check("hyb (rows, distinct ids)", (len(expected), len(expected)), self.count("hyb"))
            missing = sorted(set(expected) - set(stored))[:5]
            extra = sorted(set(stored) - set(expected))[:5]
            s.check("hyb = archive + topic (missing, extra)", "([], [])", f"({missing}, {extra})", stored == expected)
            ranged = {r["id"]: r["v"] for r in self.topic_records(f"{self.topic}_ranged")}
            stored_ranged = dict(tuple(r[:2]) for r in self.rows("ranged"))
            s.check("ranged (rows, distinct ids)", (len(ranged), len(ranged)), self.count("ranged"))
            s.check("ranged = its topic", len(ranged), len(stored_ranged), stored_ranged == ranged)
            s.check("gen (rows, distinct ids)", (GEN_ROWS, GEN_ROWS), self.count("gen"))

    def audit_assets(self) -> None:
        with self.step("audit: no asset failed by a refusal") as s:
            with self.dev.instance() as instance:
                keys = [k.path for k in instance.all_asset_keys()]
                refused_ids = {r.run_id for r in instance.get_runs() if REFUSED_TAG in r.tags}
                failed_events = []
                for run in instance.get_runs():
                    for e in instance.all_logs(run.run_id):
                        if e.dagster_event and e.dagster_event.event_type_value == "ASSET_FAILED_TO_MATERIALIZE":
                            failed_events.append((run.run_id, e.dagster_event.asset_key.to_user_string()))
            latest = self.dev.graphql(LATEST, {"keys": [{"path": k} for k in keys]})["assetsLatestInfo"]
            failed_latest = [
                ("/".join(i["assetKey"]["path"]), i["latestRun"]["id"])
                for i in latest
                if i["latestRun"] and i["latestRun"]["status"] == "FAILURE"
            ]
            s.check(
                "assets whose latest run failed (not the killed run)",
                [],
                [f for f in failed_latest if f[1] != self.killed_run],
            )
            s.check(
                "failed-to-materialize events from refused runs",
                [],
                [f for f in failed_events if f[0] in refused_ids],
            )
            s.check("failed-to-materialize events (any run)", "-", failed_events, True)
            s.check("assets whose latest run is the killed one", "-", failed_latest, True)


FAILURE_EVENTS = ("RUN_FAILURE", "PIPELINE_FAILURE", "STEP_FAILURE")


def failure_reason(instance: dg.DagsterInstance, run_id: str) -> str:
    """What the run's log says about its end: failure events, and engine events about its process (Dagster's
    code server reports a run worker that died of a signal)."""
    said = []
    for e in instance.all_logs(run_id):
        kind = e.dagster_event.event_type_value if e.dagster_event else None
        text = e.message.strip()
        if kind in FAILURE_EVENTS or (kind == "ENGINE_EVENT" and ("signal" in text or "fail" in text.lower())):
            said.append(f"{kind}: {text[:240]}")
    return " | ".join(said) or "(no failure event)"


def audit_runs(home: Path, killed_run: str, plain_refused: list[str]) -> tuple[Step, dict]:
    """After `dagster dev` stopped: every run, by status; each FAILURE with its reason and whether it was real.
    Runs tagged `streamling/refused` are only those `dagster job execute` created before its op refused them
    (`plain_refused`), each CANCELED: every other refusal leaves no run."""
    step = Step("audit: runs in the instance")
    with dg.DagsterInstance.from_config(str(home)) as instance:
        runs = list(instance.get_runs())
        by_status = Counter(r.status.value for r in runs)
        failures = []
        for r in runs:
            if r.status != dg.DagsterRunStatus.FAILURE:
                continue
            reason = failure_reason(instance, r.run_id)
            refused = REFUSED_TAG in r.tags or "already running" in reason
            if refused:
                kind = "refusal (NOT acceptable)"
            elif r.run_id == killed_run and "SIGKILL" in reason:
                kind = "real: run worker SIGKILLed by step 6"
            else:
                kind = "unexpected"
            failures.append({"run_id": r.run_id, "job": r.job_name, "reason": reason, "class": kind})
        table = [
            {
                "run_id": r.run_id,
                "job": r.job_name,
                "status": r.status.value,
                "partition": r.tags.get("dagster/partition"),
                "restart": r.tags.get("streamling/restart"),
            }
            for r in runs
        ]
    step.check("runs by status", "-", dict(by_status), True)
    for f in failures:
        step.check(
            f"FAILURE {f['run_id'][:8]} {f['job']}",
            "real",
            f"{f['class']}: {f['reason'][:400]}",
            f["class"].startswith("real"),
        )
    tagged = sorted((r.run_id, r.status.value) for r in runs if REFUSED_TAG in r.tags)
    step.check(
        "runs tagged streamling/refused (dagster job execute's, CANCELED)",
        sorted((run_id, "CANCELED") for run_id in plain_refused),
        tagged,
        bool(plain_refused) and tagged == sorted((run_id, "CANCELED") for run_id in plain_refused),
    )
    step.check(
        "runs still QUEUED/STARTED",
        0,
        sum(r.status.value in ("QUEUED", "STARTING", "STARTED", "CANCELING") for r in runs),
    )
    return step, {"by_status": dict(by_status), "failures": failures, "runs": table}


# ---------------------------------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keep", action="store_true", help="keep the temp directory (DAGSTER_HOME, logs)")
    args = parser.parse_args(argv)
    env = service_env()
    pg = {k: v for k, v in env.items() if "POSTGRES" in k}
    kafka = {k: v for k, v in env.items() if "KAFKA" in k}
    suffix = uuid.uuid4().hex[:8]
    schema, topic = f"walk_{suffix}", f"walk_{suffix}"
    root = Path(tempfile.mkdtemp(prefix="dagster-walkthrough-"))
    data = root / "clickhouse"
    console.print(f"temp dir {root}; schema {schema}; topics {topic}, {topic}_ranged")
    subprocess.run([sys.executable, "-c", CREATE_ARCHIVE % ARCHIVE_ROWS, str(data)], check=True, timeout=180)
    bed = KafkaTestbed(kafka)
    bed.admin.create_topics([NewTopic(topic, num_partitions=4), NewTopic(f"{topic}_ranged", num_partitions=1)])
    deadline = time.monotonic() + 30
    while {topic, f"{topic}_ranged"} - set(bed.admin.list_topics(timeout=10).topics) and time.monotonic() < deadline:
        time.sleep(0.2)
    for i in range(RANGED_ROWS):
        bed.send(f"{topic}_ranged", json.dumps({"id": i, "v": i}).encode(), key=str(i).encode())
    bed.flush()
    pipelines = root / "pipelines"
    write_pipelines(pipelines, schema, topic)
    extra_env = {
        "PYTHONPATH": os.pathsep.join([str(ROOT / "engine"), str(ROOT)]),  # runs load this checkout
        "STREAMLING__CLICKHOUSE_SOURCE__PATH": str(data),
        "STREAMLING__CLICKHOUSE_SINK__PATH": str(data),
    }
    started = time.monotonic()
    walk: Walk | None = None
    stray_error = None
    try:
        with running_dagster_dev(
            root, pg, kafka, pipelines=pipelines, ready_job="hyb__backfill_then_stream", extra_env=extra_env
        ) as dev:
            console.print(f"dagster dev ready on {dev.url} after {time.monotonic() - started:.1f} s")
            walk = Walk(dev, bed, pg, schema, topic)
            for action in (
                walk.materialize,
                walk.rerun_partition,
                walk.stream,
                walk.try_to_break_it,
                walk.terminate_and_resume,
                walk.crash_and_keep,
                walk.script_run,
            ):
                action()
                if not walk.steps[-1].ok and walk.steps[-1].error:
                    break  # a step that could not run leaves the next without its premise
            walk.stop_stream()
            walk.audit_sinks()
            walk.audit_assets()
    except AssertionError as exc:  # running_dagster_dev: strays that outlived the group, or not ready
        stray_error = str(exc)[-2000:]
    killed = walk.killed_run if walk else ""
    run_step, runs = audit_runs(root / "dagster_home", killed, walk.plain_refused if walk else [])
    show(run_step)
    cleanup = Step("clean-up")
    cleanup.check("processes outliving dagster dev", "none", stray_error or "none", stray_error is None)
    drop_schema(pg, schema)
    bed.admin.delete_topics([topic, f"{topic}_ranged"])
    bed.close()
    show(cleanup)
    steps = [*(walk.steps if walk else []), run_step, cleanup]
    ok = all(s.ok for s in steps) and walk is not None and len(walk.steps) >= 10
    path = record(
        "dagster-walkthrough",
        {
            "ok": ok,
            "total_sec": round(time.monotonic() - started, 1),
            "killed_run": killed,
            "killed_run_status": walk.killed_status if walk else None,
            "steps": [
                {
                    "name": s.name,
                    "seconds": s.seconds,
                    "ok": s.ok,
                    "error": s.error,
                    "checks": [vars(c) for c in s.checks],
                }
                for s in steps
            ],
            "runs": runs,
        },
    )
    console.print(f"[bold]{'ALL CHECKS HELD' if ok else 'SOME CHECKS FAILED'}[/bold]; results in {path}")
    if not args.keep:
        import shutil

        shutil.rmtree(root, ignore_errors=True)
    else:
        console.print(f"kept {root}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
