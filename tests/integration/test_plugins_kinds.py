"""Each plugin kind through the CLI, with a plugin written in the test's tmp dir (loaded by path, or by an
installed distribution's entry point): rows delivered, and the plugins' own state committed with the epoch
(read back from the Sqlite state backend)."""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

import pytest

from tests.e2e.cli import printed_ids, run_cli, sqlite_state, write
from tests.plugin_util import write_distribution, write_six_kinds

pytestmark = pytest.mark.integration


def test_arrow_source_transform_sql_function_sink_side_output_and_preprocessor(tmp_path: Path) -> None:
    ns = f"acme_{uuid.uuid4().hex[:6]}"
    plugin = write_six_kinds(tmp_path / "outside", ns)
    path = write(
        tmp_path,
        f"""
        sources:
          src: {{type: {ns}.counter, primary_key: id, options: {{rows: "10", step: 4}}}}
        transforms:
          keep: {{type: {ns}.keep, from: src, primary_key: id, min_id: 2}}
          loud: {{type: sql, primary_key: id, sql: "SELECT id, {ns}_shout(label, id) AS loud, tag FROM keep"}}
          audit: {{type: {ns}.audit, from: keep, path: {tmp_path / "audit.txt"}}}
        sinks:
          out:
            type: {ns}.file
            from: loud
            path: {tmp_path / "out.jsonl"}
            telemetry: {{labels: {{destination: from-yaml}}}}
        """,
    )
    env = {
        "STREAMLING__JOB_MODE": "true",
        "STREAMLING__PLUGIN__PATH": str(plugin),
        "STREAMLING__PLUGIN__PREPROCESSOR_IDS": f"{ns}.rename",
    }
    result = run_cli(tmp_path, str(path), env=env)
    assert result.returncode == 0, result.stderr
    rows = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert rows == [{"id": i, "loud": f"ROW{i}!{i}", "tag": "kept", "_gs_op": "i"} for i in range(2, 10)]
    # The preprocessor renamed the sink; its state, the side output's and the position went in together.
    state = sqlite_state(tmp_path / "state.db")
    assert state["src:position"]["position"] == 10
    assert state["src:__epoch__"]["epoch"] == 3
    assert state["pre_out:state:rows"]["value"] == 8
    assert state["audit:state:seen"]["value"] == 8
    assert state["src:position"]["updated_at"] == state["pre_out:state:rows"]["updated_at"]
    # Finalizers ran after each commit, in epoch order; the side output saw each epoch's batches.
    assert (tmp_path / "out.jsonl.committed").read_text().split() == ["1", "2", "3"]
    assert (tmp_path / "audit.txt").read_text().splitlines() == ["1 2", "2 6", "3 8"]
    warning = (
        f"plugin '{ns}.file' (node 'pre_out'): telemetry label 'destination' is set to 'from-yaml' in the pipeline "
        "and to 'out.jsonl' by the plugin; the plugin's value is used"
    )
    assert result.stderr.count(warning) == 1


def test_polled_source_from_an_installed_distribution(tmp_path: Path) -> None:
    """Its first two polls find nothing new: the driver polls again rather than ending or running an epoch."""
    ns = f"dist_{uuid.uuid4().hex[:6]}"
    site = tmp_path / "site"
    write_distribution(site, "acme-partner", {"partner": f"{ns}:PLUGIN"}, {})
    write_six_kinds(site, ns)
    path = write(
        tmp_path,
        f"""
        sources:
          api: {{type: {ns}.pages, primary_key: id, options: {{pages: 3, size: 2, quiet_polls: 2}}}}
        sinks:
          out: {{type: print, from: api}}
        """,
    )
    env = {"STREAMLING__JOB_MODE": "true", "PYTHONPATH": f"{site}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    result = run_cli(tmp_path, str(path), env=env)
    assert result.returncode == 0, result.stderr
    assert printed_ids(result.stdout) == [0, 1, 2, 3, 4, 5]
    state = sqlite_state(tmp_path / "state.db")
    assert state["api:position"]["position"] == 3
    assert state["api:__epoch__"]["epoch"] == 3
    assert state["api:state:polls"]["value"] == 3  # staged by each poll, committed with that poll's epoch
    assert "sink 'out': 6 rows written" in result.stderr
