"""What a module loads when it is imported, where deferring a heavy import is the design: the processes that import
these modules (Spark's planners and workers, the Dagster code location) pay for every module loaded.

The layout's rules (which room may import which, no cycles) are import-linter contracts in pyproject.toml, checked by
`./dev test`; they count imports inside functions too, so they cannot say what is loaded *at import*, which is what
these tests assert in a fresh interpreter."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ENGINE = Path(__file__).resolve().parents[2] / "engine" / "streamling"


def loaded_by(module: str, candidates: tuple[str, ...]) -> list[str]:
    """Which of `candidates` (or a module inside one) a fresh interpreter holds after importing `module`."""
    code = (
        f"import sys, {module}\n"
        f"print([m for m in {candidates!r} if any(n == m or n.startswith(m + '.') for n in sys.modules)])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    return ast.literal_eval(out)


@pytest.mark.parametrize(
    "module", ["streamling", "streamling.errors", "streamling.core.identifiers", "streamling.plugin"]
)
def test_the_core_imports_no_spark_no_driver_and_no_executor(module: str) -> None:
    assert loaded_by(module, ("pyspark", "psycopg", "pyarrow", "streamling.runtime.executor")) == []


def test_the_kafka_reader_imports_no_settings_models_no_topology_no_driver_and_no_decoding() -> None:
    """Spark's planner processes and the streaming source runner import it anew for every run and query (the
    workers once, in the daemon): pydantic and the topology cost them ~90 ms, psycopg ~170 ms, and the decoders
    with pyarrow, which only a read uses, up to ~100 ms more (the data source's creation imports no pyarrow of
    its own)."""
    heavy = (
        "pydantic",
        "streamling.topology",
        "streamling.config",
        "psycopg",
        "streamling.runtime.executor",
        "pyarrow",
        "streamling.kafka.source.decoding",
        "streamling.dead_letters",
        "importlib.metadata",
    )
    assert loaded_by("streamling.kafka.source.reader", heavy) == []


def test_the_file_reader_imports_no_settings_models_no_topology_and_no_driver() -> None:
    """The reading tasks unpickle the file source's reader in every Python worker; pyarrow's readers are imported
    by a read."""
    heavy = ("pydantic", "streamling.topology", "streamling.config", "psycopg", "streamling.runtime.executor")
    assert loaded_by("streamling.files.reader", (*heavy, "pyarrow.parquet", "pyarrow.csv", "pyarrow.json")) == []


def test_loading_the_built_in_operators_imports_no_http_client() -> None:
    """Every driver loads the built-ins; `import httpx` also loads its command line and rich (~90 ms), which only
    a pipeline with an HTTP node uses, on the executors."""
    assert loaded_by("streamling.builtins.plugin", ("httpx", "rich")) == []


def test_the_control_plane_imports_no_spark_and_no_arrow() -> None:
    """A Dagster code location, its daemon and every run worker import `streamling_dagster`; Spark is started (and
    pyspark imported) by the runs that need it, pyarrow (~45 ms, 100 modules) by the operators that read or write."""
    heavy = (
        "pyspark",
        "py4j",
        "pyarrow",
        "streamling.runtime.executor",
        "streamling.runtime.plan",
        "streamling.spark.session",
    )
    assert loaded_by("streamling_dagster", heavy) == []


TYPED_COLUMNS = """
sources:
  events: {type: generator, rows: 10, primary_key: id}
transforms:
  scored:
    type: handler
    from: events
    primary_key: id
    url: http://127.0.0.1:9/score
    schema_override: {score: double, label: "decimal(10, 2)", note: null}
sinks:
  out: {type: blackhole, from: scored}
"""
"""Column types written in a node's spec (a handler's `schema_override`): validated by name, without Spark types."""


def test_building_the_control_planes_definitions_and_asking_positions_imports_no_spark() -> None:
    """The code location validates every pipeline file and builds each node's operator to ask what it reads and
    writes; its sensors ask the state backend where each source stands. None of that needs Spark: the built-in
    operators import pyspark where they plan or read (`stream_reader`, `apply`), not when their module loads."""
    pipelines = ENGINE.parents[1] / "pipelines"
    code = (
        "import sys\n"
        "from pathlib import Path\n"
        "import streamling\n"
        "from streamling.config import load_settings\n"
        "from streamling_dagster.definitions import build_definitions\n"
        f"defs = build_definitions(Path({str(pipelines)!r}))\n"
        "assert len(list(defs.assets or [])) > 10\n"
        "settings = load_settings(overrides={'state_backend.backend_type': 'InMemory'})\n"
        f"streamling.source_status(Path({str(pipelines)!r}) / 'quickstart.yaml', settings)\n"
        f"pipeline, report = streamling.load_pipeline({TYPED_COLUMNS!r})\n"
        "assert pipeline is not None, report.errors\n"
        "print([m for m in ('pyspark', 'py4j', 'streamling.runtime.executor') if m in sys.modules])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    assert ast.literal_eval(out.strip().splitlines()[-1]) == []


def test_the_table_marks_call_imports_no_clickhouse_code() -> None:
    """`from streamling import table_marks` (the Dagster backfill sensor's call) loads the ClickHouse modules and the
    driver when it is called, not when it is imported."""
    assert loaded_by("streamling.api", ("streamling.clickhouse", "clickhouse_connect", "chdb")) == []
