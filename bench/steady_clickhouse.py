"""Scenario 7 of bench/suite.py: the seed's headline workload at a steady rate — what a pipeline costs while it keeps
up, not how fast it drains a backlog.

Kafka Avro produced at a fixed rate (20,000 rec/s by default, one partition, ``ts`` = produce time) → SQL enrichment
(a ``dynamic_table`` of big spenders filled from the same stream and checked per row, and a few expressions) → the
embedded ClickHouse engine (chdb), for a warm-up and then a measured window (60 s + 300 s by default). Per
contender: **cores** (CPU-seconds of its whole process tree per wall second of the window), PSS and RSS at their
peaks, and visibility latency p50/p99 (``visible_at - ts`` per row: ``visible_at`` is ``DEFAULT now64(3)`` in the
table, stamped by ClickHouse as it processes the insert, so no contender reports on itself;
bench/peers/clickhouse_table.py).

Contenders: **streamling** (the CLI, local[2]), **streamling_engine** (``streamling serve``, the run submitted to it;
the measured tree is the engine, which owns the embedded ClickHouse; the submitting client only follows the logs and
is not counted), **hand_loop** (confluent-kafka + fastavro per record + clickhouse-connect ``insert``),
**hand_loop_block** (each poll decoded as one Avro block by polars, the enrichment in pyarrow.compute,
``insert_arrow``) and **quix** (Quix Streams, a ``BatchingSink`` inserting through clickhouse-connect).

Every run reads a topic of its own into a data path of its own; after the paced producer stops, the contender gets
`DRAIN_SEC` to finish and is stopped with SIGTERM; the table must then hold every produced id (else the suite stops).
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

import density
import httpx
import kafka_data
from harness import Measurement, measure, ratios, streamling_cmd, summary

if TYPE_CHECKING:
    from suite import Suite

BENCH = Path(__file__).resolve().parent
TABLE_SCRIPT = BENCH / "peers" / "clickhouse_table.py"
CONTENDERS = ["streamling", "streamling_engine", "hand_loop", "hand_loop_block", "quix"]
"""Who runs, in this order (``--steady-contenders`` picks some)."""
DRAIN_SEC = 15.0
"""After the last record is produced: time to write what is in flight before SIGTERM (every contender here keeps
up, so its last rows are at most an epoch, 5 s by default, behind)."""
SQL = (
    "SELECT id, user_id, lower(email) AS email, upper(country) AS country, device, amount, "
    "amount * 1.1 AS amount_with_fee, price, ts, concat(device, ':', country) AS segment, "
    "dynamic_table_check('big_spenders', user_id) AS big_spender FROM events"
)
OURS: dict[str, object] = {}
"""Ours' settings beyond the pipeline: none, so the product's defaults (an epoch every `checkpoint_interval_sec`, 5 s,
while a steady feed stays below `record_batch_size`): what a pipeline costs as a user runs it. ``--steady-epoch-sec``
sets a shorter epoch (scenario 4 measures latency at 0.2 s)."""
QUIX_COMMIT_SEC = 0.2


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _pipeline(s: Suite, topic: str, name: str) -> Path:
    path = s.work / f"{name}.yaml"
    path.write_text(
        textwrap.dedent(f"""
        sources:
          events: {{type: kafka, topic: {topic}}}
        transforms:
          big_spenders:
            type: dynamic_table
            backend_type: InMemory
            backend_entity_name: big_spenders
            sql: SELECT user_id FROM events WHERE amount > 3600
          enriched: {{type: sql, primary_key: id, sql: "{SQL}"}}
        sinks:
          out: {{type: clickhouse, from: enriched, table: seed_events}}
        """)
    )
    return path


class Run:
    """One contender's run: its command and environment, and (the engine) how its pipeline is submitted."""

    def __init__(self, s: Suite, contender: str, topic: str, data: Path) -> None:
        self.contender = contender
        self.env = s.base_env()
        group = f"bench_{uuid.uuid4().hex[:10]}"
        self.port: int | None = None
        self.pipeline: Path | None = None
        if contender.startswith("streamling"):
            self.pipeline = _pipeline(s, topic, group)
            self.env.update(
                {
                    "STREAMLING__JOB_MODE": "false",
                    "STREAMLING__STATE_BACKEND__BACKEND_TYPE": "InMemory",
                    "STREAMLING__APPLICATION_ID": group,
                    "STREAMLING__KAFKA_SOURCE__CONSUMER_GROUP_ID": group,
                    "STREAMLING__SPARK__MASTER": s.master,
                    "STREAMLING__SPARK__CHECKPOINT_ROOT": str(s.work / "ckpt"),
                    "STREAMLING__CLICKHOUSE_SINK__PATH": str(data),
                    "STREAMLING__CLICKHOUSE_SOURCE__PATH": str(data),
                    "STREAMLING_HOME": str(s.work / "home"),
                    **{f"STREAMLING__{k.upper()}": str(v) for k, v in OURS.items()},
                }
            )
            if contender == "streamling_engine":
                self.port = _free_port()
                self.cmd = [*streamling_cmd(), "serve", "--port", str(self.port)]
            else:
                self.cmd = [*streamling_cmd(), str(self.pipeline)]
            return
        loop = contender.startswith("hand_loop")
        script = BENCH / "peers" / ("hand_loop.py" if loop else "quix_app.py")
        python = sys.executable if loop else str(BENCH / ".venv-quix" / "bin" / "python")
        self.cmd = [python, str(script), "--topic", topic, "--group", group, "--job", "enrich", "--follow"]
        self.cmd += ["--clickhouse-path", str(data), "--clickhouse-table", "default.seed_events"]
        if contender == "hand_loop_block":
            self.cmd += ["--decoder", "block"]
        if contender == "quix":
            self.cmd += ["--commit-interval", str(QUIX_COMMIT_SEC)]

    def submit(self, cwd: Path) -> subprocess.Popen | None:
        """The engine: once it answers, `streamling submit` its pipeline (the client follows the run's logs)."""
        if self.port is None:
            return None
        url = f"http://127.0.0.1:{self.port}"
        deadline = time.time() + 120
        while True:
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.time() > deadline:
                sys.exit("[7] streamling serve did not answer within 120 s")
            time.sleep(0.1)
        return subprocess.Popen(
            [*streamling_cmd(), "submit", "--engine", url, str(self.pipeline)],
            env=self.env,
            cwd=cwd,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )


