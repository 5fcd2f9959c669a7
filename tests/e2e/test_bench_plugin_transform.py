"""bench/plugin_transform.py in a tiny variant, as a user runs it: both contenders complete, write the same rows
(the inserts of the example source), and the result records rows/s and µs per row for each. Speed is not
asserted (no timing assertions in tests)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.bench


def test_plugin_transform_bench_records_both_contenders(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            str(REPO / "bench" / "plugin_transform.py"),
            *("--rows", "30000", "--batch", "10000", "--runs", "1", "--warmup", "0", "--results", str(tmp_path)),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    [path] = tmp_path.glob("plugin_transform-*.json")
    result = json.loads(path.read_text())
    assert result["rows"] == 30000 and result["rows_written_per_run"] == 18_225  # the inserts among seed 0's rows
    assert set(result["contenders"]) == {"plugin", "sql"}
    for stats in result["contenders"].values():
        for key in ("rows_per_sec_wall", "rows_per_sec_run", "us_per_row_wall", "us_per_row_run"):
            assert stats[key]["median"] > 0, (key, stats[key])
        [run] = stats["runs"]
        assert run["returncode"] == 0 and run["extra"]["rows_written"] == 18_225
    assert set(result["plugin_overhead_us_per_row"]) == {"us_per_row_wall", "us_per_row_run", "steady_cpu_us_per_row"}
    assert "plugin transform overhead per row over SQL:" in done.stdout
