"""A Dagster run launched against a warm engine (`streamling serve`, a real process): the backfill op submits its
pipeline there instead of starting Spark, and reports what the engine did; with the engine unreachable, the run
says so and runs on a session of its own. Real Postgres."""

from __future__ import annotations

import textwrap
import uuid
from pathlib import Path

import dagster as dg
import pytest

from streamling_dagster import build_definitions
from streamling_dagster.resources import StreamlingResource
from tests.e2e.engine import Engine
from tests.integration.test_dagster import SessionSpark

PIPELINE = """
sources:
  gen: {{type: generator, rows: 3000, record_batch_size: 1000, primary_key: id}}
sinks:
  out: {{type: postgres, from: gen, schema: {schema}, table: rows}}
"""


@pytest.fixture
def schema(pg_connect, postgres_env, monkeypatch):
    for key, value in postgres_env.items():
        monkeypatch.setenv(key, value)
    name = f"d_{uuid.uuid4().hex[:10]}"
    yield name
    with pg_connect() as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


def backfill(tmp_path: Path, schema: str, engine_url: str) -> tuple[dg.ExecuteInProcessResult, list[str]]:
    directory = tmp_path / "pipelines"
    directory.mkdir(exist_ok=True)
    (directory / "warm.yaml").write_text(textwrap.dedent(PIPELINE.format(schema=schema)))
    assets = [a for a in build_definitions(directory).assets or [] if isinstance(a, dg.AssetsDefinition)]
    streamling = StreamlingResource(
        engine_url=engine_url,
        overrides={
            "state_backend.sqlite.database_path": str(tmp_path / "state.db"),
            "spark.checkpoint_root": str(tmp_path / "checkpoints"),
        },
    )
    resources = {"streamling": streamling, "spark": SessionSpark(spark_config={"spark.master": "local[2]"})}
    with dg.instance_for_test() as instance:
        result = dg.materialize(assets, instance=instance, resources=resources)
        messages = [entry.user_message for entry in instance.all_logs(result.run_id)]
    return result, messages


def rows(pg_connect, schema: str) -> tuple:
    with pg_connect() as conn:
        return conn.execute(f'SELECT count(*), count(DISTINCT id), max(id) FROM "{schema}".rows').fetchone()


def test_a_dagster_backfill_runs_on_the_warm_engine(
    tmp_path: Path, postgres_env, schema: str, pg_connect, monkeypatch
) -> None:
    """The resource finds the engine's token where the engine keeps it on this host (its token file)."""
    monkeypatch.setenv("STREAMLING_HOME", str(tmp_path / ".streamling-home"))
    engine = Engine(tmp_path, postgres_env)
    try:
        result, messages = backfill(tmp_path, schema, engine.url or "")
    finally:
        assert engine.stop() == 0
    assert result.success
    (event,) = result.get_asset_materialization_events()
    assert event.materialization.metadata["rows_written"].value == 3000
    assert rows(pg_connect, schema) == (3000, 3000, 3000)
    assert f"Running on the warm engine at {engine.url}" in messages
    ran_there = [line for line in engine.lines if "warm.yaml submitted" in line]
    assert len(ran_there) == 1 and str(tmp_path / "pipelines" / "warm.yaml") in ran_there[0]
    assert any("sink 'out': 3000 rows written" in line for line in engine.lines)


def test_with_the_engine_unreachable_the_run_says_so_and_uses_its_own_session(
    tmp_path: Path, schema: str, pg_connect, spark
) -> None:
    with socket_closed() as url:
        result, messages = backfill(tmp_path, schema, url)
    assert result.success
    assert rows(pg_connect, schema) == (3000, 3000, 3000)
    assert any(
        m.startswith(f"the engine at {url} is unreachable:")
        and m.endswith("running on a Spark session of this run instead")
        for m in messages
    ), messages


class socket_closed:
    """A loopback URL nothing listens on."""

    def __enter__(self) -> str:
        import socket

        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))  # bound, never listening: connections are refused
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}"

    def __exit__(self, *exc: object) -> None:
        self.sock.close()
