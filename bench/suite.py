"""Benchmark suite: our pipeline against its peers, every scenario in one invocation.

    .venv/bin/python bench/suite.py [--smoke] [--only 1,2,3,4,5] [--runs 5] [--warmup 1] [--scale F] [--results DIR]

Contenders: **streamling** (the real CLI, `local[2]`), **hand_loop** (bench/peers/hand_loop.py: confluent-kafka +
fastavro + psycopg COPY/merge, one process), **hand_loop_block** (the same loop with our decoding technique: each
poll read as one Avro block by polars, the job in pyarrow.compute, a CSV COPY) and **quix**
(bench/peers/quix_app.py, Quix Streams 3.28.1 in its own venv, bench/.venv-quix, created here on first use).
Scenarios:

1. Kafka Avro → SQL projection / filter → blackhole (5M records, 4 partitions); ours also on a warm engine
   (**streamling_engine**: ``streamling submit`` to ``streamling serve``, the engine's tree measured with the client).
2. Kafka Avro → SQL filter → Postgres upsert (2M records, 4 partitions, every id 4 times).
3. Cold start: launch → first row visible in Postgres, the topic already holding data (50k records); ours also
   warm (**streamling_warm**: ``streamling submit`` to a ``streamling serve`` engine started before the runs).
4. End-to-end latency at a steady 20k records/s: produce time (the record's ``ts``) → row visible in Postgres.
5. Scale curve (ours only): the scenario-1 filter at local[1] vs local[2], on topics of 1, 2 and 4 partitions,
   and on the shared-nothing cluster of ``infra/services up spark-cluster`` with 1 and 2 workers (root only).
6. Density: N pipelines, each on its own topic fed at 100 rec/s → SQL filter → Postgres upsert, on one engine
   (N = 1, 10, 50), as N CLI processes (N = 1, 10), as N hand loops and N Quix apps (N = 1, 10, 50): cores and
   PSS over a window, the N-th pipeline's first row, every sink exact, an idle engine pipeline's cost
   (bench/density.py).
7. The seed's workload at a steady rate: Kafka Avro at 20k rec/s → SQL enrichment (a dynamic-table check, a few
   expressions) → embedded ClickHouse, 60 s warm-up + 300 s measured: cores, PSS, p99 visibility latency; ours as
   the CLI and on an engine (bench/steady_clickhouse.py).

Runs alternate between contenders (A B C A B C …), warm-ups first; every run reads with a fresh consumer group /
application id into a fresh table, and every run's output is checked against the exact expected row count (and id
sum, for Postgres), or the suite stops. Records ``<results>/suite-<UTC>.json`` and ``.md`` and prints the table.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent / "peers"))
import density
import kafka_data
import steady_clickhouse
from harness import RESULTS, Measurement, measure, ratios, record, streamling_cmd, summary

BENCH = Path(__file__).resolve().parent

REPO = BENCH.parent
QUIX_VENV = BENCH / ".venv-quix"
QUIX_PACKAGES = ["quixstreams==3.28.1", "fastavro", "psycopg[binary]", "clickhouse-connect==1.12.0", "chdb==4.4.0"]
CONTENDERS = ("streamling", "hand_loop", "hand_loop_block", "quix")
OURS = ("streamling", "streamling_warm")
"""The CLI from cold, and `streamling submit` to a warm engine (`streamling serve`; scenario 3 only)."""
ENGINE = "streamling_engine"
"""Scenario 1's run submitted to a warm engine, measured as the client and the engine's whole tree together."""
PEERS = CONTENDERS[1:]
SQL = {
    "projection": "SELECT id, user_id, email, lower(country) AS country, device, amount, "
    "amount * 1.1 AS amount_with_fee, price, ts FROM events",
    "filter": "SELECT id, user_id, email, country, ts FROM events WHERE sel_key = 0",
    "upsert": "SELECT id, user_id, email, country, amount, price, ts FROM events WHERE sel_key <> 0",
}
WRITTEN = re.compile(r"sink 'sink': (\d+) rows written")
PEER_WRITTEN = re.compile(r"(\d+) consumed, (\d+) written")
LATENCY_OURS = {"checkpoint_interval_sec": 0.2, "record_batch_interval_ms": 100}
"""Epochs close every 0.2 s; ``record_batch_size`` stays at its default (250k) so that a backlog left by a slow
epoch is worked off in one larger epoch — a cap near the produce rate per epoch (e.g. 20k) keeps it for good."""
LATENCY_QUIX_COMMIT_SEC = 0.2


@dataclass
class Sizes:
    blackhole_records: int = 5_000_000
    upsert_records: int = 2_000_000
    cold_records: int = 50_000
    latency_rate: int = 20_000
    latency_warmup_sec: float = 10.0
    latency_sec: float = 30.0
    scale_records: int = 2_000_000
    scale_partitions: tuple[int, ...] = (1, 2, 4)
    blackhole_sqls: tuple[str, ...] = ("projection", "filter")
    steady_rate: int = 20_000
    steady_warmup_sec: float = 60.0
    steady_sec: float = 300.0

    def scaled(self, factor: float) -> Sizes:
        def r(n: int) -> int:
            return max(1000, int(n * factor) // 1000 * 1000)  # whole thousands keep key spaces multiples of 10

        return Sizes(
            r(self.blackhole_records),
            r(self.upsert_records),
            r(self.cold_records),
            self.latency_rate,
            self.latency_warmup_sec,
            self.latency_sec,
            r(self.scale_records),
            self.scale_partitions,
            self.blackhole_sqls,
            self.steady_rate,
            self.steady_warmup_sec,
            self.steady_sec,
        )


SMOKE = Sizes(5000, 5000, 2000, 2000, 2.0, 3.0, 5000, (2,), ("filter",), 2000, 5.0, 5.0)


# --- expected output ------------------------------------------------------------------------------------------


def expected_blackhole(sql: str, records: int) -> int:
    """Rows the SQL emits: every record, or those with ``sel_key = i % 10 = 0``."""
    return records if sql == "projection" else len(range(0, records, 10))


def expected_upsert(records: int, key_space: int | None) -> tuple[int, int]:
    """(rows, sum of ids) after upserting the records with ``sel_key <> 0``; ids are ``i % key_space``."""
    ids = {i % key_space if key_space else i for i in range(records) if i % 10 != 0}
    return len(ids), sum(ids)


# --- Postgres --------------------------------------------------------------------------------------------------


class Sink:
    """One run's target table, its checks and clean-up."""

    def __init__(self, pg: dict[str, str]) -> None:
        from job import connect_from_env

        self.pg = pg
        self.schema = f"bench_{uuid.uuid4().hex[:10]}"
        self.table = "events"
        self.conn = connect_from_env(pg)
        self.conn.autocommit = True

    def name(self):  # type: ignore[no-untyped-def]
        from psycopg import sql

        return sql.SQL("{}.{}").format(sql.Identifier(self.schema), sql.Identifier(self.table))

    def probe(self) -> Callable[[], bool]:
        """A first-row check on its own connection (it runs in the measuring thread)."""
        from job import connect_from_env
        from psycopg import sql

        conn = connect_from_env(self.pg)
        conn.autocommit = True
        regclass = self.name().as_string(conn)
        query = sql.SQL("SELECT EXISTS (SELECT 1 FROM {})").format(self.name())

        def first_row() -> bool:
            if conn.execute("SELECT to_regclass(%s) IS NOT NULL", [regclass]).fetchone()[0]:
                return bool(conn.execute(query).fetchone()[0])
            return False

        return first_row

    def counts(self) -> tuple[int, int]:
        from psycopg import sql

        row = self.conn.execute(sql.SQL("SELECT count(*), coalesce(sum(id), 0) FROM {}").format(self.name())).fetchone()
        return int(row[0]), int(row[1])

    def drop(self) -> None:
        from psycopg import sql

        self.conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(self.schema)))
        self.conn.close()


