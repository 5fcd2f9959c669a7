"""A warm engine (`streamling serve`) and its clients (`streamling submit`), as black boxes: real engine process,
real Postgres. Two pipelines at once (one failing, the other unaffected), a submitter's SIGTERM draining its run
only, and an engine killed mid-run whose pipelines resume exactly on a new engine."""

from __future__ import annotations

import signal
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest

from tests.e2e.cli import run_cli, sqlite_state, write
from tests.e2e.engine import Engine, submit
from tests.e2e.test_cli_postgres import create_audited_events


@pytest.fixture
def engine_env(tmp_path: Path, postgres_env: dict[str, str]) -> dict[str, str]:
    return {**postgres_env}


@pytest.fixture
def engine(tmp_path: Path, engine_env: dict[str, str]) -> Iterator[Engine]:
    started = Engine(tmp_path, engine_env)
    yield started
    if started.proc.poll() is None:
        started.kill()


@pytest.fixture
def schemas(pg_connect) -> Iterator[list[str]]:
    made: list[str] = []
    yield made
    with pg_connect() as conn:
        for name in made:
            conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


def audited_table(pg_connect, schemas: list[str], check: str = "true") -> str:
    name = f"w_{uuid.uuid4().hex[:10]}"
    schemas.append(name)
    with pg_connect() as conn:
        create_audited_events(conn, name, check)
    return name


def counts(pg_connect, schema: str) -> tuple:
    with pg_connect() as conn:
        rows = conn.execute(f'SELECT count(*), count(DISTINCT id), min(id), max(id) FROM "{schema}".events').fetchone()
        audit = conn.execute(f'SELECT count(*), count(DISTINCT id), min(op), max(op) FROM "{schema}".audit').fetchone()
    return rows, audit


def generator_to_postgres(cwd: Path, schema: str, name: str, rows: str, pacing: str = "") -> Path:
    return write(
        cwd,
        f"""
        sources:
          src: {{type: generator, {rows}, record_batch_size: 1000{pacing}}}
        sinks:
          rows: {{type: postgres, from: src, primary_key: id, schema: {schema}, table: events}}
        """,
        name,
    )


def test_two_pipelines_at_once_one_failing_leaves_the_other_and_the_engine_untouched(
    tmp_path: Path, engine: Engine, engine_env: dict[str, str], pg_connect, schemas: list[str]
) -> None:
    good = audited_table(pg_connect, schemas)
    bad = audited_table(pg_connect, schemas, check="id < 3500")
    env = {**engine_env, "STREAMLING__JOB_MODE": "true"}
    good_run = submit(tmp_path, engine, generator_to_postgres(tmp_path, good, "good.yaml", "rows: 6000"), env)
    bad_run = submit(
        tmp_path,
        engine,
        generator_to_postgres(tmp_path, bad, "bad.yaml", "rows: 6000", ", rows_per_second: 3000"),
        {**env, "STREAMLING__APPLICATION_ID": "other_app"},
    )
    _, bad_err = bad_run.communicate(timeout=240)
    _, good_err = good_run.communicate(timeout=240)

    assert good_run.returncode == 0, good_err
    assert counts(pg_connect, good) == ((6000, 6000, 1, 6000), (6000, 6000, "INSERT", "INSERT"))
    assert "sink 'rows': 6000 rows written (6000 inserts, 0 updates, 0 deletes)" in good_err
    assert "events_id_check" not in good_err  # each submitter sees its own run's lines only

    assert bad_run.returncode == 1, bad_err
    assert 'violates check constraint "events_id_check"' in bad_err.splitlines()[-1]
    (rows, _, _, highest), _ = counts(pg_connect, bad)
    assert rows == highest == sqlite_state(tmp_path / "state.db", "other_app")["src:generator"]["offset"] < 3500

    assert httpx.get(f"{engine.url}/health", timeout=10).json() == {"status": "ok", "runs": 0, "held": 0}
    again = submit(tmp_path, engine, tmp_path / "good.yaml", env)
    _, again_err = again.communicate(timeout=240)
    assert again.returncode == 0, again_err
    assert "has nothing after position {'offset': 6000}; not started" in again_err


