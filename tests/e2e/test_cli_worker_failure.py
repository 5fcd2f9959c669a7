"""A Spark Python worker failing under the CLI: stderr ends in one `Error:` line, and no Python traceback (neither
the one a dying worker printed, nor pyspark's frames) reaches it; `log_level: debug` keeps the detail."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tests.e2e.cli import run_cli, write

PLUGIN = '''
from __future__ import annotations

import os
import sys
import traceback

import pyarrow as pa

from streamling.plugin import ArrowTransform, Plugin, SqlFunction


class Fragile(SqlFunction):
    """Raises inside the Python worker that evaluates it (an Arrow UDF)."""

    name = "fragile"
    arguments = ("bigint",)
    returns = "bigint"

    def __call__(self, values: pa.Array) -> pa.Array:
        if 50 in values.to_pylist():
            raise ValueError("fragile at 50")
        return values


class Dying(ArrowTransform):
    """Prints a traceback to the worker's stderr (the JVM's), then ends the worker process."""

    def output_schema(self, input_schema: pa.Schema) -> pa.Schema:
        return input_schema

    def transform(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        try:
            raise RuntimeError("worker state is broken")
        except RuntimeError:
            traceback.print_exc()
        sys.stderr.flush()
        os._exit(1)


PLUGIN = Plugin(namespace="fragile", functions=[Fragile], operators={"dying": Dying})
'''

DYING = """
sources:
  src: {type: generator, rows: 100, primary_key: id}
transforms:
  t: {type: fragile.dying, from: src}
sinks:
  out: {type: blackhole, from: t}
"""

UDF = """
sources:
  src: {type: generator, rows: 100, primary_key: id}
transforms:
  t: {type: sql, primary_key: id, sql: "SELECT id, fragile(id) AS f FROM src"}
sinks:
  out: {type: blackhole, from: t}
"""


def run(tmp_path: Path, pipeline: str, **env: str):
    plugin = tmp_path / "fragile_plugin.py"
    plugin.write_text(textwrap.dedent(PLUGIN))
    path = write(tmp_path, pipeline)
    return run_cli(
        tmp_path,
        str(path),
        env={"STREAMLING__JOB_MODE": "true", "STREAMLING__PLUGIN__PATH": str(plugin), **env},
    )


def assert_one_error_line(stderr: str, error: str) -> None:
    lines = stderr.strip().splitlines()
    assert lines[-1] == error, stderr
    assert [line for line in lines if line.startswith("Error:")] == [error]
    noise = [line for line in lines if "Traceback" in line or 'File "' in line or "pyspark" in line.lower()]
    assert noise == [], stderr


@pytest.mark.timeout(300)
def test_a_worker_that_prints_a_traceback_and_dies_gives_one_error_line(tmp_path: Path) -> None:
    result = run(tmp_path, DYING)
    assert result.returncode == 1
    assert_one_error_line(result.stderr, "Error: blackhole sink 'out': Python worker exited unexpectedly (crashed)")
    assert "worker state is broken" not in result.stderr
    debug = run(tmp_path, DYING, STREAMLING__LOG_LEVEL="debug")
    assert debug.returncode == 1
    assert "a Spark process printed (hidden below log_level debug):\nTraceback (most recent call last):" in (
        debug.stderr
    )
    assert "RuntimeError: worker state is broken" in debug.stderr


@pytest.mark.timeout(300)
def test_a_sql_function_raising_in_a_worker_gives_one_error_line(tmp_path: Path) -> None:
    result = run(tmp_path, UDF)
    assert result.returncode == 1
    assert_one_error_line(result.stderr, "Error: SQL function 'fragile': ValueError: fragile at 50")
