"""Plugin errors through the CLI, word for word: loading (syntax error, an id defined twice), ``--validate`` on
bad options and bad calls of a plugin SQL function (without any plugin I/O), and a plugin that raises at run
time, on the driver or inside a Spark task: the epoch fails and nothing of it is committed."""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from pathlib import Path

import pytest

from tests.e2e.cli import run_cli, sqlite_state, write
from tests.plugin_util import write_distribution, write_plugin, write_six_kinds

pytestmark = pytest.mark.integration


def fresh(prefix: str = "acme") -> str:
    return f"{prefix}_{uuid.uuid4().hex[:6]}"


def run_job(tmp_path: Path, ns: str, pipeline: str) -> subprocess.CompletedProcess[str]:
    """The pipeline through the CLI in job mode, with the six-kinds plugin of namespace `ns` on the plugin path."""
    plugin = write_six_kinds(tmp_path, ns)
    path = write(tmp_path, pipeline)
    env = {"STREAMLING__PLUGIN__PATH": str(plugin), "STREAMLING__JOB_MODE": "true"}
    return run_cli(tmp_path, str(path), env=env, timeout=180)


def test_a_syntax_error_names_file_and_line(tmp_path: Path) -> None:
    plugin = write_plugin(tmp_path / "plugins", fresh(), "import pyarrow\n\nclass Broken(\n")
    path = write(tmp_path, "sources: {a: {type: generator}}\nsinks: {b: {type: print, from: a}}\n")
    result = run_cli(tmp_path, str(path), "--validate", env={"STREAMLING__PLUGIN__PATH": str(tmp_path / "plugins")})
    assert result.returncode == 2, result.stderr
    assert json.loads(result.stdout)["errors"] == [f"plugin file {plugin}, line 3: syntax error: '(' was never closed"]


def test_one_id_from_a_path_and_an_installed_distribution_names_both(tmp_path: Path) -> None:
    ns = fresh()
    site = tmp_path / "site"
    write_distribution(site, "acme-plugins", {"acme": f"{ns}_dist:PLUGIN"}, {})
    (write_six_kinds(site, ns)).rename(site / f"{ns}_dist.py")
    local = write_six_kinds(tmp_path / "local", ns)
    path = write(tmp_path, f"sources: {{a: {{type: {ns}.counter, rows: 3}}}}\nsinks: {{b: {{type: print, from: a}}}}\n")
    env = {
        "STREAMLING__PLUGIN__PATH": str(local),
        "PYTHONPATH": os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH", "")) if p),
    }
    result = run_cli(tmp_path, str(path), "--validate", env=env)
    assert result.returncode == 2, result.stderr
    assert json.loads(result.stdout)["errors"] == [
        f"source type '{ns}.counter' is defined twice: by entry point 'acme = {ns}_dist:PLUGIN' of distribution "
        f"'acme-plugins' and by '{local}'"
    ]


def test_validate_reports_bad_options_per_node_and_field(tmp_path: Path) -> None:
    ns = fresh()
    plugin = write_six_kinds(tmp_path, ns)
    path = write(
        tmp_path,
        f"""
        sources:
          src: {{type: {ns}.counter, options: {{rows: lots, speed: 3}}}}
        sinks:
          out: {{type: {ns}.file, from: src}}
        """,
    )
    result = run_cli(tmp_path, str(path), "--validate", env={"STREAMLING__PLUGIN__PATH": str(plugin)})
    assert result.returncode == 2, result.stderr
    assert json.loads(result.stdout)["errors"] == [
        f"source 'src' (type '{ns}.counter'): field 'options.rows': Input should be a valid integer, unable to parse "
        "string as an integer (got 'lots')",
        f"source 'src' (type '{ns}.counter'): unknown field 'options.speed'",
        f"sink 'out' (type '{ns}.file'): missing required field 'options.path'",
    ]


