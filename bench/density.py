"""Scenario 6, *density*: N pipelines at a trickle, side by side, and what they cost together.

Each pipeline reads its own Kafka topic (one partition, Avro), fed at ``RATE`` records/s for the whole cell,
keeps the records with ``sel_key <> 0`` (SQL filter) and upserts them into its own Postgres table. Contenders:

- ``engine``: one ``streamling serve`` with N runs, all N submitted at the same moment over its API;
- ``cli``: N ``streamling PIPELINE`` processes (a JVM each);
- ``hand_loop``: N hand-written loops (bench/peers/hand_loop.py, flushing every ``FLUSH_SEC``, as ours commits);
- ``quix``: N Quix Streams applications (bench/peers/quix_app.py, checkpoint every ``FLUSH_SEC``).

Per cell: the time from starting (submitting) the N-th pipeline to its first row in Postgres; then, over
``window_sec`` once every pipeline wrote a row, the CPU cores and the PSS of everything the contender runs
(the services are not the contender's); then the feed stops, every table must end exact (every produced id with
``sel_key <> 0``, once), and for the engine the idle cost is measured over ``idle_sec`` more (nothing to read).
Ours run with the Postgres state backend, as a production deployment would; positions and sinks are exact
whatever the backend.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import kafka_data
import psutil
from harness import role, streamling_cmd, tree_pss

RATE = 100
MASTER = "local[*]"
"""Ours' `spark.master` (`--density-master`): its task slots bound how many epochs run at once. The default is
each contender's own: a CLI run's `local[*]` (a slot per core), the engine's `local[cores * task_slots_per_core]`."""
FLUSH_SEC = 5.0
ENGINE_VARS = "STREAMLING__ENGINE__"
FIRST_ROW_TIMEOUT_SEC = 120.0
CATCH_UP_TIMEOUT_SEC = 240.0
CELLS = (("engine", 1), ("engine", 10), ("engine", 50), ("cli", 1), ("cli", 10))
PEER_CELLS = (("hand_loop", 1), ("hand_loop", 10), ("hand_loop", 50), ("quix", 1), ("quix", 10), ("quix", 50))
SMOKE_CELLS = (("engine", 2), ("hand_loop", 1))
SQL = "SELECT id, user_id, email, country, amount, price, ts FROM events WHERE sel_key <> 0"


