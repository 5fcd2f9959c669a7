"""Dagster streams on the shared engine: N ``<pipeline>__stream`` runs under ``dagster dev`` submitting to one
``streamling serve``, against one stream on its own Spark.

Against the running local services (Postgres, and the Postgres state backend as a deployment would use), it starts
``streamling serve`` on a free port in 18170-18179 (its embedded ClickHouse data path in a temp dir) and ``dagster
dev`` (a temp DAGSTER_HOME with infra/dagster/dagster.yaml, STREAMLING_DAGSTER_PIPELINES a temp dir of N generated
pipelines, STREAMLING__ENGINE_URL set, the engine's token file under their shared STREAMLING_HOME). It launches the N
stream jobs over GraphQL, as the UI does, and measures per run the time from the op's STEP_START (its event-log
timestamp) to the first row in its sink: a Postgres table polled from here, or for the pipelines writing the
engine's embedded ClickHouse (readable only inside the engine's process) the first committed epoch the engine
reports (``GET /runs/{id}``). The engine's own timestamps split that time: submitted (the op's work before it
posts), admitted (``engine.max_starting_runs``), running (SQL analysed, sources open), first commit.

Once every run wrote, it holds for ``--hold-sec``: JVMs the bench started, RSS of the engine, the run workers and
``dagster dev``'s processes, and the ClickHouse pipelines both running with their row counts growing; a further
pipeline submitted to the engine then reads both ClickHouse tables (in the engine's process, the only one that can
open the data path) into Postgres, where they are counted. Then every run is terminated over GraphQL and must end
CANCELED. The peer, one stream with ``engine_url`` overridden empty (its own Spark in its run worker), is measured
the same way in the same ``dagster dev``. Everything is stopped (SIGTERM, SIGKILL after a bound) and dropped.

    PYTHONPATH=engine:. python bench/dagster_engine.py --streams 20
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
from contextlib import suppress
from pathlib import Path
from typing import Any

import kafka_data
import psutil
import psycopg
from harness import RESULTS, record

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.e2e.dagster_dev import REPOSITORY_QUERY, DagsterDev, running_dagster_dev  # noqa: E402
from tests.e2e.engine import Engine, settings_document, submit_all  # noqa: E402

ENGINE_PORTS = range(18170, 18180)
ENGINE_STOP_SEC = 60.0
FIRST_ROW_TIMEOUT_SEC = 600.0
"""From the launches: Dagster starts the run workers one after another, ~10-25 s each on a loaded machine."""
CANCEL_TIMEOUT_SEC = 120.0
POLL_SEC = 0.1
WORKER = re.compile(r"Executing steps in process \(pid: (\d+)\)")
RATE = 20
"""Rows per second each generator stream makes: a trickle, so the figures are start-up, not throughput."""

LOGS_QUERY = """
query Logs($runId: ID!) {
  logsForRun(runId: $runId, limit: 2000) {
    __typename
    ... on EventConnection {
      events {
        __typename
        ... on MessageEvent { timestamp message }
        ... on ExecutionStepStartEvent { stepKey }
      }
    }
  }
}
"""
LAUNCH = """
mutation Launch($params: ExecutionParams!) {
  launchPipelineExecution(executionParams: $params) {
    __typename
    ... on LaunchRunSuccess { run { runId } }
    ... on PythonError { message }
    ... on Error { message }
  }
}
"""
STOPPED_CLEANLY = ("all_canceled", "all_steps_succeeded")
STEPS_QUERY = "query Steps($runId: ID!) { runOrError(runId: $runId) { ... on Run { stepStats { status } } } }"
TERMINATE = """
mutation Terminate($runIds: [String!]!) {
  terminateRuns(runIds: $runIds) {
    __typename
    ... on TerminateRunsResult {
      terminateRunResults { __typename ... on TerminateRunFailure { message } }
    }
    ... on PythonError { message }
  }
}
"""


def services_env() -> dict[str, str]:
    """The services' STREAMLING__ variables (`kafka_data.services_env`: started if needed), with the Postgres
    state backend on the same server."""
    found = kafka_data.services_env("postgres")
    pg = "STREAMLING__POSTGRES_SINK__"
    state = "STREAMLING__STATE_BACKEND__"
    return {
        **found,
        f"{state}BACKEND_TYPE": "Postgres",
        f"{state}POSTGRES__HOST": found[pg + "HOST"],
        f"{state}POSTGRES__PORT": found[pg + "PORT"],
        f"{state}POSTGRES__USER": found[pg + "USER"],
        f"{state}POSTGRES__PASSWORD": found[pg + "PASS"],
        f"{state}POSTGRES__DATABASE": found[pg + "DB"],
    }


def connect(env: dict[str, str]) -> psycopg.Connection:
    pg = "STREAMLING__POSTGRES_SINK__"
    return psycopg.connect(
        host=env[pg + "HOST"],
        port=int(env[pg + "PORT"]),
        user=env[pg + "USER"],
        password=env[pg + "PASS"],
        dbname=env[pg + "DB"],
        autocommit=True,
    )


def free_engine_port() -> int:
    import socket

    for port in ENGINE_PORTS:
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise SystemExit(f"no free engine port in {ENGINE_PORTS.start}-{ENGINE_PORTS.stop - 1}")


def write_pipelines(directory: Path, n: int, clickhouse: int, schema: str) -> dict[str, str]:
    """`s00`… (the first `clickhouse` write embedded ClickHouse tables, the rest Postgres tables) and `peer`;
    returns pipeline name → sink kind."""
    directory.mkdir(parents=True)
    kinds: dict[str, str] = {}
    for i in range(n):
        name = f"s{i:02d}"
        if i < clickhouse:
            sink = f"{{type: clickhouse, from: g, table: {name}}}"
            kinds[name] = "clickhouse"
        else:
            sink = f"{{type: postgres, from: g, schema: {schema}, table: {name}}}"
            kinds[name] = "postgres"
        (directory / f"{name}.yaml").write_text(
            textwrap.dedent(
                f"""\
                sources:
                  g: {{type: generator, rows_per_second: {RATE}, primary_key: id}}
                sinks:
                  out: {sink}
                """
            )
        )
    (directory / "peer.yaml").write_text(
        textwrap.dedent(
            f"""\
            sources:
              g: {{type: generator, rows_per_second: {RATE}, primary_key: id}}
            sinks:
              out: {{type: postgres, from: g, schema: {schema}, table: peer}}
            """
        )
    )
    kinds["peer"] = "postgres"
    return kinds


def launch(dev: DagsterDev, job: str, run_config: dict[str, Any] | None = None) -> str:
    (repository,) = dev.graphql(REPOSITORY_QUERY)["repositoriesOrError"]["nodes"]
    selector = {
        "repositoryName": repository["name"],
        "repositoryLocationName": repository["location"]["name"],
        "pipelineName": job,
    }
    params = {"selector": selector, "mode": "default", "runConfigData": run_config or {}}
    answer = dev.graphql(LAUNCH, {"params": params}, timeout=60)["launchPipelineExecution"]
    if answer["__typename"] != "LaunchRunSuccess":
        raise SystemExit(f"launching {job}: {answer}")
    return answer["run"]["runId"]


def run_events(dev: DagsterDev, run_id: str) -> dict[str, Any]:
    """The event-log moments of a run: RUN_START, the op's STEP_START, and the engine line (epoch seconds); and
    the run worker's pid."""
    events = dev.graphql(LOGS_QUERY, {"runId": run_id})["logsForRun"]["events"]
    out: dict[str, Any] = {}
    for event in events:
        at = float(event["timestamp"]) / 1000
        kind = event["__typename"]
        if kind == "RunStartEvent":
            out.setdefault("run_start", at)
        elif kind == "ExecutionStepStartEvent":
            out.setdefault("step_start", at)
        elif kind == "EngineEvent" and (m := WORKER.search(event["message"])):
            out.setdefault("worker_pid", int(m.group(1)))
        elif kind == "LogMessageEvent" and event["message"].startswith("Streaming "):
            out.setdefault("settings_line", at)
        elif kind == "LogMessageEvent" and event["message"].startswith("Running on the warm engine at"):
            out.setdefault("engine_line", at)
            out["engine_message"] = event["message"]
    return out


