"""Many pipelines, one engine: a real `streamling serve`, real Postgres (sinks and state backend).

- Fifty pipelines submitted at the same moment all start (two at a time; the others wait in state ``queued`` and
  say so in their log), all commit, none fails, and every sink ends exact.
- Each run's Spark jobs go to its pipeline's FAIR pool: nine trickling pipelines' commits stay within 2x of their
  time alone while a tenth reads as fast as it can.
- Submit/stop cycles leave nothing behind: the engine holds no client of an ended run, and its memory stays flat.
  The CI test runs 30 cycles; ``STREAMLING_TEST_CYCLES=1000 .venv/bin/python -m pytest
  tests/e2e/test_engine_many.py -k cycles`` runs a thousand (last result in bench/README.md, *Density*).
"""

from __future__ import annotations

import os
import re
import statistics
import subprocess
import textwrap
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest

from tests.e2e.engine import Engine, settings_document, submit_all
from tests.waiting import wait_for


@pytest.fixture
def schema(pg_connect) -> Iterator[str]:
    name = f"many_{uuid.uuid4().hex[:10]}"
    with pg_connect() as conn:
        conn.execute(f'CREATE SCHEMA "{name}"')
    yield name
    with pg_connect() as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


@pytest.fixture
def state_env(postgres_env: dict[str, str]) -> dict[str, str]:
    """The Postgres state backend, as a production engine would run many pipelines."""
    pg, state = "STREAMLING__POSTGRES_SINK__", "STREAMLING__STATE_BACKEND__"
    return {
        **postgres_env,
        f"{state}BACKEND_TYPE": "Postgres",
        f"{state}POSTGRES__HOST": postgres_env[pg + "HOST"],
        f"{state}POSTGRES__PORT": postgres_env[pg + "PORT"],
        f"{state}POSTGRES__USER": postgres_env[pg + "USER"],
        f"{state}POSTGRES__PASSWORD": postgres_env[pg + "PASS"],
        f"{state}POSTGRES__DATABASE": postgres_env[pg + "DB"],
    }


def write_pipeline(folder: Path, name: str, source: str, sink: str) -> Path:
    path = folder / f"{name}.yaml"
    path.write_text(
        textwrap.dedent(f"""
        sources:
          src: {source}
        transforms:
          kept: {{type: sql, primary_key: id, sql: "SELECT id, amount, name FROM src WHERE id % 7 <> 0"}}
        sinks:
          out: {sink}
        """)
    )
    return path


def test_fifty_pipelines_submitted_at_once_all_start_commit_and_end_exact(
    tmp_path: Path, state_env: dict[str, str], pg_connect, schema: str
) -> None:
    n, rows = 50, 1500
    app = f"many_{uuid.uuid4().hex[:8]}"
    env = {**state_env, "STREAMLING__JOB_MODE": "true"}
    pipelines = [
        write_pipeline(
            tmp_path,
            f"p{i:02d}",
            f"{{type: generator, rows: {rows}, rows_per_second: 250, record_batch_size: 500, primary_key: id}}",
            f"{{type: postgres, from: kept, schema: {schema}, table: t{i:02d}}}",
        )
        for i in range(n)
    ]
    engine = Engine(tmp_path, state_env)
    try:
        # A namespace (application_id) per pipeline: their sources share a name, and positions are kept by name.
        documents = [settings_document(tmp_path, {**env, "STREAMLING__APPLICATION_ID": f"{app}_{i}"}) for i in range(n)]
        ids = submit_all(engine, pipelines, documents)
        starting_at_once = 0
        deadline = time.monotonic() + 600
        while True:
            runs = {r["id"]: r for r in engine.get("/runs")["runs"]}
            starting_at_once = max(starting_at_once, sum(r["state"] == "starting" for r in runs.values()))
            if all(runs[i]["done"] for i in ids):
                break
            assert time.monotonic() < deadline, {i: runs[i]["state"] for i in ids}
            time.sleep(0.2)
        assert {runs[i]["state"] for i in ids} == {"succeeded"}, [runs[i]["error"] for i in ids if runs[i]["error"]]
        assert starting_at_once <= 2  # engine.max_starting_runs
        for i in ids:  # when each waited, started and ended
            assert runs[i]["submitted_at"] <= runs[i]["admitted_at"] <= runs[i]["started_at"] <= runs[i]["finished_at"]
        by_submission = sorted(ids, key=lambda i: runs[i]["submitted_at"])
        assert by_submission == sorted(ids, key=lambda i: runs[i]["admitted_at"])  # first come, first started
        queued = [
            i
            for i in ids
            if any(" is queued: runs start 2 at a time" in line for line in engine.get(f"/runs/{i}")["logs"])
        ]
        assert len(queued) >= n - 4  # all but the first few waited their turn
        assert all(runs[i]["restarts"] == 0 for i in ids)
    finally:
        assert engine.stop() == 0
    kept = len([i for i in range(1, rows + 1) if i % 7 != 0])
    with pg_connect() as conn:
        for i in range(n):
            count, distinct, total = conn.execute(
                f'SELECT count(*), count(DISTINCT id), sum(id) FROM "{schema}".t{i:02d}'
            ).fetchone()
            assert (count, distinct, total) == (kept, kept, sum(j for j in range(1, rows + 1) if j % 7 != 0)), i


