"""`dagster job execute` from a clean DAGSTER_HOME, as a script or a cron job would run a backfill."""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

import dagster as dg

from tests.e2e.cli import cli_env, write

DAGSTER = str(Path(sys.executable).with_name("dagster"))


def test_backfill_job_from_the_command_line_writes_rows_and_records_metadata(
    tmp_path, postgres_env, pg_connect
) -> None:
    schema = f"c_{uuid.uuid4().hex[:8]}"
    pipelines = tmp_path / "pipelines"
    pipelines.mkdir()
    write(
        pipelines,
        f"""
        sources:
          orders: {{type: generator, rows: 2000, primary_key: id}}
        sinks:
          stored: {{type: postgres, from: orders, schema: {schema}, table: orders}}
        """,
        name="shop.yaml",
    )
    home = tmp_path / "dagster_home"
    home.mkdir()
    env = cli_env(
        tmp_path,
        {**postgres_env, "DAGSTER_HOME": str(home), "STREAMLING_DAGSTER_PIPELINES": str(pipelines)},
    )
    done = subprocess.run(
        [DAGSTER, "job", "execute", "-m", "streamling_dagster", "-j", "shop__backfill"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    with pg_connect() as conn:
        assert conn.execute(f'SELECT count(*), max(id) FROM "{schema}".orders').fetchone() == (2000, 2000)
        conn.execute(f'DROP SCHEMA "{schema}" CASCADE')
    with dg.DagsterInstance.from_config(str(home)) as instance:
        event = instance.get_latest_materialization_event(dg.AssetKey(["shop", "stored"]))
    assert event is not None
    metadata = event.asset_materialization.metadata
    assert metadata["rows_written"].value == 2000
    assert metadata["final_positions"].value == {"orders": {"offset": 2000}}