def table_has_rows(conn: psycopg.Connection, schema: str, table: str) -> bool:
    regclass = f'"{schema}"."{table}"'
    if conn.execute("SELECT to_regclass(%s)", (regclass,)).fetchone()[0] is None:
        return False
    return conn.execute(f"SELECT EXISTS (SELECT 1 FROM {regclass})").fetchone()[0]


def engine_runs(engine: Engine) -> dict[str, dict[str, Any]]:
    """The engine's live runs by pipeline name (the newest of each)."""
    found: dict[str, dict[str, Any]] = {}
    for run in sorted(engine.get("/runs")["runs"], key=lambda r: r["submitted_at"]):
        found[run["name"]] = run
    return found


def first_rows(
    dev: DagsterDev,
    engine: Engine,
    conn: psycopg.Connection,
    schema: str,
    runs: dict[str, str],
    kinds: dict[str, str],
    on_engine: bool,
) -> dict[str, dict[str, Any]]:
    """Poll every sink until each has a row; per pipeline: when (epoch seconds) and the engine's timestamps."""
    seen: dict[str, dict[str, Any]] = {}
    deadline = time.monotonic() + FIRST_ROW_TIMEOUT_SEC
    while len(seen) < len(runs) and time.monotonic() < deadline:
        views = engine_runs(engine) if on_engine else {}
        for name in runs:
            if name in seen:
                continue
            view = views.get(name)
            if kinds[name] == "postgres":
                hit = table_has_rows(conn, schema, name)
            else:
                hit = view is not None and view["sources"].get("g", {}).get("epochs", 0) >= 1
            if hit:
                seen[name] = {"first_row": time.time(), "engine": view}
        time.sleep(POLL_SEC)
    missing = sorted(set(runs) - set(seen))
    if missing:
        statuses = {name: dev.run_status(runs[name]) for name in missing}
        raise SystemExit(f"no first row after {FIRST_ROW_TIMEOUT_SEC:.0f} s: {statuses}\n{dev.log_tail()}")
    return seen


