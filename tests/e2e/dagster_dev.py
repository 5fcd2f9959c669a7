"""`dagster dev` as a black box: the webserver and the daemon on a free port, over two pipeline files.

`running_dagster_dev` starts it in its own process group with a fresh DAGSTER_HOME (the repository's
`dagster.yaml`, so runs go through the QueuedRunCoordinator), waits until GraphQL lists the backfill job and
the daemons report healthy, and on exit ends the whole process group and anything else started from it.

Code changes under `streamling_dagster/` while it runs are not picked up by the UI until "Reload definitions",
but a run's own process loads them: a run can then fail on a definition the UI did not know.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil

from tests.e2e.cli import as_from_a_terminal, cli_env

REPO = Path(__file__).resolve().parents[2]
DAGSTER = str(Path(sys.executable).with_name("dagster"))
LOCATION = "streamling_dagster"
START_TIMEOUT_SEC = 180
STOP_TIMEOUT_SEC = 60
"""How long `dagster dev` may take to end on SIGTERM to its process group (docs/dagster.md, walkthrough step 5)."""
STRAY_GRACE_SEC = 5.0
"""How long a process started from `dagster dev` may take to end on its own once the group is gone."""
DAEMONS = ("QUEUED_RUN_COORDINATOR", "SCHEDULER", "SENSOR")
FINAL_STATUSES = ("SUCCESS", "FAILURE", "CANCELED")

JOBS_QUERY = """
query {
  workspaceOrError {
    __typename
    ... on Workspace {
      locationEntries {
        name
        loadStatus
        locationOrLoadError {
          __typename
          ... on PythonError { message }
          ... on RepositoryLocation { repositories { name jobs { name } } }
        }
      }
    }
  }
}
"""

DAEMONS_QUERY = """
query { instance { daemonHealth { allDaemonStatuses { daemonType healthy required } } } }
"""

REPOSITORY_QUERY = "query { repositoriesOrError { ... on RepositoryConnection { nodes { name location { name } } } } }"
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

RUN_STATUS_QUERY = """
query RunStatus($runId: ID!) {
  runOrError(runId: $runId) {
    __typename
    ... on Run { status }
    ... on PythonError { message }
  }
}
"""


@dataclass
class DagsterDev:
    url: str
    port: int
    home: Path
    pipelines: Path
    schema: str
    topic: str
    env: dict[str, str]
    log: Path
    process: subprocess.Popen = field(repr=False)
    client: Any = field(default=None, repr=False)
    """A `dagster_graphql.DagsterGraphQLClient` on the webserver, set once it answers."""

    def graphql(self, query: str, variables: dict[str, Any] | None = None, timeout: float = 30) -> dict[str, Any]:
        response = httpx.post(
            f"{self.url}/graphql", json={"query": query, "variables": variables or {}}, timeout=timeout
        )
        response.raise_for_status()
        body = response.json()
        if body.get("errors"):
            raise AssertionError(f"GraphQL errors: {body['errors']}")
        return body["data"]

    def launch(self, job: str, assets: list[list[str]] | None = None) -> dict[str, Any]:
        """Launch `job` (with `assets`, an asset selection, as the UI's Materialize buttons send it) the way the
        UI does; returns the `launchPipelineExecution` answer (a PythonError answer comes with HTTP 500, the
        webserver's choice for errors it captured, data included)."""
        (repository,) = self.graphql(REPOSITORY_QUERY)["repositoriesOrError"]["nodes"]
        selector = {
            "repositoryName": repository["name"],
            "repositoryLocationName": repository["location"]["name"],
            "pipelineName": job,
        }
        if assets is not None:
            selector["assetSelection"] = [{"path": p} for p in assets]
        params = {"selector": selector, "mode": "default", "executionMetadata": {"tags": []}, "runConfigData": {}}
        response = httpx.post(
            f"{self.url}/graphql", json={"query": LAUNCH, "variables": {"params": params}}, timeout=60
        )
        assert response.status_code in (200, 500), f"{response.status_code}: {response.text[:3000]}"
        return response.json()["data"]["launchPipelineExecution"]

    def table_key(self, table: str) -> Any:
        """The asset key of a table in the test schema: `postgres/default/<schema>/<table>` (the logical connection
        name, whatever database the environment names)."""
        import dagster as dg

        return dg.AssetKey(["postgres", "default", self.schema, table])

    def instance(self):
        """The instance `dagster dev` runs on (sqlite storage under `home`); use it as a context manager."""
        import dagster as dg

        return dg.DagsterInstance.from_config(str(self.home))

    def log_tail(self, chars: int = 6000) -> str:
        return self.log.read_text(errors="replace")[-chars:] if self.log.exists() else "(no log)"

    def run_status(self, run_id: str) -> str:
        found = self.graphql(RUN_STATUS_QUERY, {"runId": run_id})["runOrError"]
        if found["__typename"] != "Run":
            raise AssertionError(f"run {run_id}: {found}")
        return found["status"]

    def wait_for_run(self, run_id: str, statuses: Iterable[str] = FINAL_STATUSES, timeout: float = 180) -> str:
        """Poll the run's status over GraphQL until it is one of `statuses`; return it."""
        wanted = set(statuses)
        deadline = time.monotonic() + timeout
        status = None
        while time.monotonic() < deadline:
            status = self.run_status(run_id)
            if status in wanted:
                return status
            self._check_alive()
            time.sleep(0.5)
        raise AssertionError(f"run {run_id} still {status} after {timeout:.0f} s\n{self.log_tail()}")

    def _check_alive(self) -> None:
        if self.process.poll() is not None:
            raise AssertionError(f"dagster dev exited with {self.process.returncode}\n{self.log_tail()}")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def write_pipelines(directory: Path, schema: str, topic: str) -> None:
    directory.mkdir(parents=True)
    (directory / "shop.yaml").write_text(
        textwrap.dedent(
            f"""\
            sources:
              orders: {{type: generator, rows: 2000, primary_key: id}}
            sinks:
              stored: {{type: postgres, from: orders, schema: {schema}, table: orders}}
            """
        )
    )
    (directory / "ticker.yaml").write_text(
        textwrap.dedent(
            f"""\
            sources:
              ticks: {{type: kafka, topic: {topic}, data_format: json, schema: {{id: bigint, v: string}}, primary_key: id, starting_offsets: earliest}}
            sinks:
              stored: {{type: postgres, from: ticks, schema: {schema}, table: ticks}}
            orchestration: {{restart_backoff_sec: 2}}
            """
        )
    )
    (directory / "ranged.yaml").write_text(ranged_pipeline(schema, topic, factor=1))
    (directory / "slow.yaml").write_text(  # a backfill that lasts (~15 s of rows): runs wait behind it
        textwrap.dedent(
            f"""\
            sources:
              drip: {{type: generator, rows: 300, rows_per_second: 20, primary_key: id}}
            sinks:
              dripped: {{type: postgres, from: drip, schema: {schema}, table: dripped}}
            """
        )
    )
    (directory / "spot.yaml").write_text(  # a quick backfill, materialized together with slow's
        textwrap.dedent(
            f"""\
            sources:
              dots: {{type: generator, rows: 50, primary_key: id}}
            sinks:
              spotted: {{type: postgres, from: dots, schema: {schema}, table: spotted}}
            """
        )
    )


def ranged_pipeline(schema: str, topic: str, factor: int) -> str:
    """A partitioned backfill: offsets 0-50 and 50-100 of topic `<topic>_ranged` (the test creates it), scaled
    by `factor` (a test edits it to see a re-run re-apply its range)."""
    return textwrap.dedent(
        f"""\
        sources:
          feed: {{type: kafka, topic: {topic}_ranged, data_format: json, schema: {{id: bigint, v: bigint}}, primary_key: id, ending_offsets: latest}}
        transforms:
          scaled: {{type: sql, primary_key: id, sql: "SELECT id, v * {factor} AS v FROM feed"}}
        sinks:
          ranged: {{type: postgres, from: scaled, schema: {schema}, table: ranged}}
        orchestration:
          backfill_partitions: {{start: 0, end: 100, step: 50}}
        """
    )


def _wait_until_ready(dev: DagsterDev, ready_job: str = "shop__backfill") -> None:
    """Ready by protocol: GraphQL lists `ready_job` in the code location, and the daemons are healthy."""
    deadline = time.monotonic() + START_TIMEOUT_SEC
    last = "no answer yet"
    jobs_seen = False
    while time.monotonic() < deadline:
        dev._check_alive()
        try:
            if not jobs_seen:
                entries = dev.graphql(JOBS_QUERY, timeout=10)["workspaceOrError"].get("locationEntries", [])
                for entry in entries:
                    loaded = entry["locationOrLoadError"] or {}
                    if loaded.get("__typename") == "PythonError":
                        raise AssertionError(f"code location {entry['name']} failed to load: {loaded['message']}")
                    jobs = {j["name"] for r in loaded.get("repositories", []) for j in r["jobs"]}
                    jobs_seen = jobs_seen or ready_job in jobs
                last = f"locations: {[(e['name'], e['loadStatus']) for e in entries]}"
            if jobs_seen:
                statuses = dev.graphql(DAEMONS_QUERY, timeout=10)["instance"]["daemonHealth"]["allDaemonStatuses"]
                healthy = {s["daemonType"] for s in statuses if s["healthy"]}
                if healthy.issuperset(DAEMONS):
                    # What the first-visit "Join the Dagster community" dialog's Skip does, so a browser sees the app.
                    dev.graphql("mutation { setNuxSeen }")
                    return
                last = f"daemons: {statuses}"
        except (httpx.HTTPError, KeyError, TypeError) as exc:
            last = f"{type(exc).__name__}: {exc}"
        time.sleep(1)
    raise AssertionError(f"dagster dev not ready after {START_TIMEOUT_SEC} s ({last})\n{dev.log_tail()}")


def _started_from(home: Path) -> list[psutil.Process]:
    """Every live process whose environment carries this DAGSTER_HOME: what `dagster dev` started, even if
    re-parented or in another session (code servers, run workers, their Spark JVMs)."""
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.pid != os.getpid() and proc.environ().get("DAGSTER_HOME") == str(home):
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def stop(dev: DagsterDev) -> list[str]:
    """End the process group as systemd, `docker stop`, Kubernetes and a terminal do: SIGTERM to the whole group
    at once; SIGKILL whatever is left after STOP_TIMEOUT_SEC; then SIGKILL, by PID, anything else started from
    it. Returns descriptions of what had to be killed (should be none). Safe to call again once it has ended.

    Measured on 2 cores: idle 3 s; a live stream run 19 s (the run worker commits and stops Spark, and the code
    server waits for it); a backfill stopped while its JVM booted 27 s — that one left its JVM running for good
    before `start_jvm` launched it on a thread no signal interrupts."""
    pgid = dev.process.pid  # start_new_session: the group's id is the leader's PID
    deadline = time.monotonic() + STOP_TIMEOUT_SEC
    described = []
    with suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGTERM)
    while _group_alive(pgid) and time.monotonic() < deadline:
        dev.process.poll()  # reap the leader: a zombie still counts as a member of its group
        time.sleep(0.2)
    if _group_alive(pgid):
        described += [f"{p.pid} {' '.join(p.cmdline())[:200]} (group)" for p in _group_members(pgid)]
        with suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)
    dev.process.wait(timeout=10)
    # A process that ends within STRAY_GRACE_SEC is shutting down, not left behind: one CI run caught a process
    # mid-exit (its command line already gone) right after the group ended.
    _, strays = psutil.wait_procs(_started_from(dev.home), timeout=STRAY_GRACE_SEC)
    for proc in strays:
        with suppress(psutil.NoSuchProcess):
            described.append(f"{proc.pid} {' '.join(proc.cmdline())[:200]}")
            proc.kill()
    psutil.wait_procs(strays, timeout=10)
    return described


