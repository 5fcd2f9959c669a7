"""bench/print_sink_tiers.py in a tiny variant, as a user runs it: the Spark-level print sink loaded from its old
revision (its moved imports pointed at where they are now) and the Arrow-level one print the same lines (the script
asserts it), and the result records both contenders' rows/s in every scenario. Speed is not asserted (no timing
assertions in tests)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CONTENDERS = {"before (Spark level)", "after (Arrow level)"}

pytestmark = pytest.mark.bench


def test_print_sink_tiers_bench_records_both_contenders(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            str(REPO / "bench" / "print_sink_tiers.py"),
            *("--rows", "2000", "--batch", "500", "--rounds", "1", "--results", str(tmp_path)),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "identical output: 2000 lines" in done.stdout
    [path] = tmp_path.glob("print_sink_tiers-*.json")
    result = json.loads(path.read_text())
    summary = result["rows_per_second_median"]
    assert set(summary) == {"epoch", "write path, every row", "write path, no row"}
    for scenario, medians in summary.items():
        for name in CONTENDERS:
            assert medians[name] > 0, (scenario, medians)
            [rate] = result["rounds"][scenario][name]
            assert rate > 0, (scenario, name)
        assert medians["after / before"] > 0 and medians["after / before, paired"] > 0, (scenario, medians)
    for scenario in ("write path, every row", "write path, no row"):
        assert set(summary[scenario]["µs per call"]) == CONTENDERS