def timings(dev: DagsterDev, runs: dict[str, str], seen: dict[str, dict[str, Any]], launched: dict[str, float]):
    """Per run: seconds from STEP_START to the first row, and where they went."""
    out = {}
    for name, run_id in runs.items():
        events = run_events(dev, run_id)
        step = events["step_start"]
        row = {
            "run_id": run_id,
            "launch_to_run_start_sec": round(events["run_start"] - launched[name], 2),
            "run_start_to_step_start_sec": round(step - events["run_start"], 2),
            "step_start_to_first_row_sec": round(seen[name]["first_row"] - step, 2),
            "on_engine": "engine_line" in events,
            "worker_pid": events.get("worker_pid"),
        }
        view = seen[name]["engine"]
        if view is not None:
            sources = view["sources"].get("g", {})
            marks = {
                "settings_loaded": events.get("settings_line"),
                "engine_answered": events.get("engine_line"),
                "submitted": view["submitted_at"],
                "admitted": view["admitted_at"],
                "running": view["started_at"],
                "first_commit": sources.get("committed_at") if sources.get("epochs") == 1 else None,
            }
            row["step_start_to"] = {k: None if v is None else round(v - step, 2) for k, v in marks.items()}
        out[name] = row
    return out


def breakdown(per_run: dict[str, dict[str, Any]]) -> dict[str, float]:
    """Median seconds of each stretch between STEP_START and the first row, over the runs that have both ends
    (a first commit is known only when the engine was seen at its first epoch)."""
    stretches: dict[str, list[float]] = {}
    for row in per_run.values():
        marks = {"step_start": 0.0, **row.get("step_start_to", {}), "first_row": row["step_start_to_first_row_sec"]}
        known = [(k, v) for k, v in marks.items() if v is not None]
        for (a, at), (b, bt) in itertools.pairwise(known):
            stretches.setdefault(f"{a}->{b}", []).append(bt - at)
    return {k: round(statistics.median(v), 2) for k, v in stretches.items()}


def bench_processes(dev: DagsterDev, engine: Engine, workers: set[int]) -> dict[str, list[psutil.Process]]:
    """The bench's processes by part: the engine's tree, the run workers (`workers`, from their runs' event logs)
    with their children, and the rest of `dagster dev`'s (webserver, daemon, code servers)."""
    parts: dict[str, list[psutil.Process]] = {"engine": [], "run_workers": [], "dagster": []}
    for part, pids in (("engine", {engine.proc.pid}), ("run_workers", workers)):
        for pid in pids:
            with suppress(psutil.NoSuchProcess):
                root = psutil.Process(pid)
                parts[part] += [root, *root.children(recursive=True)]
    taken = {p.pid for procs in parts.values() for p in procs}
    for proc in psutil.process_iter():
        try:
            if proc.pid not in taken and proc.environ().get("DAGSTER_HOME") == str(dev.home):
                parts["dagster"].append(proc)
        except psutil.Error:
            continue
    return parts


