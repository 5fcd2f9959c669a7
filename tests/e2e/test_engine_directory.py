"""A directory of pipelines as the engine's desired state (``streamling serve --pipelines DIR``): a real engine, real
Postgres. Files present at start run; a new file starts; a changed file drains the running version and starts the
new one from the committed positions (the table ends with every id once, nothing lost, nothing twice); an invalid
change is reported and leaves the running version alone; a removed file's run stops; ``GET /ready`` is 200 only
while every pipeline of the directory runs."""

from __future__ import annotations

import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.e2e.cli import sqlite_state
from tests.e2e.engine import Engine
from tests.waiting import wait_for


@pytest.fixture
def schema(pg_connect) -> Iterator[str]:
    name = f"dir_{uuid.uuid4().hex[:10]}"
    yield name
    with pg_connect() as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


def pipeline(schema: str, table: str, sql: str = "SELECT id, amount FROM src") -> str:
    return textwrap.dedent(f"""
        sources:
          src: {{type: generator, rows_per_second: 300, record_batch_size: 1000, primary_key: id}}
        transforms:
          shaped: {{type: sql, primary_key: id, sql: "{sql}"}}
        sinks:
          rows: {{type: postgres, from: shaped, schema: {schema}, table: {table}}}
        """)


def rows(pg_connect, schema: str, table: str) -> tuple[int, int, int]:
    with pg_connect() as conn:
        if conn.execute("SELECT to_regclass(%s)", [f'"{schema}"."{table}"']).fetchone()[0] is None:
            return 0, 0, 0
        found = conn.execute(f'SELECT count(*), count(DISTINCT id), coalesce(max(id), 0) FROM "{schema}"."{table}"')
        return tuple(int(v) for v in found.fetchone())  # type: ignore[return-value]


def test_new_changed_invalid_and_removed_files(tmp_path: Path, postgres_env: dict[str, str], pg_connect, schema: str):
    folder = tmp_path / "pipelines"
    folder.mkdir()
    (folder / "alpha.yaml").write_text(pipeline(schema, "alpha"))
    (folder / "beta.yaml").write_text(pipeline(schema, "beta"))
    (folder / "notes.txt").write_text("not a pipeline")
    env = {**postgres_env, "STREAMLING__ENGINE__PIPELINES_POLL_SEC": "0.5", "STREAMLING__CHECKPOINT_INTERVAL_SEC": "1"}
    engine = Engine(tmp_path, env, "--pipelines", str(folder))
    try:

        def listing() -> dict:
            return engine.get("/runs")

        def states() -> dict[str, str]:
            return {name: p["state"] for name, p in listing()["pipelines"].items()}

        wait_for(lambda: states() == {"alpha": "running", "beta": "running"}, 120, "both running")
        wait_for(lambda: httpx.get(f"{engine.url}/ready", timeout=10).status_code == 200, 60, "ready")
        wait_for(lambda: rows(pg_connect, schema, "alpha")[0] > 0 and rows(pg_connect, schema, "beta")[0] > 0, 60)

        (folder / "gamma.yaml").write_text(pipeline(schema, "gamma"))
        wait_for(lambda: states().get("gamma") == "running", 120, "the new file running")
        wait_for(lambda: rows(pg_connect, schema, "gamma")[0] > 0, 60, "gamma's rows")

        first_alpha = listing()["pipelines"]["alpha"]["run"]
        (folder / "alpha.yaml").write_text(pipeline(schema, "alpha", "SELECT id, -1 - amount AS amount FROM src"))
        wait_for(lambda: listing()["pipelines"]["alpha"]["run"] != first_alpha, 120, "alpha replaced")
        old = engine.get(f"/runs/{first_alpha}")
        assert (old["state"], old["exit_code"]) == ("stopped", 0)  # drained, not killed
        wait_for(lambda: states()["alpha"] == "running", 120, "the new alpha running")
        with pg_connect() as conn:
            wait_for(
                lambda: conn.execute(f'SELECT count(*) FROM "{schema}".alpha WHERE amount < 0').fetchone()[0],
                60,
                "the new version's rows",
            )

        beta_run = listing()["pipelines"]["beta"]["run"]
        before = rows(pg_connect, schema, "beta")[0]
        (folder / "beta.yaml").write_text(pipeline(schema, "beta", "SELECT id, no_such_column FROM src"))
        wait_for(lambda: states()["beta"] == "invalid", 60, "beta reported invalid")
        entry = listing()["pipelines"]["beta"]
        assert entry["run"] == beta_run and entry["run_state"] == "running"  # the running version is left alone
        assert "no_such_column" in entry["errors"][0]
        assert httpx.get(f"{engine.url}/ready", timeout=10).status_code == 503
        wait_for(lambda: rows(pg_connect, schema, "beta")[0] > before, 60, "the old beta still writing")
        assert any("Error: pipeline 'beta'" in line and "is invalid; run" in line for line in engine.lines)

        gamma_run = listing()["pipelines"]["gamma"]["run"]
        (folder / "gamma.yaml").unlink()
        wait_for(lambda: engine.get(f"/runs/{gamma_run}")["state"] == "stopped", 120, "gamma stopped")
        assert "gamma" not in listing()["pipelines"]

        (folder / "beta.yaml").write_text(pipeline(schema, "beta"))  # fixed: runs again
        wait_for(lambda: httpx.get(f"{engine.url}/ready", timeout=10).status_code == 200, 120, "ready again")
    finally:
        assert engine.stop() == 0
    # Every table exact: each id once, none missing up to the committed offset of its pipeline (each in a namespace
    # of its own, although all three name their source 'src'), across alpha's replacement and beta's bad version.
    for table in ("alpha", "beta", "gamma"):
        count, distinct, highest = rows(pg_connect, schema, table)
        committed = sqlite_state(tmp_path / "state.db", f"local_app_v1.{table}")["src:generator"]["offset"]
        assert count == distinct == highest == committed > 0, table