def _stats(data: Path, since_ms: int) -> dict:
    out = subprocess.run(
        [sys.executable, str(TABLE_SCRIPT), "stats", str(data), str(since_ms)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def run_steady(s: Suite, label: str, contender: str) -> Measurement:
    z = s.sizes
    topic = f"bench_steady_{uuid.uuid4().hex[:8]}"
    schema_id = kafka_data.create_topic(s.env, topic, 1)
    s.topics.append(topic)
    data = s.work / f"ch_{uuid.uuid4().hex[:8]}"
    subprocess.run([sys.executable, str(TABLE_SCRIPT), "create", str(data)], check=True)
    run = Run(s, contender, topic, data)
    procs: list[subprocess.Popen] = []
    result: list[Measurement] = []
    runner = threading.Thread(target=lambda: result.append(measure(run.cmd, run.env, s.work, started=procs.append)))
    runner.start()
    while not procs:
        time.sleep(0.01)
    client = run.submit(s.work)
    tree = density.Tree([procs[0].pid])
    marks: list[tuple] = []

    def mark() -> None:  # where the window's CPU goes: by process role, and by thread of the JVM and of the command
        (cpu, _, jvm), command = tree.split(), density._thread_cpu(procs[0].pid)
        marks.append((time.time(), cpu, jvm, command))

    try:
        started = time.time()
        window_timer = threading.Timer(z.steady_warmup_sec, mark)
        window_timer.start()
        sent, rate = kafka_data.paced(s.env, topic, schema_id, z.steady_rate, z.steady_warmup_sec + z.steady_sec)
        ended = time.time()
        window_timer.join()
        mark()
        time.sleep(DRAIN_SEC)
        if procs[0].poll() is not None:
            runner.join()
            sys.exit(f"[7] {contender} ended early (exit {procs[0].returncode}):\n{result[0].stderr_tail}")
        if client is not None:  # the run first (it drains), then the engine
            client.send_signal(signal.SIGTERM)
            client.wait(120)
        procs[0].send_signal(signal.SIGTERM)
        runner.join(timeout=120)
        if runner.is_alive():
            procs[0].kill()
            runner.join()
    finally:
        kafka_data_delete(s, topic)
    m = result[0]
    if m.returncode not in (0, -signal.SIGTERM):
        sys.exit(f"[7] {contender} failed (exit {m.returncode}):\n{m.stderr_tail}")
    window_from = started + z.steady_warmup_sec
    stats = _stats(data, int(window_from * 1000))
    if int(stats["distinct_ids"]) != sent:
        sys.exit(f"[7] {contender}: {int(stats['distinct_ids']):,} distinct ids in ClickHouse, {sent:,} produced")
    cpu = m.cpu_between(window_from, ended)
    (t0, cpu0, jvm0, cmd0), (t1, cpu1, jvm1, cmd1) = marks
    m.extra = {
        "cores": round(cpu / (ended - window_from), 3) if cpu is not None else None,
        "cores_by_role": density._cores(cpu1, cpu0, t1 - t0),
        "command_cores_by_thread": density._cores(cmd1, cmd0, t1 - t0),
        "jvm_cores_by_thread": density._cores(jvm1, jvm0, t1 - t0),
        "p50_ms": stats["p50_ms"],
        "p99_ms": stats["p99_ms"],
        "max_ms": stats["max_ms"],
        "achieved_rate": round(rate),
        "rows_measured": int(stats["rows_measured"]),
        "rows_in_table": int(stats["rows"]),
        "produced": sent,
        "big_spender_rows": int(stats["big_spender_rows"]),
    }
    return m


def kafka_data_delete(s: Suite, topic: str) -> None:
    """A run's topic goes at once (the local broker rewrites its whole store as it changes; see scenario 4)."""
    from suite import delete_topics

    delete_topics(s.env, [topic])
    s.topics.remove(topic)


def scenario(s: Suite) -> dict:
    z = s.sizes
    print(
        f"[7] the seed's workload at a steady {z.steady_rate:,} rec/s: Kafka Avro → SQL enrichment with a "
        f"dynamic-table check → embedded ClickHouse; {z.steady_warmup_sec:.0f}s warm-up + {z.steady_sec:.0f}s measured",
        flush=True,
    )
    runs: dict[str, list[Measurement]] = {c: [] for c in CONTENDERS}
    for i, label in s.rounds(s.steady_runs):
        for contender in CONTENDERS:
            m = run_steady(s, label, contender)
            e = m.extra
            print(
                f"  {label:>8} {contender:>17}: {e['cores']} cores, p50 {e['p50_ms']:,.0f} ms, p99 {e['p99_ms']:,.0f} "
                f"ms at {e['achieved_rate']:,} rec/s, peak PSS {m.peak_pss_mb or 0:,.0f} MB, RSS {m.peak_rss_mb:,.0f} "
                f"MB\n      window cores by role {e['cores_by_role']}\n      command's threads "
                f"{e['command_cores_by_thread']}\n      JVM's threads {e['jvm_cores_by_thread']}",
                flush=True,
            )
            if i >= s.warmup:
                runs[contender].append(m)
    keys = ("cores", "p50_ms", "p99_ms", "max_ms", "achieved_rate", "peak_pss_mb", "peak_rss_mb")
    contenders = {c: summary(r, keys, digits=3) for c, r in runs.items()}  # cores to the thousandth: target 0.3
    ours = "streamling" if "streamling" in contenders else CONTENDERS[0]
    return {
        "rate": z.steady_rate,
        "warmup_sec": z.steady_warmup_sec,
        "measured_sec": z.steady_sec,
        "runs": s.runs if s.steady_runs is None else s.steady_runs,
        "partitions": 1,
        "sql": SQL,
        "settings": {"streamling": {**OURS, "master": s.master}, "quix": {"commit_interval_sec": QUIX_COMMIT_SEC}},
        "target_cores": 0.3,
        "contenders": contenders,
        "ratios": ratios(contenders, ("cores", "p99_ms", "peak_pss_mb"), ours),
    }