# --- contenders ------------------------------------------------------------------------------------------------


@dataclass
class Suite:
    env: dict[str, str]
    work: Path
    sizes: Sizes
    runs: int
    warmup: int
    master: str = "local[2]"
    topics: list[str] = field(default_factory=list)
    engine_url: str | None = None
    density_cells: list[tuple[str, int]] = field(default_factory=lambda: [*density.CELLS, *density.PEER_CELLS])
    density_sec: float = 300.0
    density_idle_sec: float = 60.0
    steady_runs: int | None = None
    """Scenario 7's counted runs (each contender's is minutes long), when not the suite's `runs`."""
    cluster_workers: tuple[int, ...] = (1, 2)
    """Scenario 5's cluster cells: workers given to the application (none: no cluster cells)."""

    def base_env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMLING__")}
        env.update(self.env)
        env["PYTHONUNBUFFERED"] = "1"
        return env

    def topic(self, prefix: str, records: int, partitions: int, **keyed: object) -> str:
        name = f"bench_{prefix}_{uuid.uuid4().hex[:8]}"
        print(f"producing {records:,} records to {name} ({partitions} partitions) ...", flush=True)
        kafka_data.produce(self.env, name, records, partitions, **keyed)  # type: ignore[arg-type]
        self.topics.append(name)
        return name

    def command(
        self,
        contender: str,
        topic: str,
        job: str,
        sink: Sink | None,
        *,
        follow: bool = False,
        master: str | None = None,
        batch: int = 250_000,
    ) -> tuple[list[str], dict[str, str]]:
        env = self.base_env()
        group = f"bench_{uuid.uuid4().hex[:10]}"
        if contender in (*OURS, ENGINE):
            target = (
                f"{{type: postgres, from: shaped, schema: {sink.schema}, table: {sink.table}}}"
                if sink
                else "{type: blackhole, from: shaped}"
            )
            ending = "" if follow else ", ending_offsets: latest"
            pipeline = self.work / f"{group}.yaml"
            pipeline.write_text(
                textwrap.dedent(f"""
                sources:
                  events: {{type: kafka, topic: {topic}{ending}}}
                transforms:
                  shaped: {{type: sql, primary_key: id, sql: "{SQL[job]}"}}
                sinks:
                  sink: {target}
                """)
            )
            env.update(
                {
                    "STREAMLING__JOB_MODE": "false" if follow else "true",
                    "STREAMLING__STATE_BACKEND__BACKEND_TYPE": "InMemory",
                    "STREAMLING__APPLICATION_ID": group,
                    "STREAMLING__KAFKA_SOURCE__CONSUMER_GROUP_ID": group,
                    "STREAMLING__SPARK__MASTER": master or self.master,
                    "STREAMLING__RECORD_BATCH_SIZE": str(batch),
                    "STREAMLING__SPARK__CHECKPOINT_ROOT": str(self.work / "ckpt"),
                }
            )
            if follow:
                env.update({f"STREAMLING__{k.upper()}": str(v) for k, v in LATENCY_OURS.items()})
            if contender in ("streamling_warm", ENGINE):
                assert self.engine_url, "no warm engine started"
                return [*streamling_cmd(), "submit", "--engine", self.engine_url, str(pipeline)], env
            return [*streamling_cmd(), str(pipeline)], env
        loop = contender.startswith("hand_loop")
        script = BENCH / "peers" / ("hand_loop.py" if loop else "quix_app.py")
        python = sys.executable if loop else str(QUIX_VENV / "bin" / "python")
        cmd = [python, str(script), "--topic", topic, "--group", group, "--job", job]
        if contender == "hand_loop_block":
            cmd += ["--decoder", "block"]
        if sink:
            cmd += ["--schema", sink.schema, "--table", sink.table]
        if follow:
            cmd.append("--follow")
            if contender == "quix":
                cmd += ["--commit-interval", str(LATENCY_QUIX_COMMIT_SEC)]
        return cmd, env

    def rounds(self, runs: int | None = None) -> list[tuple[int, str]]:
        """(index, label) of the warm-ups and counted runs; `runs` counted ones instead of the suite's."""
        counted = self.runs if runs is None else runs
        return [
            (i, "warm-up" if i < self.warmup else f"run {i - self.warmup + 1}") for i in range(self.warmup + counted)
        ]

    def check(self, what: str, contender: str, m: Measurement, got: object, expected: object) -> None:
        if m.returncode not in (0, -signal.SIGTERM):
            sys.exit(f"{what}: {contender} failed (exit {m.returncode}):\n{m.stderr_tail}")
        if got != expected:
            sys.exit(f"{what}: {contender} produced {got}, expected {expected}:\n{m.stderr_tail}")


