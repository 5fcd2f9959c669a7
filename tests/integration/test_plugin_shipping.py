"""Path plugins reach Spark's Python workers in a process that lives on: one SparkSession (as a Dagster code
location's, or this test session's) runs a pipeline of one plugin, then a pipeline of a plugin loaded only
afterwards; each plugin's source is read in Spark tasks, so the workers must import both."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from streamling.api import run_pipeline
from tests.plugin_util import write_six_kinds

pytestmark = pytest.mark.integration


def test_a_plugin_loaded_after_another_is_shipped_to_the_same_session(tmp_path: Path, spark, make_settings) -> None:
    for run in ("first", "second"):
        ns = f"ship_{uuid.uuid4().hex[:8]}"
        plugin = write_six_kinds(tmp_path / run, ns)
        out = tmp_path / f"{run}.jsonl"
        pipeline = tmp_path / f"{run}.yaml"
        pipeline.write_text(
            f"sources:\n  src: {{type: {ns}.counter, primary_key: id, rows: 6, step: 3}}\n"
            f"sinks:\n  out: {{type: {ns}.file, from: src, path: {out}}}\n"
        )
        settings = make_settings(job_mode=True, plugin__path=str(plugin), application_id=run)
        summary = run_pipeline(pipeline, settings, spark)
        assert summary.sink_rows == {"out": 6}
        assert sorted(json.loads(line)["id"] for line in out.read_text().splitlines()) == list(range(6))
