"""A plugin that lives in a tmp dir (installed in no venv) on the standalone Spark cluster `infra/services`
starts: the executors read its source and run its transform and SQL function, importing it from the archive
the driver ships."""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

import pytest

from tests.e2e.cli import run_cli, sqlite_state, write
from tests.plugin_util import write_distribution, write_six_kinds

pytestmark = pytest.mark.integration


def test_path_plugin_runs_on_the_standalone_cluster(tmp_path: Path, spark_cluster_env: dict[str, str]) -> None:
    ns = f"acme_{uuid.uuid4().hex[:6]}"
    plugin = write_six_kinds(tmp_path / "elsewhere", ns)
    path = write(
        tmp_path,
        f"""
        sources:
          src: {{type: {ns}.counter, primary_key: id, rows: 40, step: 25}}
        transforms:
          keep: {{type: {ns}.keep, from: src, primary_key: id, min_id: 30}}
          loud: {{type: sql, primary_key: id, sql: "SELECT id, {ns}_shout(label, 3) AS loud FROM keep"}}
        sinks:
          out: {{type: {ns}.file, from: loud, path: {tmp_path / "out.jsonl"}}}
        """,
    )
    env = {
        **spark_cluster_env,
        "STREAMLING__JOB_MODE": "true",
        "STREAMLING__PLUGIN__PATH": str(plugin),
        "STREAMLING__SPARK__APP_NAME": f"streamling-plugin-{ns}",
    }
    result = run_cli(tmp_path, str(path), env=env)
    assert result.returncode == 0, result.stderr
    rows = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert rows == [{"id": i, "loud": f"ROW{i}!3", "_gs_op": "i"} for i in range(30, 40)]
    state = sqlite_state(tmp_path / "state.db")
    assert state["src:position"]["position"] == 40
    assert state["out:state:rows"]["value"] == 10


def test_installed_plugin_is_shipped_to_the_standalone_cluster(
    tmp_path: Path, spark_cluster_env: dict[str, str]
) -> None:
    """The same plugin as an installed distribution (an entry point, no STREAMLING__PLUGIN__PATH) whose folder is on
    the driver's PYTHONPATH only: the cluster's workers import it from the package the driver ships."""
    ns = f"acme_{uuid.uuid4().hex[:6]}"
    site = tmp_path / "site"
    module = write_six_kinds(site, ns)
    write_distribution(site, f"{ns}-plugin", {ns: f"{ns}:PLUGIN"}, {})
    path = write(
        tmp_path,
        f"""
        sources:
          src: {{type: {ns}.counter, primary_key: id, rows: 40, step: 25}}
        transforms:
          keep: {{type: {ns}.keep, from: src, primary_key: id, min_id: 30}}
        sinks:
          out: {{type: {ns}.file, from: keep, path: {tmp_path / "out.jsonl"}}}
        """,
    )
    env = {
        **spark_cluster_env,
        "STREAMLING__JOB_MODE": "true",
        "PYTHONPATH": os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH", "")) if p),
        "STREAMLING__SPARK__APP_NAME": f"streamling-plugin-{ns}",
    }
    result = run_cli(tmp_path, str(path), env=env)
    assert result.returncode == 0, result.stderr
    rows = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert [r["id"] for r in rows] == list(range(30, 40))
    assert module.parent == site
