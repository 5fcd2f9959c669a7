"""The example plugin (plugins/basic_plugin) through the `streamling` CLI, as a user runs it.

The original's plugin pipeline (pipelines/plugin_random.yaml, its YAML unchanged) with the plugin loaded by
path, and again with the plugin pip-installed into a directory on PYTHONPATH so that only its
``streamling.plugins`` entry point names it; then pipelines/plugin_redact.yaml with the cap_rows
preprocessor turned on (SQL function, side output and sink of the plugin). Nothing is mocked.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from tests.e2e.cli import run_cli, sqlite_state, write

REPO = Path(__file__).resolve().parents[2]
BASIC = REPO / "plugins" / "basic_plugin"
PRINTED = re.compile(r"^(\d+) -> \(sample_every=1\) \[(\w+)\] (\{.*\})$")

# The inserts among the 50 rows of random_source with seed 0 (tests/unit/test_basic_plugin.py fixes the rows).
FIRST_INSERT = {"id": 1, "alphanumeric_field": "1oh862g535cl0", "num_field": 991, "_gs_op": "i"}


def printed_rows(stdout: str) -> list[dict]:
    rows = []
    for number, line in enumerate(stdout.splitlines(), start=1):
        match = PRINTED.match(line)
        assert match, line
        assert int(match.group(1)) == number and match.group(2) == "Insert", line
        rows.append(json.loads(match.group(3)))
    return rows


def generated(seed: int, rows: int) -> list[dict]:
    """The rows the plugin's random_source makes, from its own module (imported alone, under a private name)."""
    spec = importlib.util.spec_from_file_location("basic_plugin_source_for_e2e", BASIC / "source.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.random_rows(seed, 0, rows).to_pylist()


def expected_inserts(max_rows: int) -> list[dict]:
    """What filter_transform `_gs_op: i` keeps of them."""
    return [row for row in generated(0, max_rows) if row["_gs_op"] == "i"]


def assert_prints_the_inserts(done: subprocess.CompletedProcess) -> None:
    assert done.returncode == 0, done.stderr
    rows = printed_rows(done.stdout)
    assert rows[0] == FIRST_INSERT
    assert rows == expected_inserts(50)
    assert len(rows) == 34
    assert "sink 'print.updated_plugin_data': 34 rows written (34 inserts, 0 updates, 0 deletes)" in done.stderr
    assert "source 'plugin_data': 1 epochs, 50 rows read, position {'position': 50}" in done.stderr


def test_the_originals_plugin_example_runs_unchanged_with_the_plugin_loaded_by_path(tmp_path: Path) -> None:
    done = run_cli(
        tmp_path,
        str(REPO / "pipelines" / "plugin_random.yaml"),
        env={"STREAMLING__PLUGIN__PATH": str(BASIC), "STREAMLING__JOB_MODE": "true"},
    )
    assert_prints_the_inserts(done)


def test_the_originals_plugin_example_runs_with_the_plugin_installed_as_a_distribution(tmp_path: Path) -> None:
    source = tmp_path / "src" / "basic_plugin"
    shutil.copytree(BASIC, source, ignore=shutil.ignore_patterns("__pycache__", "build", "*.egg-info"))
    site = tmp_path / "site"
    pip = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--no-index"]
    installed = subprocess.run([*pip, "--target", str(site), str(source)], capture_output=True, text=True)
    assert installed.returncode == 0, installed.stderr
    [dist] = site.glob("streamling_basic_plugin-*.dist-info")
    assert "[streamling.plugins]\nbasic_plugin = basic_plugin:PLUGIN" in (dist / "entry_points.txt").read_text()

    python_path = os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])
    done = run_cli(
        tmp_path,
        str(REPO / "pipelines" / "plugin_random.yaml"),
        env={"PYTHONPATH": python_path, "STREAMLING__JOB_MODE": "true"},
    )
    assert_prints_the_inserts(done)
    assert "STREAMLING__PLUGIN__PATH" not in os.environ