def test_validate_checks_plugin_sql_function_calls_without_plugin_io(tmp_path: Path) -> None:
    ns = fresh()
    plugin = write_six_kinds(tmp_path, ns)
    marks = tmp_path / "marks.txt"
    path = write(
        tmp_path,
        f"""
        sources:
          src: {{type: {ns}.counter, primary_key: id, rows: 5}}
        transforms:
          ok: {{type: sql, primary_key: id, sql: "SELECT id, {ns}_shout(label, 2) AS x FROM src"}}
          widened: {{type: sql, primary_key: id, sql: "SELECT id, {ns}_shout(label, CAST(id AS INT)) AS x FROM src"}}
          count: {{type: sql, primary_key: id, sql: "SELECT id, {ns}_shout(label) AS x FROM src"}}
          types: {{type: sql, primary_key: id, sql: "SELECT id, {ns}_shout(label, label) AS x FROM src"}}
          unknown: {{type: sql, primary_key: id, sql: "SELECT id, {ns}_whisper(label) AS x FROM src"}}
        sinks:
          o1: {{type: {ns}.file, from: ok, path: {tmp_path / "o1"}}}
          o2: {{type: print, from: widened}}
          o3: {{type: print, from: count}}
          o4: {{type: print, from: types}}
          o5: {{type: print, from: unknown}}
        """,
    )
    env = {"STREAMLING__PLUGIN__PATH": str(plugin), "ACME_MARKS": str(marks)}
    result = run_cli(tmp_path, str(path), "--validate", env=env)
    assert result.returncode == 2, result.stderr
    errors = json.loads(result.stdout)["errors"]
    assert errors[:2] == [
        f"SQL transform 'count': function {ns}_shout takes 2 arguments (string, bigint), got 1 (string)",
        f"SQL transform 'types': function {ns}_shout: argument 2 must be bigint, got string "
        f"(declared {ns}_shout(string, bigint) -> string)",
    ]
    assert len(errors) == 3
    unknown = f"SQL transform 'unknown': [UNRESOLVED_ROUTINE] Cannot resolve routine `{ns.upper()}_WHISPER`"
    assert errors[2].startswith(unknown)  # (the SQL rewrite spells unknown functions in upper case)
    assert not marks.exists()  # no plugin opened anything: validation does no plugin I/O


def test_a_sink_raising_on_the_driver_fails_the_epoch_and_commits_nothing_of_it(tmp_path: Path) -> None:
    ns = fresh()
    result = run_job(
        tmp_path,
        ns,
        f"""
        sources:
          src: {{type: {ns}.counter, primary_key: id, rows: 12, step: 4}}
        sinks:
          out: {{type: {ns}.file, from: src, path: {tmp_path / "out.jsonl"}, fail_on_epoch: 2}}
        """,
    )
    assert result.returncode == 1, result.stderr
    assert f"Error: plugin '{ns}.file' (node 'out'): ValueError: cannot write epoch 2" in result.stderr
    state = sqlite_state(tmp_path / "state.db")
    assert state["src:__epoch__"]["epoch"] == 1
    assert state["src:position"]["position"] == 4
    assert state["out:state:rows"]["value"] == 4  # epoch 2's staged count never reached the state backend
    assert (tmp_path / "out.jsonl.committed").read_text().split() == ["1"]


def test_an_epoch_failing_while_its_query_is_stopped_ends_quietly_however_long_its_error(tmp_path: Path) -> None:
    """One source's sink fails, so the run stops the other query while its epoch is still in flight; that epoch
    then fails with a long error embedding a Py4J error, as an interrupted Spark call does. Spark matches the text
    of what ends a stopped query against a regular expression that overflows the stack on long input: the run
    printed a JVM stack trace of ~70 KB (and hung where nobody read stderr)."""
    ns = fresh()
    result = run_job(
        tmp_path,
        ns,
        f"""
        sources:
          a: {{type: {ns}.counter, primary_key: id, rows: 12, step: 4}}
          b: {{type: {ns}.counter, primary_key: id, rows: 12, step: 4}}
        sinks:
          fails_first: {{type: {ns}.file, from: a, path: {tmp_path / "a.jsonl"}, fail_on_epoch: 1}}
          fails_later: {{type: {ns}.file, from: b, path: {tmp_path / "b.jsonl"}, fail_on_epoch: 1,
                         fail_delay_sec: 5, fail_detail_lines: 50000}}
        """,
    )
    assert result.returncode == 1, result.stderr[-3000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("Error:")]
    assert errors == [f"Error: plugin '{ns}.file' (node 'fails_first'): ValueError: cannot write epoch 1"]
    assert "StackOverflowError" not in result.stderr and "Traceback" not in result.stderr
    assert "a:__epoch__" not in sqlite_state(tmp_path / "state.db")


def test_a_source_raising_in_a_spark_task_fails_the_epoch_and_commits_nothing_of_it(tmp_path: Path) -> None:
    ns = fresh()
    result = run_job(
        tmp_path,
        ns,
        f"""
        sources:
          src: {{type: {ns}.counter, primary_key: id, rows: 12, step: 4, fail_at: 9}}
        sinks:
          out: {{type: {ns}.file, from: src, path: {tmp_path / "out.jsonl"}}}
        """,
    )
    assert result.returncode == 1, result.stderr
    assert f"Error: plugin '{ns}.counter' (node 'src'): RuntimeError: row 9 is cursed" in result.stderr
    state = sqlite_state(tmp_path / "state.db")
    assert state["src:__epoch__"]["epoch"] == 2
    assert state["src:position"]["position"] == 8
    assert [json.loads(line)["id"] for line in (tmp_path / "out.jsonl").read_text().splitlines()] == list(range(8))