def epoch_times(engine: Engine, run_ids: list[str], seconds: float) -> list[float]:
    """Each run's epochs as they commit (start to commit, ms), sampled from `GET /runs` for `seconds`."""
    seen: dict[tuple[str, int], float] = {}
    ends = time.monotonic() + seconds
    while time.monotonic() < ends:
        for run in engine.get("/runs")["runs"]:
            if run["id"] in run_ids and run["state"] == "running":
                source = run["sources"]["src"]
                if source["epoch_ms"] is not None:
                    seen[(run["id"], source["epochs"])] = source["epoch_ms"]
        time.sleep(0.25)
    return list(seen.values())


def test_a_backfill_does_not_hold_back_trickling_pipelines(tmp_path: Path, state_env: dict[str, str]) -> None:
    """FAIR scheduler pools, one per pipeline: the trickles' small jobs take the next free task slot instead of
    queueing behind every task of the backfill's epochs. Compared within one engine, trickles alone and then beside
    the backfill (medians of their epochs, start to commit)."""
    env = {**state_env, "STREAMLING__CHECKPOINT_INTERVAL_SEC": "1"}
    app = f"fair_{uuid.uuid4().hex[:8]}"
    blackhole = "{type: blackhole, from: kept}"
    trickles = [
        write_pipeline(tmp_path, f"trickle{i}", "{type: generator, rows_per_second: 100, primary_key: id}", blackhole)
        for i in range(9)
    ]
    backfill = write_pipeline(
        tmp_path, "backfill", "{type: generator, record_batch_size: 400000, primary_key: id}", blackhole
    )
    engine = Engine(tmp_path, state_env)
    try:
        documents = [
            settings_document(tmp_path, {**env, "STREAMLING__APPLICATION_ID": f"{app}_{i}"}) for i in range(10)
        ]
        ids = submit_all(engine, trickles, documents[:9])
        wait_for(lambda: all(r["state"] == "running" for r in engine.get("/runs")["runs"]), 180, "trickles running")
        time.sleep(3)
        alone = epoch_times(engine, ids, 10)
        (busy,) = submit_all(engine, [backfill], documents[9:])
        wait_for(lambda: engine.get(f"/runs/{busy}")["sources"].get("src", {}).get("epochs", 0) >= 2, 120, "backfill")
        beside = epoch_times(engine, ids, 10)
        rows = engine.get(f"/runs/{busy}")["sources"]["src"]["rows_in"]
    finally:
        assert engine.stop() == 0
    assert len(alone) >= 40 and len(beside) >= 40  # nine trickles, an epoch a second each
    assert rows >= 1_000_000  # the backfill did read at full speed meanwhile
    assert statistics.median(beside) <= 2 * statistics.median(alone), (
        statistics.median(alone),
        statistics.median(beside),
    )


def engine_memory(engine: Engine) -> dict[str, float]:
    """MB: the PSS of the engine's processes by kind (the driver, its JVM, Spark's Python workers), and what the
    JVM's heap holds live after a full collection (``jcmd GC.class_histogram`` collects first) plus its metaspace.
    A JVM's resident size follows its heap's high-water mark, not what it holds: the live heap says whether runs
    leave anything behind in the JVM."""
    root = psutil.Process(engine.proc.pid)
    out = {"driver": 0.0, "jvm": 0.0, "workers": 0.0}
    jvm = None
    for p in [root, *root.children(recursive=True)]:
        try:
            kind = "driver" if p.pid == root.pid else "jvm" if "java" in p.name() else "workers"
            out[kind] += p.memory_full_info().pss / 2**20
        except psutil.Error:
            continue
        if kind == "jvm":
            jvm = p.pid
    assert jvm is not None
    histogram = subprocess.run(
        ["jcmd", str(jvm), "GC.class_histogram"], capture_output=True, text=True, timeout=120, check=True
    ).stdout
    out["jvm_live_heap"] = int(histogram.strip().splitlines()[-1].split()[-1]) / 2**20  # "Total <n> <bytes>"
    heap = subprocess.run(["jcmd", str(jvm), "GC.heap_info"], capture_output=True, text=True, timeout=60).stdout
    metaspace = re.search(r"Metaspace\s+used (\d+)K", heap)
    out["jvm_metaspace"] = int(metaspace.group(1)) / 1024 if metaspace else 0.0
    out["total"] = out["driver"] + out["jvm"] + out["workers"]
    return out


