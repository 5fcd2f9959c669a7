"""Malformed pipeline files through the CLI: the inputs the parser fuzzing (tests/unit/test_parser_fuzz.py) found
crashing, and representative odd ones. `--validate` prints its JSON report and exits 2, a run prints `Error:` lines
and exits 2 — never a traceback. Only the last test starts Spark (a structurally valid pipeline)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.cli import cli_env

LAUGHS = "x: &a [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]\n" + "".join(
    f"x{i}: &a{i} [{', '.join([f'*a{i - 1}' if i else '*a'] * 10)}]\n" for i in range(7)
)
SINK = "\nsinks: {p: {type: print, from: a}}\n"


def streamling(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """This checkout's CLI (`python -m streamling.cli`), whichever checkout the venv's script points at."""
    return subprocess.run(
        [sys.executable, "-m", "streamling.cli", *args],
        cwd=cwd,
        env=cli_env(cwd),
        capture_output=True,
        text=True,
        timeout=240,
    )


CASES = [
    pytest.param(
        b"sources: {a: {type: generator}}\nsinks: {p: {type: print, from: \xff\xfe}}\n",
        "pipeline file '{path}' is not UTF-8 text: byte 0xff at offset 63 (invalid start byte)",
        id="not-utf8",
    ),
    pytest.param(
        ("sources: " + "[" * 5000 + "]" * 5000).encode(),
        "pipeline is not valid YAML at line 1, column 73: nested more than 64 levels deep",
        id="deep-nesting",
    ),
    pytest.param(
        ("sources: {a: {type: generator, rows: " + "9" * 5000 + "}}" + SINK).encode(),
        "pipeline is not valid YAML at line 1, column 38: cannot read the value "
        "'99999999999999999999999999999999999999999999999999999999999… (5002 characters): too many digits",
        id="huge-integer",
    ),
    pytest.param(
        ("sources: &s {a: {type: generator}, b: *s}" + SINK).encode(),
        "pipeline is not valid YAML at line 1, column 10: an alias refers to a node that contains it",
        id="recursive-alias",
    ),
    pytest.param(
        (LAUGHS + "sources: {a: {type: generator}}" + SINK).encode(),
        "pipeline is not valid YAML at line 6, column 5: aliases expand the document to more than 1000000 values",
        id="alias-expansion",
    ),
    pytest.param(
        b"- sources\n- sinks\n", "pipeline must be a mapping with 'sources', 'transforms' and 'sinks'", id="a-list"
    ),
    pytest.param(
        b'sources: {"a\\x1b[31m": {type: generator}}\nsinks: {p: {type: print, from: "a\\x1b[31m"}}\n',
        "source 'a\\x1b[31m': the node name holds a control or other non-printable character",
        id="control-characters-in-a-name",
    ),
    pytest.param(
        ("sources: {a: {type: kafka, topic: t, data_format: json, schema: {id: nope}}}" + SINK).encode(),
        "source 'a' (type 'kafka'): field 'schema': column 'id': unknown column type 'nope'; use one of: bigint, int, "
        "smallint, tinyint, double, float, string, boolean, binary, date, timestamp, decimal(p,s) (got {'id': 'nope'})",
        id="bad-column-type",
    ),
]


@pytest.mark.parametrize(("content", "message"), CASES)
def test_malformed_file_gives_a_report_and_exit_2_never_a_traceback(
    tmp_path: Path, content: bytes, message: str
) -> None:
    path = tmp_path / "pipeline.yaml"
    path.write_bytes(content)
    message = message.replace("{path}", str(path))
    validated = streamling(tmp_path, str(path), "--validate")
    assert validated.returncode == 2, validated.stderr
    assert json.loads(validated.stdout) == {"success": True, "is_valid": False, "errors": [message], "warnings": []}
    assert "Traceback" not in validated.stderr
    ran = streamling(tmp_path, str(path))
    assert ran.returncode == 2
    assert ran.stdout == ""
    assert "Traceback" not in ran.stderr
    if message.startswith("pipeline file"):
        assert ran.stderr.strip() == f"Error: {message}"
    else:
        assert ran.stderr.strip() == f"Error: pipeline '{path}' is invalid:\n  - {message}"
    assert not (tmp_path / "state.db").exists() and not (tmp_path / "checkpoints").exists()


def test_odd_but_valid_names_pass_the_spark_analysis(tmp_path: Path) -> None:
    """Quotes, spaces, dots and non-ASCII letters in node and column names: Spark's temporary views and functions
    take ASCII names only, so an SQL transform named `t-1 ö` once failed with `internal error: Invalid view name`."""
    path = tmp_path / "pipeline.yaml"
    path.write_text(
        """
sources:
  "it's a \\"src\\" ü.x": {type: generator, rows: 3, primary_key: id}
transforms:
  "wätch list":
    type: dynamic_table
    backend_type: InMemory
    backend_entity_name: w
    sql: SELECT name FROM `it's a "src" ü.x`
  "t-1 ö":
    type: sql
    primary_key: id
    sql: SELECT id, amount AS `we"ird col`, dynamic_table_check('wätch list', name) AS seen FROM `it's a "src" ü.x`
sinks:
  "p 1": {type: print, from: "t-1 ö"}
""",
        encoding="utf-8",
    )
    validated = streamling(tmp_path, str(path), "--validate")
    assert validated.returncode == 0, validated.stdout + validated.stderr
    assert json.loads(validated.stdout) == {"success": True, "is_valid": True, "errors": [], "warnings": []}