def test_sigterm_to_a_submitter_drains_its_run_and_the_engine_keeps_serving(
    tmp_path: Path, engine: Engine, engine_env: dict[str, str], pg_connect, schemas: list[str]
) -> None:
    schema = audited_table(pg_connect, schemas)
    pipeline = generator_to_postgres(tmp_path, schema, "endless.yaml", "rows_per_second: 2000")
    run = submit(tmp_path, engine, pipeline, engine_env)
    deadline = time.monotonic() + 120
    while counts(pg_connect, schema)[0][0] == 0:
        assert run.poll() is None and time.monotonic() < deadline, run.stderr.read() if run.stderr else ""
        time.sleep(0.2)
    run.send_signal(signal.SIGTERM)
    _, err = run.communicate(timeout=120)

    assert run.returncode == 0, err
    assert "Finished in" in err
    committed = sqlite_state(tmp_path / "state.db")["src:generator"]["offset"]
    (rows, distinct, _, highest), (audited, _, first_op, last_op) = counts(pg_connect, schema)
    assert rows == distinct == highest == audited == committed > 0
    assert first_op == last_op == "INSERT"
    views = engine.get("/runs")["runs"]
    assert [(v["state"], v["exit_code"]) for v in views] == [("stopped", 0)]
    assert engine.proc.poll() is None


def test_an_engine_killed_mid_run_loses_nothing_and_its_pipeline_resumes_exactly_on_a_new_one(
    tmp_path: Path, engine_env: dict[str, str], pg_connect, schemas: list[str]
) -> None:
    schema = audited_table(pg_connect, schemas)
    pipeline = generator_to_postgres(tmp_path, schema, "paced.yaml", "rows: 20000", ", rows_per_second: 4000")
    env = {**engine_env, "STREAMLING__JOB_MODE": "true"}
    first = Engine(tmp_path, engine_env)
    run = submit(tmp_path, first, pipeline, env)
    deadline = time.monotonic() + 120
    while counts(pg_connect, schema)[0][0] < 3000:
        assert run.poll() is None and time.monotonic() < deadline, run.stderr.read() if run.stderr else ""
        time.sleep(0.05)
    first.kill()  # the engine's whole process group: the driver; its JVM goes when its stdin closes
    _, err = run.communicate(timeout=60)
    assert run.returncode == 1, err
    assert "submit it again to resume" in err.splitlines()[-1]
    assert counts(pg_connect, schema)[0][0] < 20000

    second = Engine(tmp_path, engine_env)
    try:
        resumed = submit(tmp_path, second, pipeline, env)
        _, err = resumed.communicate(timeout=240)
        assert resumed.returncode == 0, err
    finally:
        assert second.stop() == 0
    assert counts(pg_connect, schema) == ((20000, 20000, 1, 20000), (20000, 20000, "INSERT", "INSERT"))
    assert sqlite_state(tmp_path / "state.db")["src:generator"]["offset"] == 20000


def test_the_engine_refuses_a_submission_it_cannot_read_with_a_clear_error(tmp_path: Path, engine: Engine) -> None:
    done = run_cli(tmp_path, "submit", "--engine", engine.url or "", timeout=60)
    assert done.returncode == 2
    assert (
        done.stderr.strip()
        == "Error: no pipeline given: pass PIPELINE_FILE or set STREAMLING__PIPELINE_DEFINITION_LOCATION"
    )
    refused = httpx.post(f"{engine.url}/runs", json={"config": 3}, timeout=10, headers=engine.headers)
    assert refused.status_code == 400
    assert refused.json() == {"error": "a submission needs 'pipeline': the pipeline file's path on the engine's host"}


def _is_workers_daemon(process: psutil.Process) -> bool:
    """Whether `process` is the daemon Spark's JVM forked its Python workers from. Workers the daemon forked for a
    task that just ended may be zombies or gone by the time they are asked: they are not the daemon."""
    try:
        parent = process.parent()
        return (
            parent is not None
            and "java" in parent.name()
            and "streamling.spark.worker_daemon" in " ".join(process.cmdline())
        )
    except (psutil.ZombieProcess, psutil.NoSuchProcess):
        return False


def test_the_engine_is_ready_once_its_python_workers_daemon_runs_with_pandas_and_kafka_imported(engine: Engine) -> None:
    """Runs submitted the moment the engine is ready fork their readers from a daemon already up, with what every
    Kafka read imports (`worker_daemon.PRELOAD`, and pandas for an engine) already loaded: fifty such runs on two
    cores otherwise waited 25 s for their first read tasks."""
    tree = psutil.Process(engine.proc.pid).children(recursive=True)
    daemons = [p for p in tree if _is_workers_daemon(p)]
    assert len(daemons) == 1, [p.pid for p in tree]
    environ = daemons[0].environ()
    assert environ["STREAMLING_WORKER_PRELOAD"] == "pandas"
    mapped = {m.path for m in daemons[0].memory_maps()}  # the extension modules its imports loaded
    assert any("/site-packages/pandas/_libs/" in path for path in mapped)
    assert any("/site-packages/confluent_kafka/" in path for path in mapped)
    assert any("/site-packages/fastavro/" in path for path in mapped)