def test_submit_stop_cycles_leave_the_engine_flat(
    tmp_path: Path, postgres_env: dict[str, str], kafka_env, schema: str
) -> None:
    """Each cycle opens what a Kafka → Postgres run opens (consumers and a registry client in the workers, a pool on
    the driver) and stops it; the engine ends each cycle holding nothing of it, ended runs' records are evicted (a
    retention of 1 s here), and the driver's memory and the JVM's live heap after the second half of the cycles
    are within a bound of the first half's. The total PSS is printed with them (the figure in bench/README.md)."""
    from tests.kafka_util import KafkaTestbed

    cycles = int(os.environ.get("STREAMLING_TEST_CYCLES", "30"))
    bed = KafkaTestbed(kafka_env)
    try:
        topic = bed.topic(partitions=1)
        record = {
            "type": "record",
            "name": "Row",
            "fields": [
                {"name": "id", "type": "long"},
                {"name": "amount", "type": "double"},
                {"name": "name", "type": "string"},
            ],
        }
        bed.produce_avro(
            topic,
            record,
            [{"id": i, "amount": float(i), "name": f"n{i}"} for i in range(200)],
            partition_of=lambda _i: 0,
        )
        pipeline = write_pipeline(
            tmp_path,
            "cycled",
            f"{{type: kafka, topic: {topic}, primary_key: id}}",
            f"{{type: postgres, from: kept, schema: {schema}, table: t}}",
        )
        env = {
            **postgres_env,
            **kafka_env,
            "STREAMLING__STATE_BACKEND__BACKEND_TYPE": "InMemory",
            "STREAMLING__ENGINE__RUN_RETENTION_SEC": "1",
        }
        engine = Engine(tmp_path, env)
        try:
            document = settings_document(tmp_path, env)
            marks: dict[int, dict[str, float]] = {}
            for cycle in range(1, cycles + 1):
                (run,) = submit_all(engine, [pipeline], document)
                wait_for(
                    lambda run=run: engine.get(f"/runs/{run}")["sources"].get("src", {}).get("epochs", 0) >= 1,
                    120,
                    f"cycle {cycle}: a commit",
                )
                httpx.post(f"{engine.url}/runs/{run}/stop", headers=engine.headers, timeout=30)
                wait_for(lambda run=run: engine.get(f"/runs/{run}")["done"], 120, f"cycle {cycle}: stopped")
                assert engine.get(f"/runs/{run}")["state"] == "stopped"
                wait_for(lambda: engine.get("/health")["held"] == 0, 30, f"cycle {cycle}: clients released")
                if cycle in (cycles // 2, cycles) or (cycles >= 100 and cycle % (cycles // 10) == 0):
                    marks[cycle] = engine_memory(engine)
            # the ended runs' records go once their retention is over
            wait_for(lambda: len(engine.get("/runs")["runs"]) == 0, 30, "ended runs evicted")
            for n, m in sorted(marks.items()):
                print(f"after {n} cycles: " + ", ".join(f"{k} {v:.0f} MB" for k, v in m.items()))
            half, end = marks[cycles // 2], marks[cycles]
            assert end["driver"] - half["driver"] < max(20.0, 0.05 * half["driver"]), marks
            assert end["jvm_live_heap"] - half["jvm_live_heap"] < max(30.0, 0.1 * half["jvm_live_heap"]), marks
            assert end["jvm_metaspace"] - half["jvm_metaspace"] < 20.0, marks
        finally:
            assert engine.stop() == 0
    finally:
        bed.close()


def test_two_pipelines_that_would_share_their_positions_are_not_run_together(tmp_path: Path) -> None:
    """One settings document for two pipelines whose sources share a name: the second is refused while the first
    runs (positions are kept per source name within an application_id), naming both."""
    blackhole = "{type: blackhole, from: kept}"
    first = write_pipeline(tmp_path, "first", "{type: generator, rows_per_second: 50, primary_key: id}", blackhole)
    second = write_pipeline(tmp_path, "second", "{type: generator, rows_per_second: 50, primary_key: id}", blackhole)
    engine = Engine(tmp_path, {})
    try:
        document = settings_document(tmp_path, {})
        (running,) = submit_all(engine, [first], document)
        wait_for(lambda: engine.get(f"/runs/{running}")["state"] == "running", 120, "the first running")
        (refused,) = submit_all(engine, [second], document)
        wait_for(lambda: engine.get(f"/runs/{refused}")["done"], 120, "the second refused")
        view = engine.get(f"/runs/{refused}")
        assert (view["state"], view["exit_code"]) == ("invalid", 2)
        assert view["error"] == (
            f"pipeline 'second' keeps the positions of source(s) 'src' where running pipeline 'first' (run {running}) "
            "keeps its own (application_id 'local_app_v1' in the same state backend): the two would read and commit "
            "each other's positions; give each pipeline its own application_id"
        )
        assert engine.get(f"/runs/{running}")["state"] == "running"
    finally:
        assert engine.stop() == 0