def is_java(proc: psutil.Process) -> bool:
    with suppress(psutil.Error):
        return proc.name() == "java" or Path((proc.cmdline() or [""])[0]).name == "java"
    return False


def footprint(dev: DagsterDev, engine: Engine, workers: set[int]) -> dict[str, Any]:
    parts = bench_processes(dev, engine, workers)
    rss: dict[str, float] = {}
    for part, procs in parts.items():
        total = 0
        for proc in procs:
            with suppress(psutil.Error):
                total += proc.memory_info().rss
        rss[part] = round(total / 2**20)
    jvms = [p for procs in parts.values() for p in procs if is_java(p)]
    on_machine = sum(1 for p in psutil.process_iter() if is_java(p))
    return {
        "jvms_started_by_bench": len(jvms),
        "jvms_by_part": {part: sum(1 for p in procs if is_java(p)) for part, procs in parts.items()},
        "jvms_on_machine": on_machine,
        "processes": {part: len(procs) for part, procs in parts.items()},
        "rss_mb": {**rss, "total": round(sum(rss.values()))},
    }


def clickhouse_side_by_side(
    dev: DagsterDev, engine: Engine, runs: dict[str, str], kinds: dict[str, str], hold_sec: float
) -> dict[str, Any]:
    """The ClickHouse pipelines, read through the engine: both running (engine and Dagster) and their sink rows
    at the start and the end of the hold."""
    names = [n for n in runs if kinds[n] == "clickhouse"]

    def rows() -> dict[str, Any]:
        views = engine_runs(engine)
        return {
            n: {
                "engine_state": views[n]["state"],
                "dagster_status": dev.run_status(runs[n]),
                "sink_rows": engine.get(f"/runs/{views[n]['id']}?logs_from=1000000000")["summary"]["sink_rows"].get(
                    "out", 0
                ),
            }
            for n in names
        }

    before = rows()
    time.sleep(hold_sec)
    after = rows()
    growing = all(after[n]["sink_rows"] > before[n]["sink_rows"] for n in names)
    running = all(
        s["engine_state"] == "running" and s["dagster_status"] == "STARTED" for s in (*before.values(), *after.values())
    )
    return {"pipelines": names, "before": before, "after": after, "all_running": running, "all_growing": growing}


def read_clickhouse_through_engine(
    root: Path, engine: Engine, env: dict[str, str], conn: psycopg.Connection, schema: str, tables: list[str]
) -> dict[str, Any]:
    """A job-mode pipeline on the engine reads each ClickHouse table into Postgres: what the tables held."""
    sources = "\n".join(f"  {t}: {{type: clickhouse, table_name: {t}, primary_key: id}}" for t in tables)
    sinks = "\n".join(f"  copy_{t}: {{type: postgres, from: {t}, schema: {schema}, table: copy_{t}}}" for t in tables)
    reader = root / "read_clickhouse.yaml"
    reader.write_text(f"sources:\n{sources}\nsinks:\n{sinks}\n")
    app = f"{env['STREAMLING__APPLICATION_ID']}.reader"
    document = settings_document(root, {**env, "STREAMLING__JOB_MODE": "true", "STREAMLING__APPLICATION_ID": app})
    (run_id,) = submit_all(engine, [reader], document)
    deadline = time.monotonic() + 180
    while not (view := engine.get(f"/runs/{run_id}"))["done"] and time.monotonic() < deadline:
        time.sleep(0.5)
    counts = {t: conn.execute(f'SELECT count(*) FROM "{schema}"."copy_{t}"').fetchone()[0] for t in tables}
    return {"state": view["state"], "error": view["error"], "rows_read": counts}


def terminate(dev: DagsterDev, run_ids: list[str]) -> dict[str, Any]:
    started = time.monotonic()
    answer = dev.graphql(TERMINATE, {"runIds": run_ids}, timeout=120)["terminateRuns"]
    failures = [r for r in answer.get("terminateRunResults", []) if r["__typename"] != "TerminateRunSuccess"]
    statuses = {run_id: dev.wait_for_run(run_id, timeout=CANCEL_TIMEOUT_SEC) for run_id in run_ids}
    steps = [dev.graphql(STEPS_QUERY, {"runId": run_id})["runOrError"]["stepStats"] for run_id in run_ids]
    return {
        "step_statuses": sorted({step["status"] for stats in steps for step in stats}),
        "requested": len(run_ids),
        "refused": failures,
        "statuses": sorted(set(statuses.values())),
        "all_canceled": all(s == "CANCELED" for s in statuses.values()) and not failures,
        "all_steps_succeeded": all(step["status"] == "SUCCESS" for stats in steps for step in stats),
        "took_sec": round(time.monotonic() - started, 1),
    }