def test_sql_function_side_output_sink_and_preprocessor_of_the_example(tmp_path: Path) -> None:
    done = run_cli(
        tmp_path,
        str(REPO / "pipelines" / "plugin_redact.yaml"),
        env={
            "STREAMLING__PLUGIN__PATH": str(BASIC),
            "STREAMLING__JOB_MODE": "true",
            "STREAMLING__PLUGIN__PREPROCESSOR_IDS": "basic_plugin.cap_rows",
            "STREAMLING__PLUGIN__PREPROCESSOR_OPTIONS": json.dumps({"basic_plugin.cap_rows": {"limit": 4000}}),
        },
    )
    assert done.returncode == 0, done.stderr
    state = sqlite_state(tmp_path / "state.db")
    assert state["events:position"]["position"] == 4000  # cap_rows turned max_rows "10000" into "4000"

    files = sorted((tmp_path / ".streamling" / "plugin_redact").iterdir())
    assert [f.name for f in files] == [f"events-{n:08d}.jsonl" for n in (1, 2)]  # record_batch_size "2500"
    written = [json.loads(line) for f in files for line in f.read_text().splitlines()]
    kept = [r for r in generated(7, 4000) if r["num_field"] > 100]
    assert written == [
        {
            "id": r["id"],
            "account": "*" * 9 + r["alphanumeric_field"][-4:],
            "num_field": r["num_field"],
            "_gs_op": r["_gs_op"],
        }
        for r in kept
    ]
    counts = {op: sum(1 for r in written if r["_gs_op"] == op) for op in "iud"}
    assert state["redacted_counts:state:counts"]["value"] == counts
    assert f"sink 'files': {len(written)} rows written ({counts['i']} inserts" in done.stderr
    assert re.search(r"op_counts 'redacted_counts' after epoch 2 of events: \{'i': \d+", done.stderr)


def test_bad_plugin_options_are_reported_per_node_and_field_by_validate(tmp_path: Path) -> None:
    text = (REPO / "pipelines" / "plugin_random.yaml").read_text()
    bad = text.replace('max_rows: "50"', 'max_rows: "fifty"').replace("_gs_op: i", "_gs_op: x")
    done = run_cli(tmp_path, str(write(tmp_path, bad)), "--validate", env={"STREAMLING__PLUGIN__PATH": str(BASIC)})
    assert done.returncode == 2, done.stderr
    assert json.loads(done.stdout)["errors"] == [
        "source 'plugin_data' (type 'basic_plugin.random_source'): field 'options.max_rows': Input should be a "
        "valid integer, unable to parse string as an integer (got 'fifty')",
        "transform 'updated_plugin_data' (type 'basic_plugin.filter_transform'): field 'options._gs_op': Input "
        "should be 'i', 'u' or 'd' (got 'x')",
    ]


def test_a_side_output_configured_as_in_the_original_observes_every_source_unchanged(tmp_path: Path) -> None:
    """``plugin.side_output_ids`` (the original's application config) attaches op_counts to the source of the
    original's example, whose YAML is not touched: the printed rows stay the same, and the counts of every row the
    source produced are committed with the epoch under the side output's own node."""
    done = run_cli(
        tmp_path,
        str(REPO / "pipelines" / "plugin_random.yaml"),
        env={
            "STREAMLING__PLUGIN__PATH": str(BASIC),
            "STREAMLING__JOB_MODE": "true",
            "STREAMLING__PLUGIN__SIDE_OUTPUT_IDS": "basic_plugin.op_counts",
        },
    )
    assert_prints_the_inserts(done)
    produced = generated(0, 50)
    counts = {op: sum(1 for r in produced if r["_gs_op"] == op) for op in "iud"}
    state = sqlite_state(tmp_path / "state.db")
    assert state["plugin_data.basic_plugin.op_counts:state:counts"]["value"] == counts
    assert "op_counts 'plugin_data.basic_plugin.op_counts' after epoch 1 of plugin_data" in done.stderr
