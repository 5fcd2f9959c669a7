"""A copy of the original Streamling's embedded defaults as ``config.yaml`` (what its README tells users to override
by placing a ``config.yaml`` in the working directory) starts unchanged: ``--validate`` passes and lists the two
settings that map to nothing here, and a run writes its rows, logging each of those warnings once."""

from __future__ import annotations

import json
import re
from pathlib import Path

from tests.e2e.cli import printed_ids, run_cli, write
from tests.net import ADMIN_TOKEN, free_port
from tests.original_defaults import ORIGINAL_DEFAULT_CONFIG, ORIGINAL_DEFAULT_WARNINGS

PIPELINE = """
    sources:
      gen: {type: generator, rows: 5, primary_key: id}
    sinks:
      out: {type: print, from: gen}
      gone: {type: blackhole, from: gen}
    """


def test_the_original_s_defaults_as_config_yaml_validate_and_run(tmp_path: Path) -> None:
    """No pipeline argument: the copy's ``pipeline_definition_location: ./pipeline.yaml`` names it. The copy also
    turns the admin API on at 3000; the run moves it to a free port (an environment variable, above the file) so
    that it cannot collide with another test."""
    (tmp_path / "config.yaml").write_text(ORIGINAL_DEFAULT_CONFIG)
    write(tmp_path, PIPELINE)
    validated = run_cli(tmp_path, "--validate")
    assert validated.returncode == 0, validated.stdout + validated.stderr
    assert json.loads(validated.stdout) == {
        "success": True,
        "is_valid": True,
        "errors": [],
        "warnings": ORIGINAL_DEFAULT_WARNINGS,
    }
    env = {"STREAMLING__ADMIN_API_PORT": str(free_port()), "STREAMLING__ADMIN_API_TOKEN": ADMIN_TOKEN}
    result = run_cli(tmp_path, env=env)
    assert result.returncode == 0, result.stderr
    assert sorted(printed_ids(result.stdout)) == [1, 2, 3, 4, 5]
    for warning in ORIGINAL_DEFAULT_WARNINGS:
        assert result.stderr.count(warning) == 1, result.stderr
    assert "sink 'gone': 5 rows written" in result.stderr


def test_print_sink_num_records_before_stop_stops_a_print_sink_s_run(tmp_path: Path) -> None:
    """The original's ``print_sink.num_records_before_stop``: the print sink that reaches it requests the graceful
    stop the global ``num_records_before_stop`` requests for any sink (exit 0, everything up to there committed)."""
    path = write(
        tmp_path,
        """
        sources:
          src: {type: generator, record_batch_size: 1000, primary_key: id}
        sinks:
          shown: {type: print, from: src, sample_every: 1000}
        """,
    )
    result = run_cli(tmp_path, str(path), env={"STREAMLING__PRINT_SINK__NUM_RECORDS_BEFORE_STOP": "2500"})
    assert result.returncode == 0, result.stderr
    assert len(re.findall(r"Stopping after 2500 records \(sink 'shown' wrote \d+\)", result.stderr)) == 1, result.stderr
