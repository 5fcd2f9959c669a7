"""Pipelines and settings written for the original Streamling, through the CLI: num_records_before_stop,
settings and fields that only warn (once, at start), a missing --config file, an unknown nested variable."""

from __future__ import annotations

import json
import re
from pathlib import Path

from tests.e2e.cli import run_cli, sqlite_state, write

PIPELINE = """
    sources:
      src: {type: generator, record_batch_size: 1000, primary_key: id}
    sinks:
      out: {type: blackhole, from: src}
      shown: {type: print, from: src, sample_every: 1000, parallelism: 2, batch_size: 10}
    """
WARNINGS = [
    "setting internal_buffer_size = 10 has no effect here: operators hand each epoch on as a whole Spark DataFrame, "
    "with no channel in between; an epoch's size is record_batch_size",
    "print sink 'shown': parallelism = 2 has no effect here: the driver prints each epoch's rows in order; Spark's "
    "tasks compute them before that",
    "print sink 'shown': batch_size = 10 has no effect here: each epoch's rows are printed when it is written; an "
    "epoch holds up to record_batch_size rows",
]


def test_num_records_before_stop_ends_the_run_gracefully_with_everything_committed(tmp_path: Path) -> None:
    """An unbounded source: the sink that reaches 2500 rows requests a graceful stop; the run exits 0, and the
    committed position covers exactly the rows written (whole epochs of 1000)."""
    path = write(tmp_path, PIPELINE)
    env = {"STREAMLING__NUM_RECORDS_BEFORE_STOP": "2500", "STREAMLING__INTERNAL_BUFFER_SIZE": "10"}
    result = run_cli(tmp_path, str(path), env=env)
    assert result.returncode == 0, result.stderr
    assert result.stderr.count("Stopping after 2500 records") == 1
    written = {name: int(rows) for name, rows in re.findall(r"sink '(\w+)': (\d+) rows written", result.stderr)}
    assert written["out"] == written["shown"] >= 2500
    assert written["out"] % 1000 == 0
    assert sqlite_state(tmp_path / "state.db")["src:generator"]["offset"] == written["out"]
    for warning in WARNINGS:  # logged once at start, never per epoch
        assert result.stderr.count(warning) == 1, warning
    assert "Traceback" not in result.stderr


def test_validate_lists_the_warnings_and_a_missing_config_file_is_not_an_error(tmp_path: Path) -> None:
    path = write(tmp_path, PIPELINE)
    result = run_cli(
        tmp_path, str(path), "--validate", "--config", "nothere.yaml", env={"STREAMLING__INTERNAL_BUFFER_SIZE": "10"}
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert json.loads(result.stdout) == {
        "success": True,
        "is_valid": True,
        "errors": [],
        "warnings": [
            "config file 'nothere.yaml' not found (nor with .yaml, .yml or .json appended); running on the embedded "
            "defaults and STREAMLING__ variables",
            *WARNINGS,
        ],
    }


def test_an_unknown_nested_variable_is_named_as_the_origin(tmp_path: Path) -> None:
    path = write(tmp_path, PIPELINE)
    result = run_cli(tmp_path, str(path), env={"STREAMLING__FOO__BAR": "1"})
    assert result.returncode == 2
    assert result.stderr.strip() == "Error: invalid configuration: unknown setting 'foo' (from STREAMLING__FOO__BAR)"