def written_by(contender: str, m: Measurement) -> int:
    found = (WRITTEN if contender.startswith("streamling") else PEER_WRITTEN).search(m.stderr)
    if not found:
        sys.exit(f"{contender}: no row count in its output (exit {m.returncode}):\n{m.stderr_tail}")
    return int(found.group(found.lastindex))


def throughput(m: Measurement, records: int) -> dict:
    return {
        "rec_per_sec": round(records / m.wall_sec),
        "cpu_sec_per_million": round(m.cpu_sec / (records / 1e6), 2),
    }


def progress(label: str, contender: str, m: Measurement, extra: str = "") -> None:
    fields = m.extra
    rate = f"{fields['rec_per_sec']:>9,} rec/s, {fields['cpu_sec_per_million']:6.2f} CPU-s/M, " if fields else ""
    print(
        f"  {label:>8} {contender:>10}: {m.wall_sec:6.1f}s, {rate}peak RSS {m.peak_rss_mb:,.0f} MB"
        f"{f' (PSS {m.peak_pss_mb:,.0f})' if m.peak_pss_mb else ''}{extra}",
        flush=True,
    )
    if len(m.rss_at_peak_mb) > 1:  # a process tree: where the memory and the CPU are
        at_peak = ", ".join(f"{k} {v:,.0f}" for k, v in m.rss_at_peak_mb.items())
        cpu = ", ".join(f"{k} {v:,.1f}" for k, v in m.cpu_sec_by_role.items())
        print(f"  {'':>8} {'':>10}  RSS at peak MB: {at_peak}; CPU-s: {cpu}", flush=True)


THROUGHPUT = ("rec_per_sec", "cpu_sec_per_million", "peak_rss_mb", "peak_pss_mb", "wall_sec")


# --- scenarios -------------------------------------------------------------------------------------------------


def scenario_blackhole(s: Suite) -> dict:
    records = s.sizes.blackhole_records
    topic = s.topic("blackhole", records, 4)
    out: dict = {"records": records, "partitions": 4, "master": s.master, "record_batch_size": 500_000, "sqls": {}}
    here = (CONTENDERS[0], ENGINE, *CONTENDERS[1:])
    # The engine runs pipelines all day: its runs pay no JVM start, and its JIT has compiled the hot paths.
    engine = WarmEngine(s)
    s.engine_url = engine.url
    try:
        for job in s.sizes.blackhole_sqls:
            expected = expected_blackhole(job, records)
            print(f"[1] blackhole / {job}: {SQL[job]}  (expects {expected:,} rows)", flush=True)
            runs: dict[str, list[Measurement]] = {c: [] for c in here}
            blackhole_run(s, "engine warm-up", ENGINE, topic, job, records, expected, engine.proc.pid)
            for i, label in s.rounds():
                for contender in here:
                    m = blackhole_run(s, label, contender, topic, job, records, expected, engine.proc.pid)
                    if i >= s.warmup:
                        runs[contender].append(m)
            contenders = {c: summary(r, THROUGHPUT) for c, r in runs.items()}
            out["sqls"][job] = {
                "sql": SQL[job],
                "contenders": contenders,
                "ratios": ratios(contenders, THROUGHPUT),
                "ratios_engine": ratios(contenders, THROUGHPUT, ours=ENGINE),
            }
    finally:
        engine.stop()
        s.engine_url = None
    return out


def blackhole_run(
    s: Suite, label: str, contender: str, topic: str, job: str, records: int, expected: int, engine: int
) -> Measurement:
    """One scenario-1 run; the engine's contender is measured with the engine's tree beside its client."""
    cmd, env = s.command(contender, topic, job, None, batch=500_000)
    m = measure(cmd, env, s.work, beside=engine if contender == ENGINE else None)
    written = written_by(contender, m) if m.returncode == 0 else None
    s.check(f"[1] {job}", contender, m, written, expected)
    m.extra = {**throughput(m, records), "rows_out": written, "expected_rows": expected}
    progress(label, contender, m)
    return m


def run_upsert(
    s: Suite, label: str, contender: str, topic: str, records: int, expected: tuple[int, int]
) -> Measurement:
    sink = Sink(s.env)
    try:
        cmd, env = s.command(contender, topic, "upsert", sink)
        m = measure(cmd, env, s.work, first_row=sink.probe())
        got = sink.counts() if m.returncode == 0 else None
        s.check(f"{label} upsert", contender, m, got, expected)
    finally:
        sink.drop()
    m.extra = {**throughput(m, records), "rows_in_sink": got[0], "expected_rows": expected[0]}
    return m