@dataclass
class Feeder:
    """Produces `rate` records/s to each topic (ids from 0 per topic, ``ts`` the produce time) until stopped."""

    env: dict[str, str]
    topics: dict[str, int]
    """topic → schema id"""
    rate: float = RATE
    sent: dict[str, int] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self.sent = dict.fromkeys(self.topics, 0)
        self._thread = threading.Thread(target=self._run, name="density-feeder", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        prod = kafka_data.producer(self.env, **{"linger.ms": 5, "compression.type": "none"})
        started = time.time()
        while not self._stop.is_set():
            due = int((time.time() - started) * self.rate)
            for topic, schema_id in self.topics.items():
                while self.sent[topic] < due:
                    i = self.sent[topic]
                    try:
                        prod.produce(
                            topic,
                            kafka_data.timed_payload(schema_id, i, int(time.time() * 1000)),
                            partition=0,
                            headers=[("dbz.op", b"c")],
                        )
                    except BufferError:
                        prod.poll(0.05)
                        continue
                    self.sent[topic] = i + 1
            prod.poll(0)
            self._stop.wait(0.05)
        prod.flush(60)

    def stop(self) -> dict[str, int]:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(120)
        return dict(self.sent)


class Tree:
    """The contender's processes (several roots for N processes): CPU seconds so far, and PSS now."""

    def __init__(self, pids: list[int]) -> None:
        self.roots = [psutil.Process(pid) for pid in pids]
        self.seen: dict[int, float] = {}

    def processes(self) -> list[psutil.Process]:
        out = []
        for root in self.roots:
            try:
                out += [root, *root.children(recursive=True)]
            except psutil.NoSuchProcess:
                continue
        return out

    def cpu(self) -> float:
        """CPU seconds of every process seen so far (a process that ended keeps its last reading)."""
        for p in self.processes():
            try:
                t = p.cpu_times()
                self.seen[p.pid] = t.user + t.system
            except psutil.Error:
                continue
        return sum(self.seen.values())

    def pss_mb(self) -> float:
        return tree_pss(self.processes()) / 2**20

    def split(self) -> tuple[Counter[str], Counter[str], Counter[str]]:
        """Where the tree's CPU seconds so far and its PSS now are: CPU and MB by process role (`harness.role`:
        the command, the JVM, Spark's Python workers…), and the JVM's CPU by thread (its native names, numbers
        folded: ``Executor task launch worker…``, ``dag-scheduler-event-loop``, ``C2 CompilerThread#``)."""
        cpu: Counter[str] = Counter()
        mb: Counter[str] = Counter()
        threads: Counter[str] = Counter()
        roots = {r.pid for r in self.roots}
        for p in self.processes():
            try:
                kind = role(p, p.pid if p.pid in roots else -1) or "other"
                t = p.cpu_times()
                cpu[kind] += t.user + t.system
                mb[kind] += getattr(p.memory_full_info(), "pss", 0) / 2**20
            except psutil.Error:
                continue
            if kind == "jvm":
                threads.update(_thread_cpu(p.pid))
        return cpu, mb, threads


def _thread_cpu(pid: int) -> Counter[str]:
    """CPU seconds per thread name of one process (/proc/PID/task/*/stat; names are cut to 15 characters)."""
    ticks = os.sysconf("SC_CLK_TCK")
    out: Counter[str] = Counter()
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        name = re.sub(r"\d+", "#", stat[stat.index("(") + 1 : stat.rindex(")")])
        fields = stat[stat.rindex(")") + 2 :].split()
        out[name] += (int(fields[11]) + int(fields[12])) / ticks
    return out


def _cores(after: Counter[str], before: Counter[str], sec: float, top: int = 12) -> dict[str, float]:
    delta = {k: (v - before.get(k, 0.0)) / sec for k, v in after.items()}
    ranked = sorted(delta.items(), key=lambda kv: -kv[1])
    return {k: round(v, 3) for k, v in ranked[:top] if v >= 0.0005}


@dataclass
class Cell:
    contender: str
    n: int
    work: Path
    env: dict[str, str]
    schema: str = field(default_factory=lambda: f"bench_density_{uuid.uuid4().hex[:8]}")
    topics: dict[str, int] = field(default_factory=dict)
    procs: list[subprocess.Popen] = field(default_factory=list)
    engine_url: str | None = None
    engine_token: str | None = None

    def table(self, i: int) -> str:
        return f"t{i}"

    # -- set-up and contenders --

    def create_topics(self) -> None:
        for i in range(self.n):
            name = f"bench_density_{uuid.uuid4().hex[:8]}_{i}"
            self.topics[name] = kafka_data.create_topic(self.env, name, 1)

    def pipeline_file(self, i: int, topic: str) -> Path:
        path = self.work / f"p{i}_{topic}.yaml"
        path.write_text(
            textwrap.dedent(f"""
            sources:
              events: {{type: kafka, topic: {topic}}}
            transforms:
              shaped: {{type: sql, primary_key: id, sql: "{SQL}"}}
            sinks:
              sink: {{type: postgres, from: shaped, schema: {self.schema}, table: {self.table(i)}}}
            """)
        )
        return path

    def ours_env(self, app: str) -> dict[str, str]:
        # The engine's own settings (STREAMLING__ENGINE__…) pass through: `--density-cells engine:50` with another
        # `max_starting_runs` or `task_slots_per_core` measures that choice.
        env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMLING__") or k.startswith(ENGINE_VARS)}
        env.update(self.env)
        pg = "STREAMLING__POSTGRES_SINK__"
        state = "STREAMLING__STATE_BACKEND__"
        env.update(
            {
                "PYTHONUNBUFFERED": "1",
                "STREAMLING__APPLICATION_ID": app,
                "STREAMLING__SPARK__MASTER": MASTER,
                f"{state}BACKEND_TYPE": "Postgres",
                f"{state}POSTGRES__HOST": env[pg + "HOST"],
                f"{state}POSTGRES__PORT": env[pg + "PORT"],
                f"{state}POSTGRES__USER": env[pg + "USER"],
                f"{state}POSTGRES__PASSWORD": env[pg + "PASS"],
                f"{state}POSTGRES__DATABASE": env[pg + "DB"],
                "STREAMLING_HOME": str(self.work / "home"),
            }
        )
        return env

    def start(self) -> float:
        """Start the contender's N pipelines; returns when the N-th was started or submitted (time.time())."""
        topics = list(self.topics)
        app = f"density_{uuid.uuid4().hex[:8]}"
        if self.contender == "engine":
            return self._start_engine(topics, app)
        if self.contender == "cli":
            for i, topic in enumerate(topics):  # a namespace each: their sources are all called 'events'
                self._spawn([*streamling_cmd(), str(self.pipeline_file(i, topic))], self.ours_env(f"{app}_{i}"))
            return time.time()
        env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMLING__")}
        env.update(self.env)
        env["PYTHONUNBUFFERED"] = "1"
        bench = Path(__file__).resolve().parent
        for i, topic in enumerate(topics):
            group = f"density_{uuid.uuid4().hex[:8]}"
            if self.contender == "hand_loop":
                cmd = [sys.executable, str(bench / "peers" / "hand_loop.py"), "--flush-interval", str(FLUSH_SEC)]
            else:
                cmd = [str(bench / ".venv-quix" / "bin" / "python"), str(bench / "peers" / "quix_app.py")]
                cmd += ["--commit-interval", str(FLUSH_SEC)]
            cmd += ["--topic", topic, "--group", group, "--job", "upsert", "--schema", self.schema]
            self._spawn([*cmd, "--table", self.table(i), "--follow"], env)
        return time.time()

    def _spawn(self, cmd: list[str], env: dict[str, str]) -> None:
        log = (self.work / f"proc{len(self.procs)}.log").open("w")
        self.procs.append(
            subprocess.Popen(cmd, env=env, cwd=self.work, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        )

    def _start_engine(self, topics: list[str], app: str) -> float:
        import httpx

        from streamling.config import load_settings
        from streamling.engine_client import submitted_settings

        env = self.ours_env(app)
        self._spawn([*streamling_cmd(), "serve", "--port", "0"], env)
        log = self.work / "proc0.log"
        deadline = time.time() + 120
        while "Engine ready on" not in log.read_text():
            if self.procs[0].poll() is not None or time.time() > deadline:
                sys.exit(f"[6] streamling serve did not start:\n{log.read_text()[-2000:]}")
            time.sleep(0.2)
        line = next(x for x in log.read_text().splitlines() if "Engine ready on" in x)
        self.engine_url = line.split("Engine ready on ", 1)[1].split("/ ", 1)[0]
        port = self.engine_url.rsplit(":", 1)[1]
        self.engine_token = (self.work / "home" / f"engine-{port}.token").read_text().strip()
        variables = {k: v for k, v in env.items() if k.startswith("STREAMLING__")}
        documents = [  # a namespace each: their sources are all called 'events'
            submitted_settings(load_settings(None, environ={**variables, "STREAMLING__APPLICATION_ID": f"{app}_{i}"}))
            for i in range(len(topics))
        ]
        client = httpx.Client(
            base_url=self.engine_url, headers={"Authorization": f"Bearer {self.engine_token}"}, timeout=120
        )
        files = [self.pipeline_file(i, topic) for i, topic in enumerate(topics)]

        def submit(i: int) -> None:
            answer = client.post("/runs", json={"pipeline": str(files[i]), "settings": documents[i]})
            if answer.status_code != 201:
                sys.exit(f"[6] submission refused: {answer.status_code} {answer.text}")

        with ThreadPoolExecutor(max_workers=min(16, len(files))) as pool:  # at the same moment
            list(pool.map(submit, range(len(files))))
        submitted = time.time()
        client.close()
        return submitted

    def engine_runs(self) -> list[dict]:
        import httpx

        if self.engine_url is None:
            return []
        headers = {"Authorization": f"Bearer {self.engine_token}"}
        return httpx.get(f"{self.engine_url}/runs", headers=headers, timeout=60).json()["runs"]

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(120)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)

    # -- the sinks --

    def note_first_rows(self, conn, seen: dict[int, float]) -> None:  # type: ignore[no-untyped-def]
        """Note when each table got its first row, in one statement over the tables still empty: polling fifty
        tables a statement each, four times a second, cost the machine more than a pipeline does."""
        pending = [i for i in range(self.n) if i not in seen]
        existing = {
            row[0] for row in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = %s", [self.schema])
        }
        probes = [i for i in pending if self.table(i) in existing]
        if not probes:
            return
        sql = " UNION ALL ".join(
            f'SELECT {i} WHERE EXISTS (SELECT 1 FROM "{self.schema}"."{self.table(i)}")' for i in probes
        )
        rows = conn.execute(sql).fetchall()
        now = time.time()
        for (i,) in rows:
            seen[int(i)] = now

    def counts(self, conn) -> dict[int, tuple[int, int]]:  # type: ignore[no-untyped-def]
        """(rows, max id) per table that exists."""
        out = {}
        for i in range(self.n):
            exists = conn.execute("SELECT to_regclass(%s)", [f'"{self.schema}"."{self.table(i)}"']).fetchone()[0]
            if exists:
                row = conn.execute(f'SELECT count(*), coalesce(max(id), -1) FROM "{self.schema}"."{self.table(i)}"')
                out[i] = tuple(int(v) for v in row.fetchone())
        return out


def _wait(check: Callable[[], bool], timeout: float, what: str, every: float = 0.25) -> float:
    started = time.time()
    while not check():
        if time.time() - started > timeout:
            raise TimeoutError(what)
        time.sleep(every)
    return time.time()


def service_pids(env: dict[str, str]) -> list[int]:
    """The services every contender shares (the broker, the schema registry, Postgres with its backends), found
    by the ports they listen on: what they spend is the price of the cell's load, reported beside the contender's,
    not in it."""
    ports = {
        int(env["STREAMLING__KAFKA_SOURCE__BROKERS"].split(",")[0].rsplit(":", 1)[1]),
        int(env["STREAMLING__POSTGRES_SINK__PORT"]),
        urlsplit(env["STREAMLING__KAFKA_SOURCE__SCHEMA_REGISTRY_URL"]).port or 80,
    }
    listening = psutil.net_connections("tcp")
    return sorted({c.pid for c in listening if c.status == psutil.CONN_LISTEN and c.laddr.port in ports and c.pid})


def _after_start(runs: list[dict], first_rows: dict[int, float]) -> dict[str, float]:
    """Seconds from a run's start (every query started) to its first row in its table: median and max. With the
    admission's figures this splits the N-th first row into waiting to start, starting, and the first epoch."""
    waits = []
    for run in runs:
        found = re.search(r"/p(\d+)_[^/]*\.yaml$", run.get("pipeline", ""))
        if found and run.get("started_at") and int(found[1]) in first_rows:
            waits.append(first_rows[int(found[1])] - run["started_at"])
    if not waits:
        return {}
    waits.sort()
    return {
        "first_row_after_start_median_sec": round(waits[len(waits) // 2], 2),
        "first_row_after_start_max_sec": round(waits[-1], 2),
    }


def run_cell(env: dict[str, str], work: Path, contender: str, n: int, window_sec: float, idle_sec: float) -> dict:
    from job import connect_from_env

    cell = Cell(contender, n, work / f"{contender}{n}_{uuid.uuid4().hex[:6]}", env)
    cell.work.mkdir(parents=True)
    conn = connect_from_env(env)
    conn.autocommit = True
    cell.create_topics()
    feeder = Feeder(env, cell.topics)
    feeder.start()
    result: dict = {"contender": contender, "n": n, "rate_per_pipeline": RATE}
    try:
        services = Tree(service_pids(env))
        services.cpu()
        launched = time.time()
        last_started = cell.start()
        tree = Tree([p.pid for p in cell.procs])
        start_roles, _, start_threads = tree.split()
        start_cpu, start_services, start_at = tree.cpu(), services.cpu(), time.time()
        last = n - 1
        result["start_sec"] = round(last_started - launched, 1)
        first_rows: dict[int, float] = {}

        def first_row(indices: range) -> bool:
            cell.note_first_rows(conn, first_rows)
            return all(i in first_rows for i in indices)

        try:
            _wait(lambda: first_row(range(last, n)), FIRST_ROW_TIMEOUT_SEC, f"{contender} x{n}: first row")
            result["nth_first_row_sec"] = round(first_rows[last] - last_started, 1)
            _wait(lambda: first_row(range(n)), FIRST_ROW_TIMEOUT_SEC, f"{contender} x{n}: every pipeline's first row")
            result["every_first_row_sec"] = round(max(first_rows.values()) - last_started, 1)
            # From the N-th submission to every pipeline's first row: how busy the machine was, and with what.
            took = time.time() - start_at
            roles, _, threads = tree.split()
            result["startup_cores"] = round((tree.cpu() - start_cpu) / took, 3)
            result["startup_services_cores"] = round((services.cpu() - start_services) / took, 3)
            result["startup_cores_by_role"] = _cores(roles, start_roles, took)
            result["startup_jvm_cores_by_thread"] = _cores(threads, start_threads, took) if threads else {}
        except TimeoutError as timeout:  # recorded, and the cell is measured as it is: what a user would see
            result["timed_out"] = str(timeout)
            result["with_rows_at_timeout"] = len(first_rows)
            print(f"  {contender} x{n}: {timeout} after {FIRST_ROW_TIMEOUT_SEC:.0f} s", flush=True)
        runs = cell.engine_runs()
        result["states_at_start"] = _states(runs)
        if runs:
            result["admission"] = {**_admission(runs), **_after_start(runs, first_rows)}
        # The window: CPU over it, PSS sampled through it.
        roles0, _, threads0 = tree.split()
        cpu0, services0, t0 = tree.cpu(), services.cpu(), time.time()
        pss = []
        while time.time() - t0 < window_sec:
            time.sleep(min(15.0, window_sec / 4))
            pss.append(tree.pss_mb())
        cores = (tree.cpu() - cpu0) / (time.time() - t0)
        roles1, role_mb, threads1 = tree.split()
        elapsed = time.time() - t0
        result.update(
            cores=round(cores, 3),
            services_cores=round((services.cpu() - services0) / elapsed, 3),
            pss_mb=round(max(pss)),
            pss_mb_mean=round(sum(pss) / len(pss)),
            processes=len(tree.processes()),
            window_sec=round(elapsed),
            cores_by_role=_cores(roles1, roles0, elapsed),
            pss_mb_by_role={k: round(v) for k, v in sorted(role_mb.items())},
            jvm_cores_by_thread=_cores(threads1, threads0, elapsed) if threads1 else {},
        )
        sent = feeder.stop()
        expected = {i: len([k for k in range(sent[t]) if k % 10 != 0]) for i, t in enumerate(cell.topics)}
        try:
            _wait(
                lambda: all(cell.counts(conn).get(i, (0, 0))[0] == expected[i] for i in range(n)),
                60.0 if "timed_out" in result else CATCH_UP_TIMEOUT_SEC,
                f"{contender} x{n}: catch up",
                every=1.0,
            )
            result["exact"] = True
        except TimeoutError:
            got = cell.counts(conn)
            result["exact"] = False
            result["short"] = {
                i: (got.get(i, (0, 0))[0], expected[i]) for i in range(n) if got.get(i, (0, 0))[0] != expected[i]
            }
        if contender == "engine" and idle_sec:
            time.sleep(min(10.0, idle_sec))  # the sources' last polls after the catch-up
            roles0, _, threads0 = tree.split()
            cpu0, t0 = tree.cpu(), time.time()
            time.sleep(idle_sec)
            result["idle_cores"] = round((tree.cpu() - cpu0) / (time.time() - t0), 4)
            result["idle_cores_per_pipeline"] = round(result["idle_cores"] / n, 5)
            roles1, _, threads1 = tree.split()
            result["idle_cores_by_role"] = _cores(roles1, roles0, time.time() - t0)
            result["idle_jvm_cores_by_thread"] = _cores(threads1, threads0, time.time() - t0) if threads1 else {}
        runs = cell.engine_runs()
        result["states_at_end"] = _states(runs)
        result["restarts"] = sum(r.get("restarts", 0) for r in runs)
        result["failed"] = [r["error"] for r in runs if r["state"] in ("failed", "invalid")]
    finally:
        feeder.stop()
        cell.stop()
        conn.execute(f'DROP SCHEMA IF EXISTS "{cell.schema}" CASCADE')
        conn.close()
        from suite import delete_topics

        delete_topics(env, list(cell.topics))
    cores, pss = result.get("cores"), result.get("pss_mb")
    print(
        f"  {contender:>9} x{n:<3}: {cores} cores, PSS {pss} MB, N-th first row {result.get('nth_first_row_sec')} s"
        f", exact {result.get('exact')}"
        + (f", idle {result['idle_cores_per_pipeline']} cores/pipeline" if "idle_cores" in result else "")
        + (f", starts {result['admission']}" if result.get("admission") else ""),
        flush=True,
    )
    return result


def _admission(runs: list[dict]) -> dict[str, float]:
    """Where the engine's start of N runs went: seconds queued (submitted -> admitted) and starting (admitted ->
    every query started), the slowest and the median, and the span from the first admission to the last start."""
    queued = sorted(r["admitted_at"] - r["submitted_at"] for r in runs if r.get("admitted_at"))
    starting = sorted(r["started_at"] - r["admitted_at"] for r in runs if r.get("started_at") and r.get("admitted_at"))
    if not starting:
        return {}
    span = max(r["started_at"] for r in runs if r.get("started_at")) - min(
        r["admitted_at"] for r in runs if r.get("admitted_at")
    )
    return {
        "queued_max_sec": round(queued[-1], 1),
        "starting_median_sec": round(starting[len(starting) // 2], 2),
        "starting_max_sec": round(starting[-1], 2),
        "starts_span_sec": round(span, 2),  # as finely as the starts it spans: never below the slowest
    }


def _states(runs: list[dict]) -> dict[str, int]:
    out: dict[str, int] = {}
    for r in runs:
        out[r["state"]] = out.get(r["state"], 0) + 1
    return out


def scenario(env: dict[str, str], work: Path, cells: list[tuple[str, int]], window_sec: float, idle_sec: float) -> dict:
    print(f"[6] density: N pipelines at {RATE} rec/s each, {window_sec:.0f}s measured per cell", flush=True)
    out = [run_cell(env, work, contender, n, window_sec, idle_sec) for contender, n in cells]
    return {
        "rate_per_pipeline": RATE,
        "flush_sec": FLUSH_SEC,
        "sql": SQL,
        "window_sec": window_sec,
        "master": MASTER,
        "cells": out,
    }


def _first_row(cell: dict) -> str:
    if "timed_out" in cell:
        return f"> {FIRST_ROW_TIMEOUT_SEC:.0f} ({cell['with_rows_at_timeout']} of {cell['n']} with rows)"
    return str(cell.get("nth_first_row_sec", "-"))


def _master(master: str) -> str:
    if master.replace(" ", "") == "local[*]":
        return "`local[*]` (a CLI run: a task slot per core; the engine: `engine.task_slots_per_core` per core)"
    return f"`{master}`"


def markdown(block: dict) -> list[str]:
    lines = [
        f"## 6. Density: N pipelines at {block['rate_per_pipeline']} rec/s each (Kafka Avro → SQL filter → Postgres "
        "upsert)",
        "",
        f"Ours with `spark.master` {_master(block.get('master', 'local[2]'))}.",
        "",
        "| contender | N | cores | PSS MB (max) | processes | N-th first row s | exact | idle cores / pipeline |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for c in block["cells"]:
        lines.append(
            f"| {c['contender']} | {c['n']} | {c.get('cores', '-')} | {c.get('pss_mb', '-')} | "
            f"{c.get('processes', '-')} | {_first_row(c)} | {c.get('exact', '-')} | "
            f"{c.get('idle_cores_per_pipeline', '-')} |"
        )
    ours = [c for c in block["cells"] if c.get("cores_by_role")]
    if ours:
        lines += ["", "Where ours spend it (cores by process role and the JVM's busiest threads; PSS MB by role):", ""]
        for c in ours:
            roles = ", ".join(f"{k} {v}" for k, v in c["cores_by_role"].items())
            mb = ", ".join(f"{k} {v}" for k, v in c["pss_mb_by_role"].items())
            threads = ", ".join(f"`{k}` {v}" for k, v in list(c["jvm_cores_by_thread"].items())[:8])
            lines.append(f"- {c['contender']} x{c['n']}: cores {roles}; PSS {mb}; JVM threads {threads}")
            if c.get("startup_cores_by_role"):
                busy = ", ".join(f"{k} {v}" for k, v in c["startup_cores_by_role"].items())
                busy_threads = ", ".join(f"`{k}` {v}" for k, v in list(c["startup_jvm_cores_by_thread"].items())[:6])
                lines.append(
                    f"  - until every first row: {c['startup_cores']} cores: {busy}; JVM threads {busy_threads}"
                )
            if c.get("idle_cores_by_role"):
                idle = ", ".join(f"{k} {v}" for k, v in c["idle_cores_by_role"].items())
                idle_threads = ", ".join(f"`{k}` {v}" for k, v in list(c["idle_jvm_cores_by_thread"].items())[:6])
                lines.append(f"  - idle: cores {idle}; JVM threads {idle_threads}")
    starts = [c for c in block["cells"] if c.get("admission")]
    if starts:
        lines += [
            "",
            "The engine's starts (seconds: longest queued, a run's start median / max, first admission to last start, "
            "a run's start to its first row median / max):",
            "",
        ]
        for c in starts:
            a = c["admission"]
            lines.append(
                f"- x{c['n']}: queued {a['queued_max_sec']}, starting {a['starting_median_sec']} / "
                f"{a['starting_max_sec']}, span {a['starts_span_sec']}, first row after start "
                f"{a.get('first_row_after_start_median_sec', '-')} / {a.get('first_row_after_start_max_sec', '-')}"
            )
    shared = [c for c in block["cells"] if c.get("services_cores") is not None]
    if shared:
        lines += [
            "",
            "The shared services (broker, registry, Postgres) beside each cell, in cores (not counted above):",
            "",
        ]
        lines += [
            f"- {c['contender']} x{c['n']}: {c.get('startup_services_cores', '-')} until every first row, "
            f"{c['services_cores']} over the window"
            for c in shared
        ]
    return [*lines, ""]
