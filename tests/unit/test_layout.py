"""The house rules of the engine's layout: a neutral core that imports nothing heavy, and built-in operators written
against the public plugin module only (so the plugin API is proven by them)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ENGINE = Path(__file__).resolve().parents[2] / "engine" / "streamling"
SYSTEMS = ("kafka", "postgres", "clickhouse", "http", "script", "dynamic_tables", "sql", "builtins", "files")


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


def test_built_in_operators_import_the_operator_interface_only_from_the_public_module() -> None:
    offenders = [
        str(path.relative_to(ENGINE))
        for system in SYSTEMS
        for path in (ENGINE / system).rglob("*.py")
        if "from streamling.operators import" in path.read_text() or "import streamling.operators" in path.read_text()
    ]
    assert offenders == []


def test_every_built_in_type_is_registered_through_the_entry_point_group() -> None:
    from importlib.metadata import entry_points

    from streamling.builtins.plugin import PLUGIN

    (builtins,) = [ep for ep in entry_points(group="streamling.plugins") if ep.name == "builtins"]
    assert builtins.load() is PLUGIN
    assert sorted(PLUGIN.operators) == [
        "blackhole",
        "clickhouse",
        "dynamic_table",
        "file",
        "generator",
        "handler",
        "hybrid",
        "kafka",
        "memory",
        "postgres",
        "postgres_aggregate",
        "print",
        "print_sink",
        "script",
        "sql",
        "webhook",
    ]