def scenario_upsert(s: Suite) -> dict:
    records = s.sizes.upsert_records
    key_space = max(10, records // 4 // 10 * 10)
    topic = s.topic("upsert", records, 4, keyed=True, key_space=key_space)
    expected = expected_upsert(records, key_space)
    print(f"[2] upsert: {SQL['upsert']} → Postgres (expects {expected[0]:,} rows)", flush=True)
    runs: dict[str, list[Measurement]] = {c: [] for c in CONTENDERS}
    for i, label in s.rounds():
        for contender in CONTENDERS:
            m = run_upsert(s, label, contender, topic, records, expected)
            progress(label, contender, m)
            if i >= s.warmup:
                runs[contender].append(m)
    contenders = {c: summary(r, THROUGHPUT) for c, r in runs.items()}
    return {
        "records": records,
        "key_space": key_space,
        "partitions": 4,
        "master": s.master,
        "record_batch_size": 250_000,
        "hand_loop_batch": 100_000,
        "quix_commit_interval_sec": 5.0,
        "sql": SQL["upsert"],
        "expected_rows": expected[0],
        "contenders": contenders,
        "ratios": ratios(contenders, THROUGHPUT),
    }


class WarmEngine:
    """`streamling serve` for scenario 3's warm runs: started (and warmed by one submission) before any timing;
    its own memory is recorded apart, since a warm run's process tree is only the submitting client."""

    READY = re.compile(r"Engine ready on (http://\S+?)/? ")

    def __init__(self, s: Suite) -> None:
        env = s.base_env()
        env.update({"STREAMLING__SPARK__MASTER": s.master, "STREAMLING__SPARK__CHECKPOINT_ROOT": str(s.work / "ckpt")})
        self.proc = subprocess.Popen(
            [*streamling_cmd(), "serve", "--port", "0"],
            env=env,
            cwd=s.work,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            if found := self.READY.search(line):
                self.url = found.group(1)
                break
        else:
            sys.exit(f"streamling serve did not start (exit {self.proc.wait()})")
        threading.Thread(target=lambda: [None for _ in self.proc.stderr or ()], daemon=True).start()

    def rss_mb(self) -> float:
        root = psutil.Process(self.proc.pid)
        return sum(p.memory_info().rss for p in [root, *root.children(recursive=True)]) / 2**20

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(120)


def scenario_cold_start(s: Suite) -> dict:
    records = s.sizes.cold_records
    topic = s.topic("cold", records, 4, keyed=True)
    expected = expected_upsert(records, None)
    print(f"[3] cold start: launch → first row in Postgres ({records:,} records waiting)", flush=True)
    contenders_here = (*OURS, *PEERS)
    runs: dict[str, list[Measurement]] = {c: [] for c in contenders_here}
    engine = WarmEngine(s)
    s.engine_url = engine.url
    try:
        run_upsert(s, "engine warm-up", "streamling_warm", topic, records, expected)  # its first run: not counted
        for i, label in s.rounds():
            for contender in contenders_here:
                m = run_upsert(s, label, contender, topic, records, expected)
                if m.first_row_sec is None:
                    sys.exit(f"[3] {contender}: no first row seen")
                progress(label, contender, m, f", first row after {m.first_row_sec:.2f}s")
                if i >= s.warmup:
                    runs[contender].append(m)
        engine_rss = round(engine.rss_mb())
    finally:
        engine.stop()
        s.engine_url = None
    print(f"  warm engine (streamling serve) RSS after the runs: {engine_rss:,} MB", flush=True)
    keys = ("first_row_sec", "wall_sec", "peak_rss_mb")
    contenders = {c: summary(r, keys) for c, r in runs.items()}
    return {
        "records": records,
        "partitions": 4,
        "contenders": contenders,
        "ratios": ratios(contenders, keys),
        "warm_engine_rss_mb": engine_rss,
    }


class Watcher:
    """Polls the sink for newly visible ids; the time a row is first seen is the poll's start (the snapshot)."""

    def __init__(self, sink: Sink) -> None:
        self.seen: dict[int, tuple[int, float]] = {}  # id → (its ts in ms, first seen at in epoch seconds)
        self.stop = threading.Event()
        self.sink = sink
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        from job import connect_from_env
        from psycopg import sql

        conn = connect_from_env(self.sink.pg)
        conn.autocommit = True
        query = sql.SQL("SELECT id, ts FROM {} WHERE id > %s ORDER BY id").format(self.sink.name())
        last = -1
        while not self.stop.is_set():
            at = time.time()
            for row_id, ts in conn.execute(query, [last]).fetchall():
                self.seen.setdefault(row_id, (ts, at))
                last = max(last, row_id)
            time.sleep(0.01)
        conn.close()


def run_latency(s: Suite, label: str, contender: str) -> Measurement:
    topic = f"bench_latency_{uuid.uuid4().hex[:8]}"
    schema_id = kafka_data.create_topic(s.env, topic, 1)
    s.topics.append(topic)
    sink = Sink(s.env)
    procs: list[subprocess.Popen] = []
    result: list[Measurement] = []
    try:
        cmd, env = s.command(contender, topic, "upsert", sink, follow=True)
        runner = threading.Thread(target=lambda: result.append(measure(cmd, env, s.work, started=procs.append)))
        runner.start()
        while not procs:
            time.sleep(0.01)
        # a trickle until the contender is up, so start-up does not pile up a backlog to catch up on
        prod = kafka_data.producer(s.env, **{"linger.ms": 1})
        first_row = sink.probe()
        sent = 0
        deadline = time.time() + 180
        while not first_row():
            if procs[0].poll() is not None or time.time() > deadline:
                procs[0].kill()
                runner.join()
                sys.exit(f"[4] {contender} never wrote a row:\n{result[0].stderr_tail if result else ''}")
            prod.produce(
                topic,
                kafka_data.timed_payload(schema_id, sent, int(time.time() * 1000)),
                partition=0,
                headers=[("dbz.op", b"c")],
            )
            prod.flush(5)
            sent += 1
            time.sleep(0.1)
        watcher = Watcher(sink)
        watcher.thread.start()
        started_ms = time.time() * 1000
        duration = s.sizes.latency_warmup_sec + s.sizes.latency_sec
        paced, rate = kafka_data.paced(s.env, topic, schema_id, s.sizes.latency_rate, duration, first_id=sent)
        total = sent + paced
        expected = expected_upsert(total, None)
        last_id = max(i for i in range(total) if i % 10 != 0)
        deadline = time.time() + 60
        while last_id not in watcher.seen and time.time() < deadline:
            time.sleep(0.05)
        watcher.stop.set()
        watcher.thread.join()
        procs[0].send_signal(signal.SIGTERM)
        runner.join(timeout=90)
        if runner.is_alive():
            procs[0].kill()
            runner.join()
        m = result[0]
        got = sink.counts()
        s.check(f"[4] {label} latency", contender, m, got, expected)
    finally:
        sink.drop()
        # Each run's ~800k records go at once: the local broker rewrites its whole store as it changes (its
        # autosave thread used 0.3-0.4 cores through a run), so topics kept to the suite's end made every
        # later contender's run pay for the earlier ones.
        delete_topics(s.env, [topic])
        s.topics.remove(topic)
    measured_from = started_ms + s.sizes.latency_warmup_sec * 1000
    lat = sorted((at * 1000 - ts) for ts, at in watcher.seen.values() if ts >= measured_from)
    if not lat:
        sys.exit(f"[4] {contender}: no rows after the warm-up window")
    m.extra = {
        "p50_ms": round(statistics.median(lat), 1),
        "p99_ms": round(lat[min(len(lat) - 1, int(len(lat) * 0.99))], 1),
        "max_ms": round(lat[-1], 1),
        "achieved_rate": round(rate),
        "rows_measured": len(lat),
        "rows_in_sink": got[0],
        "expected_rows": expected[0],
    }
    return m


def scenario_latency(s: Suite) -> dict:
    z = s.sizes
    print(
        f"[4] latency at {z.latency_rate:,} rec/s: {z.latency_warmup_sec:.0f}s warm-up + {z.latency_sec:.0f}s measured",
        flush=True,
    )
    runs: dict[str, list[Measurement]] = {c: [] for c in CONTENDERS}
    for i, label in s.rounds():
        for contender in CONTENDERS:
            m = run_latency(s, label, contender)
            e = m.extra
            print(
                f"  {label:>8} {contender:>10}: p50 {e['p50_ms']:,.0f} ms, p99 {e['p99_ms']:,.0f} ms, "
                f"max {e['max_ms']:,.0f} ms at {e['achieved_rate']:,} rec/s, peak RSS {m.peak_rss_mb:,.0f} MB",
                flush=True,
            )
            if i >= s.warmup:
                runs[contender].append(m)
    keys = ("p50_ms", "p99_ms", "max_ms", "achieved_rate", "peak_rss_mb")
    contenders = {c: summary(r, keys) for c, r in runs.items()}
    return {
        "rate": z.latency_rate,
        "warmup_sec": z.latency_warmup_sec,
        "measured_sec": z.latency_sec,
        "partitions": 1,
        "settings": {
            "streamling": {**LATENCY_OURS, "job_mode": False, "master": s.master},
            "hand_loop": {"flush": "every poll (consume up to 10,000 messages, 50 ms timeout)"},
            "hand_loop_block": {"flush": "every poll (consume up to 10,000 messages, 50 ms timeout)"},
            "quix": {"commit_interval_sec": LATENCY_QUIX_COMMIT_SEC},
        },
        "contenders": contenders,
        "ratios": ratios(contenders, ("p50_ms", "p99_ms", "peak_rss_mb")),
    }


def scenario_scale(s: Suite) -> dict:
    """`local[1]` and `local[2]` over 1, 2 and 4 partitions, then the shared-nothing cluster of `infra/services up
    spark-cluster` with the application given 1 and 2 workers' cores (`spark.cores.max`): its executors, their
    Python workers and the worker daemons are measured with the driver (`measure(beside=…)`)."""
    records = s.sizes.scale_records
    parts = s.sizes.scale_partitions
    topics = {p: s.topic(f"scale{p}", records, p) for p in parts}
    cells = [("local[1]", max(parts))] + [("local[2]", p) for p in parts]
    cluster = ClusterCells.start() if s.cluster_workers else None
    if cluster is not None:
        cells += [(f"cluster:{n}", max(parts)) for n in s.cluster_workers if n <= len(cluster.workers)]
    expected = expected_blackhole("filter", records)
    print(f"[5] scale (ours): {', '.join(f'{m} x {p} partitions' for m, p in cells)}", flush=True)
    runs: dict[tuple[str, int], list[Measurement]] = {c: [] for c in cells}
    for i, label in s.rounds():
        for master, p in cells:
            on_cluster = master.startswith("cluster:") and cluster is not None
            url = cluster.url if on_cluster else master
            cmd, env = s.command("streamling", topics[p], "filter", None, master=url, batch=500_000)
            if on_cluster:
                env.update(cluster.env(int(master.split(":")[1])))
            m = measure(cmd, env, s.work, beside=cluster.workers if on_cluster else None)
            written = written_by("streamling", m) if m.returncode == 0 else None
            s.check("[5] scale", f"{master}/{p}", m, written, expected)
            m.extra = {**throughput(m, records), "rows_out": written, "expected_rows": expected}
            progress(label, f"{master}/{p}p", m)
            if i >= s.warmup:
                runs[(master, p)].append(m)
    out = [{"master": m, "partitions": p, **summary(r, THROUGHPUT)} for (m, p), r in runs.items()]
    return {
        "records": records,
        "sql": SQL["filter"],
        "record_batch_size": 500_000,
        "cluster": cluster.describe() if cluster is not None else None,
        "cells": out,
    }


@dataclass
class ClusterCells:
    """`infra/services up spark-cluster`, as scenario 5 uses it: a cell `cluster:N` gives the application N workers'
    cores (`spark.cores.max`), so one executor per worker; the executors run the packed environment, built before
    the first run so no run pays its packing."""

    url: str
    workers: list[int]
    cores_per_worker: int

    @classmethod
    def start(cls) -> ClusterCells | None:
        try:
            env = kafka_data.services_env("spark-cluster")
        except subprocess.CalledProcessError as exc:
            print(f"[5] scale: no shared-nothing cluster ({exc}); its cells are left out", flush=True)
            return None
        url = env["STREAMLING__SPARK__MASTER"]
        workers = sorted(
            p.pid
            for p in psutil.process_iter(["cmdline"])
            if "org.apache.spark.deploy.worker.Worker" in (p.info["cmdline"] or []) and url in p.info["cmdline"]
        )
        subprocess.run(
            [sys.executable, "-c", "from streamling.spark import packed_env; packed_env.resolve('auto')"], check=True
        )
        return cls(url, workers, int(os.environ.get("STREAMLING_INFRA_SPARK_CLUSTER_WORKER_CORES", "1")))

    def env(self, workers: int) -> dict[str, str]:
        return {
            "STREAMLING__SPARK__ENVIRONMENT_ARCHIVE": "auto",
            "STREAMLING__SPARK__CONF": json.dumps({"spark.cores.max": str(workers * self.cores_per_worker)}),
        }

    def describe(self) -> dict:
        return {
            "url": self.url,
            "workers": len(self.workers),
            "cores_per_worker": self.cores_per_worker,
            "caveat": f"{os.cpu_count()} cores in all: the driver, the workers and the broker share them",
        }


SCENARIOS: dict[int, tuple[str, Callable[[Suite], dict]]] = {
    1: ("kafka_avro_sql_blackhole", scenario_blackhole),
    2: ("kafka_avro_sql_postgres_upsert", scenario_upsert),
    3: ("cold_start_first_row", scenario_cold_start),
    4: ("latency_steady_rate", scenario_latency),
    5: ("scale_curve", scenario_scale),
    6: ("density", lambda s: density.scenario(s.env, s.work, s.density_cells, s.density_sec, s.density_idle_sec)),
    7: ("seed_steady_rate_clickhouse", steady_clickhouse.scenario),
}


# --- output ----------------------------------------------------------------------------------------------------


def _cell(stats: dict | None, fmt: str = "{:,.0f}") -> str:
    if not stats:
        return "-"
    return f"{fmt.format(stats['median'])} ({fmt.format(stats['min'])}-{fmt.format(stats['max'])})"


def markdown(payload: dict) -> str:
    lines = [
        f"# Benchmark suite {payload['recorded_at']}",
        "",
        f"{payload['machine']['cpus']} CPUs, {payload['runs']} counted run(s) + {payload['warmup']} warm-up per "
        f"contender{' (SMOKE: tiny sizes, not a measurement)' if payload['smoke'] else ''}. Medians (min-max); "
        "ratios are ours / peer on medians.",
        "",
    ]
    sc = payload["scenarios"]
    head = (
        "| contender | rec/s | CPU-s / M records | peak RSS MB | peak PSS MB | wall s | "
        "ours / peer (rec/s, CPU-s/M, RSS) |"
    )
    sep = "|---|---|---|---|---|---|---|"

    def throughput_rows(block: dict) -> list[str]:
        rows = [head, sep]
        for name, c in block["contenders"].items():
            r = block["ratios"].get(name, {})
            ratio = (
                f"{r.get('rec_per_sec', '-')}x / {r.get('cpu_sec_per_million', '-')}x / {r.get('peak_rss_mb', '-')}x"
                if name != "streamling"
                else ""
            )
            rows.append(
                f"| {name} | {_cell(c.get('rec_per_sec'))} | {_cell(c.get('cpu_sec_per_million'), '{:,.1f}')} | "
                f"{_cell(c.get('peak_rss_mb'))} | {_cell(c.get('peak_pss_mb'))} | "
                f"{_cell(c.get('wall_sec'), '{:,.1f}')} | {ratio} |"
            )
        return rows

    if "kafka_avro_sql_blackhole" in sc:
        b = sc["kafka_avro_sql_blackhole"]
        for job, block in b["sqls"].items():
            lines += [
                f"## 1. Kafka Avro → SQL {job} → blackhole ({b['records']:,} records)",
                "",
                f"`{block['sql']}`",
                "",
            ]
            lines += [*throughput_rows(block), ""]
            if block.get("ratios_engine"):
                vs = "; ".join(
                    f"{peer} {r.get('rec_per_sec', '-')}x / {r.get('cpu_sec_per_million', '-')}x / "
                    f"{r.get('peak_rss_mb', '-')}x"
                    for peer, r in block["ratios_engine"].items()
                    if peer != "streamling"
                )
                lines += [
                    f"{ENGINE}: `streamling submit` to a warm `streamling serve` (one uncounted run first), "
                    f"measured as the client and the engine's whole tree; {ENGINE} / peer (rec/s, CPU-s/M, RSS): "
                    f"{vs}.",
                    "",
                ]
    if "kafka_avro_sql_postgres_upsert" in sc:
        b = sc["kafka_avro_sql_postgres_upsert"]
        lines += [
            f"## 2. Kafka Avro → SQL filter → Postgres upsert ({b['records']:,} records, {b['expected_rows']:,} rows)",
            "",
            *throughput_rows(b),
            "",
        ]
    if "cold_start_first_row" in sc:
        b = sc["cold_start_first_row"]
        lines += [
            f"## 3. Cold start: launch → first row in Postgres ({b['records']:,} records waiting)",
            "",
            "| contender | first row s | run to end s | peak RSS MB | ours / peer (first row) |",
            "|---|---|---|---|---|",
        ]
        for name, c in b["contenders"].items():
            r = b["ratios"].get(name, {}).get("first_row_sec", "")
            lines.append(
                f"| {name} | {_cell(c.get('first_row_sec'), '{:,.2f}')} | {_cell(c.get('wall_sec'), '{:,.1f}')} | "
                f"{_cell(c.get('peak_rss_mb'))} | {f'{r}x' if r else ''} |"
            )
        if "warm_engine_rss_mb" in b:
            lines += [
                "",
                "streamling_warm: `streamling submit` to a `streamling serve` engine started before the runs (its RSS "
                f"column is the client's; the engine's own: {b['warm_engine_rss_mb']:,} MB after the runs).",
            ]
        lines.append("")
    if "latency_steady_rate" in sc:
        b = sc["latency_steady_rate"]
        lines += [
            f"## 4. End-to-end latency at {b['rate']:,} rec/s (produce → visible in Postgres)",
            "",
            f"Settings: `{json.dumps(b['settings'])}`",
            "",
            "| contender | p50 ms | p99 ms | max ms | achieved rec/s | peak RSS MB | ours / peer (p50, p99) |",
            "|---|---|---|---|---|---|---|",
        ]
        for name, c in b["contenders"].items():
            r = b["ratios"].get(name, {})
            ratio = f"{r.get('p50_ms', '-')}x / {r.get('p99_ms', '-')}x" if name != "streamling" else ""
            lines.append(
                f"| {name} | {_cell(c.get('p50_ms'))} | {_cell(c.get('p99_ms'))} | {_cell(c.get('max_ms'))} | "
                f"{_cell(c.get('achieved_rate'))} | {_cell(c.get('peak_rss_mb'))} | {ratio} |"
            )
        lines.append("")
    if "density" in sc:
        lines += density.markdown(sc["density"])
    if "seed_steady_rate_clickhouse" in sc:
        b = sc["seed_steady_rate_clickhouse"]
        lines += [
            f"## 7. The seed's workload at a steady {b['rate']:,} rec/s (Kafka Avro → SQL enrichment → ClickHouse)",
            "",
            f"{b.get('runs', payload['runs'])} counted run(s), each {b['warmup_sec']:.0f} s warm-up and "
            f"{b['measured_sec']:.0f} s measured; target: ≤ {b['target_cores']} cores "
            "and ≤ the plain hand loop's. `" + b["sql"] + "`",
            "",
            "| contender | cores | p50 ms | p99 ms | peak PSS MB | peak RSS MB | achieved rec/s "
            "| ours / peer (cores, p99, PSS) |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for name, c in b["contenders"].items():
            r = b["ratios"].get(name, {})
            ratio = f"{r.get('cores', '-')}x / {r.get('p99_ms', '-')}x / {r.get('peak_pss_mb', '-')}x" if r else ""
            lines.append(
                f"| {name} | {_cell(c.get('cores'), '{:,.3f}')} | {_cell(c.get('p50_ms'))} | "
                f"{_cell(c.get('p99_ms'))} | "
                f"{_cell(c.get('peak_pss_mb'))} | {_cell(c.get('peak_rss_mb'))} | {_cell(c.get('achieved_rate'))} | "
                f"{ratio} |"
            )
        lines.append("")
    if "scale_curve" in sc:
        b = sc["scale_curve"]
        lines += [
            f"## 5. Scale curve, ours only (scenario-1 filter, {b['records']:,} records)",
            "",
            *(
                [
                    f"`cluster:N`: {b['cluster']['url']}, the shared-nothing cluster, N of its "
                    f"{b['cluster']['workers']} workers ({b['cluster']['cores_per_worker']} core each) given to the "
                    f"application; its workers, executors and their Python workers measured with the driver. "
                    f"{b['cluster']['caveat']}.",
                    "",
                ]
                if b.get("cluster")
                else []
            ),
            "| master | partitions | rec/s | CPU-s / M records | peak RSS MB |",
            "|---|---|---|---|---|",
        ]
        for c in b["cells"]:
            lines.append(
                f"| {c['master']} | {c['partitions']} | {_cell(c.get('rec_per_sec'))} | "
                f"{_cell(c.get('cpu_sec_per_million'), '{:,.1f}')} | {_cell(c.get('peak_rss_mb'))} |"
            )
        lines.append("")
    return "\n".join(lines)


def ensure_quix_venv() -> None:
    """bench/.venv-quix with quixstreams 3.28.1: it pins confluent-kafka 2.12.x, so not in the product's venv."""
    python = QUIX_VENV / "bin" / "python"
    check = [str(python), "-c", "import quixstreams, fastavro, psycopg, clickhouse_connect, chdb"]
    if python.exists() and subprocess.run(check, capture_output=True).returncode == 0:
        return
    print(f"creating {QUIX_VENV} ({', '.join(QUIX_PACKAGES)}) ...", flush=True)
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(QUIX_VENV)], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "-q", *QUIX_PACKAGES], check=True)