def _group_members(pgid: int) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter():
        with suppress(psutil.Error, ProcessLookupError):
            if os.getpgid(proc.pid) == pgid and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
    return found


def drop_schema(postgres_env: dict[str, str], schema: str) -> None:
    import psycopg

    prefix = "STREAMLING__STATE_BACKEND__POSTGRES__"
    with psycopg.connect(
        host=postgres_env[prefix + "HOST"],
        port=int(postgres_env[prefix + "PORT"]),
        user=postgres_env[prefix + "USER"],
        password=postgres_env[prefix + "PASSWORD"],
        dbname=postgres_env[prefix + "DATABASE"],
        autocommit=True,
    ) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@contextmanager
def running_dagster_dev(
    root: Path,
    postgres_env: dict[str, str],
    kafka_env: dict[str, str],
    pipelines: Path | None = None,
    ready_job: str = "shop__backfill",
    extra_pipelines: dict[str, str] | None = None,
    extra_env: dict[str, str] | None = None,
) -> Iterator[DagsterDev]:
    """Over `pipelines` (a directory of pipeline files; default: shop.yaml and ticker.yaml written under `root`),
    ready once `ready_job` is listed. `extra_pipelines`: more pipeline files for the default directory (name →
    text; `{schema}` is replaced by the Postgres schema)."""
    schema = f"dd_{uuid.uuid4().hex[:8]}"
    topic = f"dagster_ticks_{uuid.uuid4().hex[:8]}"
    home = root / "dagster_home"
    home.mkdir(parents=True)
    shutil.copy(REPO / "infra" / "dagster" / "dagster.yaml", home / "dagster.yaml")
    if pipelines is None:
        pipelines = root / "pipelines"
        write_pipelines(pipelines, schema, topic)
        for name, text in (extra_pipelines or {}).items():
            (pipelines / name).write_text(textwrap.dedent(text).replace("{schema}", schema))
    env = cli_env(
        root,
        {
            **postgres_env,
            **kafka_env,
            **(extra_env or {}),
            "DAGSTER_HOME": str(home),
            "STREAMLING_DAGSTER_PIPELINES": str(pipelines),
        },
    )
    port = free_port()
    log = root / "dagster_dev.log"
    with log.open("ab") as out:
        process = subprocess.Popen(
            [DAGSTER, "dev", "-m", LOCATION, "-h", "127.0.0.1", "-p", str(port)],
            cwd=root,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=as_from_a_terminal,
        )
    dev = DagsterDev(
        url=f"http://127.0.0.1:{port}",
        port=port,
        home=home,
        pipelines=pipelines,
        schema=schema,
        topic=topic,
        env=env,
        log=log,
        process=process,
    )
    strays: list[str] = []
    try:
        _wait_until_ready(dev, ready_job)
        from dagster_graphql import DagsterGraphQLClient

        dev.client = DagsterGraphQLClient("127.0.0.1", port_number=port)
        yield dev
    finally:
        strays = stop(dev)
        drop_schema(postgres_env, schema)
    assert not strays, f"processes started by dagster dev outlived its process group: {strays}"
