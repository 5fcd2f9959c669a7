"""A pipeline on a real standalone Spark cluster (master + worker JVMs started by infra/services)."""

from __future__ import annotations

import json
import urllib.request
import uuid
from pathlib import Path

import pytest

from tests.e2e.cli import printed_ids, run_cli, sqlite_state, write


@pytest.mark.integration
def test_job_runs_on_standalone_cluster(tmp_path: Path, spark_cluster_env: dict[str, str]) -> None:
    app_name = f"streamling-e2e-{uuid.uuid4().hex[:8]}"
    path = write(
        tmp_path,
        """
        sources:
          src: {type: generator, rows: 200000, record_batch_size: 50000, partitions: 4}
        transforms:
          t: {type: sql, primary_key: id, sql: "SELECT id, amount FROM src WHERE id % 1000 = 0"}
        sinks:
          out: {type: print, from: t}
          all: {type: blackhole, from: src}
        """,
    )
    env = {**spark_cluster_env, "STREAMLING__JOB_MODE": "true", "STREAMLING__SPARK__APP_NAME": app_name}
    result = run_cli(tmp_path, str(path), env=env)
    assert result.returncode == 0, result.stderr
    assert printed_ids(result.stdout) == list(range(1000, 200_001, 1000))
    assert "sink 'all': 200000 rows written" in result.stderr
    assert sqlite_state(tmp_path / "state.db")["src:generator"]["offset"] == 200_000
    # The master really ran it: the application is listed, with its executors, as completed.
    ui = int(spark_cluster_env["STREAMLING__SPARK__MASTER"].rsplit(":", 1)[1]) + 1000
    with urllib.request.urlopen(f"http://127.0.0.1:{ui}/json/", timeout=5) as reply:
        master = json.load(reply)
    apps = [a for a in master["completedapps"] + master["activeapps"] if a["name"] == app_name]
    assert len(apps) == 1
    assert apps[0]["cores"] >= 1