def delete_topics(env: dict[str, str], topics: list[str]) -> None:
    from confluent_kafka.admin import AdminClient

    if topics:
        admin = AdminClient({"bootstrap.servers": env["STREAMLING__KAFKA_SOURCE__BROKERS"]})
        for future in admin.delete_topics(topics).values():
            try:
                future.result(timeout=30)
            except Exception as exc:  # clean-up only: a left-over topic is no failure
                print(f"could not delete a topic: {exc}", file=sys.stderr)


BROKER_RECORDS_WARN = 1_000_000


def broker_records(env: dict[str, str]) -> tuple[int, int]:
    """(topics, records) the broker holds before the suite starts, internal topics aside."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient, OffsetSpec

    admin = AdminClient({"bootstrap.servers": env["STREAMLING__KAFKA_SOURCE__BROKERS"]})
    topics = {n: t for n, t in admin.list_topics(timeout=30).topics.items() if not n.startswith("__")}
    wanted = {TopicPartition(n, p): OffsetSpec.latest() for n, t in topics.items() for p in t.partitions}
    if not wanted:
        return 0, 0
    return len(topics), sum(f.result(timeout=30).offset for f in admin.list_offsets(wanted).values())


def warn_if_broker_full(env: dict[str, str]) -> None:
    """noida-db saves its whole store as one JSON file after changes (offset commits too): records left by
    earlier tests or runs cost every contender CPU in the background, the multi-core one most."""
    try:
        topics, records = broker_records(env)
    except Exception as exc:  # a check only
        print(f"could not count the broker's records: {exc}", file=sys.stderr)
        return
    if records > BROKER_RECORDS_WARN:
        print(
            f"warning: the broker already holds {records:,} records in {topics} topics; a local noida-db saves its "
            "whole store after each change (offset commits too), which takes CPU from the contenders. Delete "
            "left-over topics (or start the broker on an empty data dir) to compare with the recorded figures.",
            file=sys.stderr,
            flush=True,
        )


def main() -> None:
    args = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    args.add_argument("--smoke", action="store_true", help="tiny sizes, 1 counted run, no warm-up: harness check")
    args.add_argument("--only", help="comma-separated scenario numbers (default: all)")
    args.add_argument("--runs", type=int, help="counted runs per contender (default 5; smoke 1)")
    args.add_argument("--warmup", type=int, help="warm-up runs per contender (default 1; smoke 0)")
    args.add_argument("--scale", type=float, default=1.0, help="multiply every record count (e.g. 0.05)")
    args.add_argument("--latency-sec", type=float, help="measured seconds of the latency scenario")
    args.add_argument("--latency-warmup-sec", type=float, help="seconds produced before latency is measured")
    args.add_argument("--latency-rate", type=int, help="records/s produced in the latency scenario")
    args.add_argument(
        "--density-cells", help="scenario 6's cells as contender:N,… (engine, cli, hand_loop, quix; default all)"
    )
    args.add_argument("--density-sec", type=float, help="scenario 6: seconds measured per cell (default 300)")
    args.add_argument("--density-idle-sec", type=float, help="scenario 6: seconds of an idle engine (default 60)")
    args.add_argument(
        "--cluster-workers",
        default="1,2",
        help="scenario 5: the shared-nothing cluster's cells, in workers given to the application ('' for none)",
    )
    args.add_argument(
        "--density-master",
        help="scenario 6: ours' spark.master (default local[*]; the engine: cores * engine.task_slots_per_core)",
    )
    args.add_argument("--steady-sec", type=float, help="scenario 7: measured seconds (default 300)")
    args.add_argument("--steady-warmup-sec", type=float, help="scenario 7: seconds produced before measuring (60)")
    args.add_argument("--steady-rate", type=int, help="scenario 7: records/s produced (default 20,000)")
    args.add_argument("--steady-runs", type=int, help="scenario 7: counted runs per contender (default: --runs)")
    args.add_argument("--steady-contenders", help="scenario 7: comma-separated contenders (default all)")
    args.add_argument(
        "--steady-epoch-sec", type=float, help="scenario 7: ours' checkpoint_interval_sec (default: the product's)"
    )
    args.add_argument("--results", type=Path, default=RESULTS)
    opts = args.parse_args()

    sizes = SMOKE if opts.smoke else Sizes().scaled(opts.scale)
    for name in ("latency_sec", "latency_warmup_sec", "latency_rate", "steady_sec", "steady_warmup_sec", "steady_rate"):
        if getattr(opts, name) is not None:
            setattr(sizes, name, getattr(opts, name))
    runs = opts.runs if opts.runs is not None else (1 if opts.smoke else 5)
    warmup = opts.warmup if opts.warmup is not None else (0 if opts.smoke else 1)
    only = [int(x) for x in opts.only.split(",")] if opts.only else sorted(SCENARIOS)
    unknown = [n for n in only if n not in SCENARIOS]
    if unknown:
        sys.exit(f"--only: no scenario {unknown} (there are {sorted(SCENARIOS)})")

    ensure_quix_venv()
    env = kafka_data.services_env("postgres", "kafka", "registry")
    warn_if_broker_full(env)
    suite = Suite(env, Path(tempfile.mkdtemp(prefix="streamling-bench-suite-")), sizes, runs, warmup)
    if opts.smoke:  # every contender's path once, briefly
        suite.density_cells, suite.density_sec, suite.density_idle_sec = list(density.SMOKE_CELLS), 6.0, 3.0
    if opts.density_cells:
        suite.density_cells = [(c, int(n)) for c, n in (cell.split(":") for cell in opts.density_cells.split(","))]
    if opts.density_sec is not None:
        suite.density_sec = opts.density_sec
    if opts.density_idle_sec is not None:
        suite.density_idle_sec = opts.density_idle_sec
    suite.steady_runs = opts.steady_runs
    suite.cluster_workers = tuple(int(n) for n in opts.cluster_workers.split(",") if n.strip())
    if opts.steady_contenders:
        steady_clickhouse.CONTENDERS[:] = opts.steady_contenders.split(",")
    if opts.steady_epoch_sec is not None:
        steady_clickhouse.OURS["checkpoint_interval_sec"] = opts.steady_epoch_sec
    if opts.density_master:
        density.MASTER = opts.density_master
    started = time.time()
    results = {}
    try:
        for n in only:
            name, run = SCENARIOS[n]
            results[name] = run(suite)
            # noida-db saves its whole store, every topic's records, as one JSON file from a background thread
            # after changes (offset commits too): with 1.6 GB stored that thread kept a core busy during and
            # after later runs. Each scenario gets a broker holding its own topics only.
            delete_topics(env, suite.topics)
            suite.topics.clear()
    finally:
        delete_topics(env, suite.topics)
    payload = {
        "smoke": opts.smoke,
        "runs": runs,
        "warmup": warmup,
        "runs_note": f"{runs} counted run(s): fewer than the >= 5 of a real measurement" if runs < 5 else "",
        "scale": opts.scale,
        "sizes": {k: v for k, v in vars(sizes).items()},
        "contenders": {
            "streamling": "the streamling CLI (Spark local mode)",
            "hand_loop": "bench/peers/hand_loop.py: confluent-kafka + fastavro + psycopg COPY/merge",
            "hand_loop_block": "the same loop, each poll one Avro block (polars) + pyarrow.compute + CSV COPY",
            "quix": "bench/peers/quix_app.py: quixstreams 3.28.1, Quix AvroDeserializer (Schema Registry mode)",
        },
        "baseline_original": {"input_rec_per_sec_8vcpu": 108_000, "cold_start_sec_incl_pod": 5.0},
        "suite_sec": round(time.time() - started, 1),
        "scenarios": results,
    }
    path = record("suite", payload, opts.results)
    stored = json.loads(path.read_text())
    md = markdown(stored)
    path.with_suffix(".md").write_text(md + "\n")
    print()
    print(md)
    print(f"recorded {path} and {path.with_suffix('.md')}")


if __name__ == "__main__":
    main()