def stop_engine(engine: Engine) -> int | None:
    if engine.proc.poll() is None:
        engine.proc.send_signal(signal.SIGTERM)
    try:
        return engine.proc.wait(ENGINE_STOP_SEC)
    except subprocess.TimeoutExpired:
        with suppress(ProcessLookupError):
            os.killpg(engine.proc.pid, signal.SIGKILL)
        engine.proc.wait(30)
        return None


def spread(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    p90 = ordered[min(len(ordered) - 1, max(0, round(0.9 * len(ordered)) - 1))]
    return {
        "median": round(statistics.median(ordered), 2),
        "p90": round(p90, 2),
        "max": round(ordered[-1], 2),
        "min": round(ordered[0], 2),
    }


def cleanup(env: dict[str, str], schema: str, app: str) -> None:
    with connect(env) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        for table in ("streamling.state", "streamling.leases"):
            with suppress(psycopg.errors.UndefinedTable):
                conn.execute(f"DELETE FROM {table} WHERE namespace LIKE %s", (f"{app}.%",))


def run(args: argparse.Namespace) -> dict[str, Any]:
    load_before = os.getloadavg()
    env = services_env()
    root = Path(tempfile.mkdtemp(prefix="bench_dagster_engine_"))
    schema = f"bench_dagengine_{uuid.uuid4().hex[:8]}"
    app = f"bench_dagengine_{uuid.uuid4().hex[:8]}"
    data = root / "clickhouse"
    kinds = write_pipelines(root / "pipelines", args.streams, args.clickhouse, schema)
    env.update(
        {
            "STREAMLING__APPLICATION_ID": app,
            "STREAMLING__CLICKHOUSE_SINK__PATH": str(data),
            "STREAMLING__CLICKHOUSE_SOURCE__PATH": str(data),
            "PYTHONUNBUFFERED": "1",
        }
    )
    port = free_engine_port()
    # The engine's master as a deployment's: local[*], which it runs as cores x task_slots_per_core.
    engine_started = time.monotonic()
    # `tests.e2e.engine.Engine` passes `--port 0`; the later `--port` wins (argparse), a port of this bench's range.
    engine = Engine(root, {**env, "STREAMLING__SPARK__MASTER": "local[*]"}, "--port", str(port))
    result: dict[str, Any] = {
        "streams": args.streams,
        "clickhouse_streams": args.clickhouse,
        "engine_ready_sec": round(time.monotonic() - engine_started, 1),
        "engine_url": engine.url,
        "rows_per_second_each": RATE,
        "loadavg_before": [round(x, 2) for x in load_before],
    }
    try:
        with connect(env) as conn:
            dev_env = {**env, "STREAMLING__ENGINE_URL": engine.url or ""}
            dagster_started = time.monotonic()
            with running_dagster_dev(root, dev_env, {}, pipelines=root / "pipelines", ready_job="s00__stream") as dev:
                result["dagster_ready_sec"] = round(time.monotonic() - dagster_started, 1)
                streams = {name: name for name in kinds if name != "peer"}
                launched: dict[str, float] = {}
                runs: dict[str, str] = {}
                for name in streams:
                    launched[name] = time.time()
                    runs[name] = launch(dev, f"{name}__stream")
                seen = first_rows(dev, engine, conn, schema, runs, {n: kinds[n] for n in runs}, on_engine=True)
                per_run = timings(dev, runs, seen, launched)
                result["loadavg_during"] = [round(x, 2) for x in os.getloadavg()]
                result["engine_runs"] = per_run
                result["engine_first_row_sec"] = spread([r["step_start_to_first_row_sec"] for r in per_run.values()])
                result["engine_breakdown_median_sec"] = breakdown(per_run)
                result["all_on_engine"] = all(r["on_engine"] for r in per_run.values())
                workers = {r["worker_pid"] for r in per_run.values() if r["worker_pid"]}
                result["dagster_statuses"] = sorted(dev.run_status(run_id) for run_id in runs.values())
                result["footprint_on_engine"] = footprint(dev, engine, workers)
                if args.clickhouse:
                    result["clickhouse"] = clickhouse_side_by_side(dev, engine, runs, kinds, args.hold_sec)
                    tables = [n for n in runs if kinds[n] == "clickhouse"]
                    result["clickhouse"]["read_through_engine"] = read_clickhouse_through_engine(
                        root, engine, env, conn, schema, tables
                    )
                result["footprint_after_hold"] = footprint(dev, engine, workers)
                result["terminate_engine_runs"] = terminate(dev, list(runs.values()))

                if not args.no_peer:
                    overrides = {"resources": {"streamling": {"config": {"overrides": {"engine_url": ""}}}}}
                    launched = {"peer": time.time()}
                    peer = {"peer": launch(dev, "peer__stream", overrides)}
                    seen = first_rows(dev, engine, conn, schema, peer, kinds, on_engine=False)
                    result["peer_run"] = timings(dev, peer, seen, launched)["peer"]
                    result["peer_footprint"] = footprint(dev, engine, {result["peer_run"]["worker_pid"]})
                    result["terminate_peer"] = terminate(dev, list(peer.values()))
                result["loadavg_after"] = [round(x, 2) for x in os.getloadavg()]
    finally:
        result["engine_exit"] = stop_engine(engine)
        cleanup(env, schema, app)
        shutil.rmtree(root, ignore_errors=True)
    return result


def show(result: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"Dagster streams on the shared engine ({result['streams']} streams)")
    columns = ("run", "sink", "run start→step", "step→settings", "→engine ok", "→submitted", "→admitted", "→running")
    columns += ("→1st commit", "→1st row")
    for column in columns:
        table.add_column(column, justify="right")
    for name, row in result["engine_runs"].items():
        marks = row.get("step_start_to", {})
        keys = ("settings_loaded", "engine_answered", "submitted", "admitted", "running", "first_commit")
        cell = [marks.get(k) for k in keys]
        table.add_row(
            name,
            "clickhouse" if name in result.get("clickhouse", {}).get("pipelines", []) else "postgres",
            f"{row['run_start_to_step_start_sec']:.2f}",
            *("" if v is None else f"{v:.2f}" for v in cell),
            f"{row['step_start_to_first_row_sec']:.2f}",
        )
    if "peer_run" in result:
        peer = result["peer_run"]
        table.add_row(
            "peer (own Spark)",
            "postgres",
            f"{peer['run_start_to_step_start_sec']:.2f}",
            *[""] * 6,
            f"{peer['step_start_to_first_row_sec']:.2f}",
        )
    console = Console()
    console.print(table)
    keys = ("engine_first_row_sec", "engine_breakdown_median_sec", "footprint_on_engine", "peer_footprint")
    summary = {k: result.get(k) for k in keys}
    summary["peer_first_row_sec"] = result.get("peer_run", {}).get("step_start_to_first_row_sec")
    summary["clickhouse"] = {k: v for k, v in result.get("clickhouse", {}).items() if k not in ("before", "after")}
    summary["terminate"] = [result.get("terminate_engine_runs"), result.get("terminate_peer")]
    summary["loadavg"] = [result.get(k) for k in ("loadavg_before", "loadavg_during", "loadavg_after")]
    console.print_json(json.dumps(summary))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, default=20, help="stream jobs launched on the engine")
    parser.add_argument("--clickhouse", type=int, default=2, help="of them, writing the engine's embedded ClickHouse")
    parser.add_argument("--hold-sec", type=float, default=15.0, help="side by side, once every stream wrote")
    parser.add_argument("--no-peer", action="store_true", help="skip the stream on its own Spark")
    parser.add_argument("--out", type=Path, default=RESULTS, help="results directory")
    args = parser.parse_args()
    if not 0 <= args.clickhouse <= args.streams:
        parser.error("--clickhouse must be between 0 and --streams")
    result = run(args)
    show(result)
    path = record("dagster-engine", result, args.out)
    print(f"results: {path}")
    ok = (
        result.get("all_on_engine")
        and all(result["terminate_engine_runs"][k] for k in STOPPED_CLEANLY)
        and all(result.get("terminate_peer", {}).get(k, True) for k in STOPPED_CLEANLY)
        and (not args.clickhouse or (result["clickhouse"]["all_running"] and result["clickhouse"]["all_growing"]))
    )
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
